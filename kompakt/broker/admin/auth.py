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
    of the token redirects to the login page instead of answering 401 JSON (its JSON, asked by
    `.json`, `?_format=json` or `Accept: application/json`, answers the API's 401).
  * Open reads are metadata (offsets, configs, groups, cleaner state), as the API's own. The
    console's record browser shows records, so with a token set it always needs it, like a change:
    otherwise a broker listening beyond loopback (allowed once a token is set) would hand every
    record to anyone who reaches the admin port, past the Kafka listeners' SASL and ACLs.
  * Browsers (browser_guard, every path, /v1 and /console alike): a state-changing request whose
    `Origin` names another site is refused (403): without a token a web page elsewhere could make
    the operator's browser post to a loopback API (a form or a no-cors fetch needs no preflight).
    Tools that send no Origin (kompakt admin, curl) pass. And without a token, a request whose
    `Host` is not a loopback name or address is refused (403): a tokenless API listens on
    loopback only (check_exposure), so another Host is a DNS-rebinding page reading or posting
    to it as if it were its own site.
  * Wrong tokens (TokenThrottle): after FREE_FAILURES wrong tokens in a row from one client
    address (a header, the console's cookie or its sign-in form), that client waits before its
    next try is even checked: 1 s, then twice as long after each further wrong one, at most 60 s;
    a try during the wait answers 429 with `Retry-After` and says how long, a right token clears
    the count. Kafka slows guessing the same way on its listeners, per connection
    (`connection.failed.authentication.delay.ms`, 100 ms before closing a failed SASL
    authentication); an HTTP client needs no new connection per try, hence a per-address wait.
The token is compared in constant time and never logged.
"""
from __future__ import annotations

import hmac
import ipaddress
import math
import ssl
import time
from typing import Awaitable, Callable

from aiohttp import web

from kompakt.config.broker_config import ConfigError

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
COOKIE = "kompakt_admin_token"
CONSOLE = "/console"
CONSOLE_OPEN = ("/console/login", "/console/logout", "/console/static/")   # reachable without the token
FREE_FAILURES = 3            # wrong tokens in a row a client may send before it must wait (typos)
FIRST_WAIT_S = 1.0           # the wait after the FREE_FAILURES-th; doubled after each further one
MAX_WAIT_S = 60.0
FORGET_AFTER_S = 900.0       # a client quiet this long after its wait starts afresh
MAX_CLIENTS = 4096           # addresses remembered at most (the oldest go first)


class TokenThrottle:
    """Per-client backoff after wrong admin tokens (module docstring). `clock` is passed in (tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._clients: dict[str, tuple[int, float]] = {}   # address -> (wrong tokens in a row, wait until)

    def wait_s(self, client: str) -> float:
        """How long `client` must still wait before a token it sends is checked (0: now)."""
        entry = self._clients.get(client)
        return 0.0 if entry is None else max(0.0, entry[1] - self._clock())

    def failed(self, client: str) -> float:
        """Count a wrong token from `client`; the wait it now has before its next try."""
        now = self._clock()
        failures, until = self._clients.pop(client, (0, now))
        if now - until > FORGET_AFTER_S:
            failures = 0
        failures += 1
        wait = 0.0 if failures < FREE_FAILURES else min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** (failures - FREE_FAILURES))
        self._clients[client] = (failures, now + wait)     # re-inserted: the dict's order is the age
        while len(self._clients) > MAX_CLIENTS:
            del self._clients[next(iter(self._clients))]
        return wait

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


THROTTLE_KEY = web.AppKey("admin_token_throttle", TokenThrottle)


def client_of(request: web.Request) -> str:
    """The address a wrong token is counted against (a proxy in front makes all clients one)."""
    return request.remote or "unknown"


def too_many_message(wait_s: float) -> str:
    return (f"too many wrong admin tokens from this address: try again in {math.ceil(wait_s)} s "
            f"(each further wrong token doubles the wait, up to {MAX_WAIT_S:.0f} s)")


def too_many(wait_s: float) -> web.Response:
    return web.json_response({"error": "too_many_attempts", "status": 429, "message": too_many_message(wait_s)},
                             status=429, headers={"Retry-After": str(math.ceil(wait_s))})


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


def _host_name(host: str) -> str:
    """`Host` without its port: 127.0.0.1:9644 -> 127.0.0.1, [::1]:9644 -> ::1."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def browser_guard(token: str | None):
    """Refuse cross-site posts (always) and foreign Host names (without a token): see the module
    docstring. Runs first, so the refusal is the same with or without a token."""

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        host = request.headers.get("Host")    # absent: not a browser (HTTP/1.0 tools), nothing to check
        if token is None and host is not None and not is_loopback(_host_name(host).lower()):
            return web.Response(status=403, content_type="text/plain",
                                text=f"refused: Host {host!r} is not a loopback name; this admin API has "
                                     f"no token and answers only to 127.0.0.1, ::1 or localhost")
        if request.method in STATE_CHANGING:
            origin = request.headers.get("Origin")
            if origin is not None:
                from urllib.parse import urlsplit
                if origin == "null" or urlsplit(origin).netloc.lower() != request.host.lower():
                    return web.Response(status=403, content_type="text/plain",
                                        text=f"refused: a form posted from {origin} to this admin API ({request.host}); "
                                             f"open the console's own page and submit it there")
        return await handler(request)
    return guard


def _is_console(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")


def _wants_json(request: web.Request) -> bool:
    # a console page's JSON (console.render.wants_json's rule) is for scripts and the page's own
    # poll: they get the API's 401, not a redirect to an HTML sign-in page
    return (request.query.get("_format") == "json" or request.path.endswith(".json")
            or request.headers.get("Accept", "").startswith("application/json"))


def _shows_records(path: str) -> bool:
    # /console/topics/{topic}/records[.json]: a topic name has no '/', so this is the browser only
    return path.startswith(CONSOLE + "/topics/") and path.endswith(("/records", "/records.json"))


def token_middleware(token: str, protect_reads: bool, throttle: TokenThrottle):
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def require_token(request: web.Request,
                            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        console = _is_console(request.path)
        if console and request.path.startswith(CONSOLE_OPEN):
            return await handler(request)
        if request.method in STATE_CHANGING or protect_reads or (console and _shows_records(request.path)):
            given = request.headers.get("Authorization", "").encode()
            from_cookie = console and not given and COOKIE in request.cookies
            if from_cookie:
                given = f"Bearer {request.cookies[COOKIE]}".encode()
            client = client_of(request)
            if given and throttle.wait_s(client) > 0:
                return too_many(throttle.wait_s(client))
            if given and hmac.compare_digest(given, expected):
                throttle.succeeded(client)
            else:
                if given:
                    throttle.failed(client)
                if console and not _wants_json(request):
                    from urllib.parse import quote, urlparse
                    # back where the browser was, query included (a record browser's partition and offset)
                    if request.method == "GET":
                        back = request.path_qs
                    else:
                        referer = urlparse(request.headers.get("Referer", ""))
                        back = referer.path + (f"?{referer.query}" if referer.query else "")
                    redirect = web.HTTPSeeOther(f"/console/login?next={quote(back or '/console/broker', safe='')}")
                    if from_cookie:      # a stale cookie (the token changed): dropped, so it is tried once
                        redirect.del_cookie(COOKIE, path=CONSOLE)
                    raise redirect
                return web.json_response(
                    {"error": "unauthorized", "status": 401,
                     "message": "this call needs the admin API token: Authorization: Bearer <admin.api.token> "
                                "(kompakt admin --token, or $KOMPAKT_ADMIN_TOKEN)"},
                    status=401, headers={"WWW-Authenticate": 'Bearer realm="kompakt-admin"'})
        return await handler(request)
    return require_token
