"""Who may drive the admin HTTP API: a bearer token, loopback by default, optional TLS.

Rules (issue 11):
  * `admin.api.token` (or the first line of `admin.api.token.file`) set: every state-changing call
    (POST, PUT, PATCH, DELETE) needs `Authorization: Bearer <token>`, else 401 with
    `WWW-Authenticate: Bearer`. Reads (`GET`, `HEAD`) stay open, `/metrics`, `/health` and `/ready`
    included, unless `admin.api.token.required.for.reads=true`, which protects every path.
  * `metrics.host` other than a loopback address without a token: the broker refuses to start
    (anyone on the network could pause the cleaner or swap a partition).
  * `admin.api.ssl.enabled=true`: HTTPS with the broker's `ssl.keystore.*` PEM keys (tls.py).
  * The web console (/console, kompakt/console) is under the same rule. A browser cannot add the
    header to a form or an <img>, so under /console the token may instead come from the cookie
    COOKIE, which POST /console/login sets after checking the token (HttpOnly, SameSite=Strict:
    a form on another site cannot post with it; Secure on HTTPS). A console page refused for want
    of the token redirects to the login page instead of answering 401 JSON.
  * Open reads are metadata (offsets, configs, groups, cleaner state), as the API's own. The
    console's record browser shows records, so with a token set it always needs it, like a change:
    otherwise a broker listening beyond loopback (allowed once a token is set) would hand every
    record to anyone who reaches the admin port, past the Kafka listeners' SASL and ACLs.
The token is compared in constant time and never logged.
"""
from __future__ import annotations

import hmac
import ipaddress
import ssl
from typing import Awaitable, Callable

from aiohttp import web

from kompakt.config.broker_config import ConfigError

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
COOKIE = "kompakt_admin_token"
CONSOLE = "/console"
CONSOLE_OPEN = ("/console/login", "/console/static/")   # reachable without the token


def admin_token(config) -> str | None:
    token = config["admin.api.token"]
    path = config["admin.api.token.file"]
    if not token and path:
        try:
            with open(path, encoding="utf-8") as fh:
                token = fh.readline().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read admin.api.token.file {path}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"admin.api.token.file {path} is empty: put the token on its first line")
    return token or None


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    if token is None and not is_loopback(host):
        raise ConfigError(f"the admin API would listen on {host} without a token: anyone who reaches it could pause "
                          f"the cleaner or swap partitions. Set admin.api.token (or admin.api.token.file), or bind "
                          f"metrics.host=127.0.0.1")


def admin_ssl_context(config) -> ssl.SSLContext | None:
    if not config["admin.api.ssl.enabled"]:
        return None
    from kompakt.broker.security.tls import server_context
    return server_context(config.__getitem__, "admin-api")


def token_matches(token: str, given: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def _is_console(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")


def _shows_records(path: str) -> bool:
    # /console/topics/{topic}/records[.json]: a topic name has no '/', so this is the browser only
    return path.startswith(CONSOLE + "/topics/") and path.endswith(("/records", "/records.json"))


def token_middleware(token: str, protect_reads: bool):
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def require_token(request: web.Request,
                            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        console = _is_console(request.path)
        if console and request.path.startswith(CONSOLE_OPEN):
            return await handler(request)
        if request.method in STATE_CHANGING or protect_reads or (console and _shows_records(request.path)):
            given = request.headers.get("Authorization", "").encode()
            if console and not given and COOKIE in request.cookies:
                given = f"Bearer {request.cookies[COOKIE]}".encode()
            if not hmac.compare_digest(given, expected):
                if console:
                    from urllib.parse import quote, urlparse
                    back = request.path if request.method == "GET" else urlparse(request.headers.get("Referer", "")).path
                    raise web.HTTPSeeOther(f"/console/login?next={quote(back or '/console/broker', safe='')}")
                return web.json_response(
                    {"error": "unauthorized", "status": 401,
                     "message": "this call needs the admin API token: Authorization: Bearer <admin.api.token> "
                                "(kompakt admin --token, or $KOMPAKT_ADMIN_TOKEN)"},
                    status=401, headers={"WWW-Authenticate": 'Bearer realm="kompakt-admin"'})
        return await handler(request)
    return require_token
