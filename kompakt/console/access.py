"""Who may use the console: the admin API's token through a sign-in page, and same-origin forms.

With `admin.api.token` set a browser cannot add the Bearer header to a form or an <img>, so
POST /console/login checks the token and keeps it in a cookie for /console (HttpOnly,
SameSite=Strict, Secure on HTTPS), which kompakt.broker.admin.auth's middleware accepts under
/console only. `same_origin` refuses (403) a form posted from a page of another origin: the
console's forms are plain HTML posts, which any web page could otherwise make the operator's
browser send to a loopback broker without a token.
"""
from __future__ import annotations

from typing import Awaitable, Callable

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


@web.middleware
async def same_origin(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """Refuse a console form posted from another site (cross-site request forgery): a page
    elsewhere could otherwise make the operator's browser delete a topic on a loopback broker
    that has no token. Browsers name the posting page's origin in `Origin`; tools that send none
    (curl, scripts) are not browsers and pass. Runs before the token check, so the refusal is
    the same with or without a token."""
    if request.method not in ("GET", "HEAD", "OPTIONS") and request.path.startswith("/console"):
        origin = request.headers.get("Origin")
        if origin is not None:
            from urllib.parse import urlsplit
            if origin == "null" or urlsplit(origin).netloc.lower() != request.host.lower():
                return web.Response(status=403, content_type="text/plain",
                                    text=f"refused: a form posted from {origin} to this console "
                                         f"({request.host}); open the console's own page and submit it there")
    return await handler(request)
