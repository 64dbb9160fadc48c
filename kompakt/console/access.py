"""Who may use the console: the admin API's token through a sign-in page, and same-origin forms.

With `admin.api.token` set a browser cannot add the Bearer header to a form or an <img>, so
POST /console/login checks the token and keeps it in a cookie for /console (HttpOnly,
SameSite=Strict, Secure on HTTPS), which kompakt.broker.admin.auth's middleware accepts under
/console only. Forms posted from a page of another origin, and (without a token) pages reached
under a foreign Host name, are refused by kompakt.broker.admin.auth.browser_guard, for the whole
admin listener: the console's forms are plain HTML posts, which any web page could otherwise make
the operator's browser send to a loopback broker without a token.
"""
from __future__ import annotations

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
    from kompakt.broker.admin.auth import COOKIE, token_matches
    form = await request.post()
    token = form.get("token") or ""
    target = form.get("next") or "/console/broker"
    if not target.startswith("/console"):
        target = "/console/broker"
    expected = request.app.get(TOKEN_KEY)
    if expected is None or not token_matches(expected, token):
        return await render(request, "login.html", {"next": target, "error": {"message": "that is not the admin API token"}},
                            status=401, title="Sign in")
    response = web.HTTPSeeOther(target)
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/console",
                        secure=request.secure)
    raise response
