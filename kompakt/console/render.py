"""How a console page is answered: HTML from a Jinja2 template, or the same data as JSON.

Every page answers JSON for `?_format=json`, a `.json` suffix on its path, or `Accept:
application/json` (Datasette's convention); the JSON is the dict the page is drawn from
(data.py). `done(location, message)` is the 303 a form answers with (the message shows on the
page it lands on); `error_page` draws an ApiError (or answers its JSON).

Invariant: Jinja2 is imported on the first page drawn, never when the admin app starts.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from kompakt.broker.admin.auth import COOKIE
from kompakt.broker.admin.views import ApiError, jsonable

BROKER_KEY = web.AppKey("console_broker", object)
TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
REFRESH_MS = 3000

_env = None


def _environment():
    global _env
    if _env is None:
        import jinja2

        env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                 undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
        env.filters.update(bytes=human_bytes, ms=ms_time, pct=percent, num=number, duration=duration, q=quote)
        _env = env
    return _env


def human_bytes(n: Any) -> str:
    if n is None or n == "":
        return ""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def ms_time(ms: Any) -> str:
    """A time as UTC, labelled: the server's own time zone means nothing to a browser elsewhere."""
    if ms is None or ms == "" or int(ms) < 0:
        return ""
    return _dt.datetime.fromtimestamp(int(ms) / 1000, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def percent(ratio: Any) -> str:
    return "" if ratio is None else f"{100 * float(ratio):.1f}%"


def number(n: Any) -> str:
    return "" if n is None else f"{n:,}"


def duration(seconds: Any) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + (f"{h}h " if d or h else "") + f"{m}m {s}s"


def wants_json(request: web.Request) -> bool:
    return (request.query.get("_format") == "json" or request.path.endswith(".json")
            or request.headers.get("Accept", "").startswith("application/json"))


def json_url(request: web.Request) -> str:
    query = dict(request.query)
    query["_format"] = "json"
    return f"{request.path}?{urlencode(query)}"


async def render(request: web.Request, template: str, data: dict[str, Any], *, status: int = 200,
                 title: str = "", nav: str = "") -> web.Response:
    if wants_json(request):
        return web.json_response(jsonable(data), status=status, dumps=lambda v: json.dumps(v, indent=1))
    context = {"data": data, "title": title, "nav": nav, "json_url": json_url(request),
               "message": request.query.get("done"), "refresh_ms": REFRESH_MS, "path": request.path,
               "query": dict(request.query), "now_ms": int(time.time() * 1000),
               # the sign-in page offers no sign-out (its one form is the sign-in)
               "signed_in": COOKIE in request.cookies and template != "login.html"}
    context.update(data)
    html = _environment().get_template(template).render(**context)
    return web.Response(text=html, content_type="text/html", status=status)


def broker_of(request: web.Request) -> Any:
    return request.app[BROKER_KEY]


async def error_page(request: web.Request, exc: ApiError, nav: str = "") -> web.Response:
    if wants_json(request):
        return web.json_response(exc.body(), status=exc.status)
    return await render(request, "error.html", {"error": exc.body()}, status=exc.status, title="Error", nav=nav)


def done(location: str, message: str) -> web.HTTPSeeOther:
    sep = "&" if "?" in location else "?"
    return web.HTTPSeeOther(f"{location}{sep}{urlencode({'done': message})}")
