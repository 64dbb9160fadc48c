"""Who may use the console: the admin API's token through a sign-in page, and same-origin forms.

With `admin.api.token` set a browser cannot add the Bearer header to a form or an <img>, so
POST /console/login checks the token and keeps it in a cookie for /console (HttpOnly,
SameSite=Strict, Secure on HTTPS), which kompakt.broker.admin.auth's middleware accepts under
/console only. Forms posted from a page of another origin, and (without a token) pages reached
under a foreign Host name, are refused by kompakt.broker.admin.auth.browser_guard, for the whole
admin listener: the console's forms are plain HTML posts, which any web page could otherwise make
the operator's browser send to a loopback broker without a token.

Wrong tokens typed into the sign-in page count against the client's address in the admin app's
TokenThrottle (kompakt.broker.admin.auth): after a few in a row the page says how long to wait
(429, `Retry-After`) and checks nothing meanwhile. POST /console/logout forgets the cookie.
"""
from __future__ import annotations

import math

from aiohttp import web

from kompakt.console.render import render

routes = web.RouteTableDef()
TOKEN_KEY = web.AppKey("console_token", object)


@routes.get("/console/login")
async def login_page(request: web.Request) -> web.Response:
    return await render(request, "login.html", {"next": request.query.get("next", "/console/broker"),
                                                "error": None}, title="Sign in")


@routes.post("/console/login")
async def login(request: web.Request) -> web.StreamResponse:
    from kompakt.broker.admin.auth import COOKIE, THROTTLE_KEY, client_of, too_many_message, token_matches
    form = await request.post()
    token = form.get("token") or ""
    target = form.get("next") or "/console/broker"
    if not target.startswith("/console"):
        target = "/console/broker"
    expected = request.app.get(TOKEN_KEY)
    throttle, client = request.app[THROTTLE_KEY], client_of(request)
    wait = throttle.wait_s(client)
    if wait > 0:
        response = await render(request, "login.html", {"next": target, "error": {"message": too_many_message(wait)}},
                                status=429, title="Sign in")
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response
    if expected is None or not token_matches(expected, token):
        wait = throttle.failed(client)
        message = "that is not the admin API token" + (f"; {too_many_message(wait)}" if wait > 0 else "")
        return await render(request, "login.html", {"next": target, "error": {"message": message}},
                            status=401, title="Sign in")
    throttle.succeeded(client)
    response = web.HTTPSeeOther(target)
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/console",
                        secure=request.secure)
    raise response


@routes.post("/console/logout")
async def logout(request: web.Request) -> web.StreamResponse:
    """Forget the token's cookie; back to the sign-in page. Open (a sign-out needs no token) and,
    as every form, refused when posted from another site (auth.browser_guard)."""
    from kompakt.broker.admin.auth import COOKIE, CONSOLE
    response = web.HTTPSeeOther("/console/login?done=Signed+out.")
    response.del_cookie(COOKIE, path=CONSOLE)
    raise response
