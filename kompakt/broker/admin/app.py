"""The admin HTTP API on the metrics port: Prometheus `/metrics`, health, and compaction control.

Role: an aiohttp application running on the broker's own event loop, bound to
`metrics.host:metrics.port` (`metrics.port=0` disables it). It answers the questions Kafka users
cannot answer without reading broker logs (seed 000: "Can I trigger compaction? No." / "When did
compaction last run?" / "How many records are on a topic?"):

| method | path                                         | what                                          |
|--------|----------------------------------------------|-----------------------------------------------|
| GET    | /metrics                                     | Prometheus text format (broker/observability) |
| GET    | /health                                      | 200 while the process serves HTTP (liveness)  |
| GET    | /ready                                       | 200 once logs are loaded and listeners bound, else 503; names offline log dirs (503 when none is left) |
| GET    | /openapi.json                                | OpenAPI 3 description of all of this          |
| GET    | /v1/partitions                               | every partition: sizes, offsets, cleaner state; `?topic=t&count=true` adds record counts and the topic's total |
| GET    | /v1/partitions/{topic}/{partition}           | one partition, with segments and cleaner detail; `?count=true` adds the exact record count (from batch headers) |
| POST   | /v1/partitions/{topic}/{partition}/compact   | clean now (ignores min.cleanable.dirty.ratio, never the active segment, LSO or min.compaction.lag.ms; `?roll=true` rolls the active segment first); 200 with stats if done within `?wait=` seconds (default 5), else 202 + Location of a job |
| GET    | /v1/jobs/{id}                                | a compact job: running / done (stats) / failed |
| POST   | /v1/partitions/{topic}/{partition}/pause     | pause cleaning (reentrant: n pauses need n resumes) |
| POST   | /v1/partitions/{topic}/{partition}/resume    | undo one pause; 409 when not paused           |
| POST   | /v1/partitions/{topic}/{partition}/adopt     | body {"staging_dir": ...}: swap in a pipeline-compacted staging dir with cleaning paused, then move the cleaner point to its end; 409 when stale |
| GET    | /v1/cleaner                                  | workers, current jobs, throttle, Kafka cleaner figures |
| GET    | /v1/transactions                             | every transactional id: state, producer id/epoch, partitions, timeout, start; `?state=Ongoing` filters |
| GET    | /v1/partitions/{topic}/{partition}/whatif    | replay the newest records under other compaction settings (`?set=k=v`, `max_records`, `format=png`), whatif.py |
| GET    | /console/...                                 | the web console (kompakt/console/pages.py): pages for people, each also as JSON |

Access (auth.py): with `admin.api.token` set, state-changing calls need `Authorization: Bearer
<token>` (401 otherwise); a non-loopback `metrics.host` without a token refuses to start;
`admin.api.ssl.enabled` serves HTTPS with the broker's PEM keys.

The JSON views of partitions and the cleaner live in views.py, the OpenAPI document in
openapi.py. Errors are JSON `{"error": <kind>, "message": <what and how to fix>, "status": n}`
(plus `"kafka_error"` when a Kafka error code is behind it): 400 bad input, 404 unknown topic or
partition out of range, 409 a request the partition's state forbids (compact on a delete-policy
topic, resume when not paused), 501/503 a missing or disabled component.

Invariants: handlers never block the loop on disk work or long walks (pause waits, adoption,
/metrics rendering and the partition list run in threads);
a failing handler answers 500 JSON and never takes the broker down; `start_admin` binds its socket
before returning, so a port clash fails the broker's start, not a later scrape.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import logging
import os
import socket
import ssl
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable, Mapping

from aiohttp import web

from kompakt.broker.admin.auth import (THROTTLE_KEY, TokenThrottle, admin_ssl_context, admin_token, browser_guard,
                                       check_exposure, token_middleware)
from kompakt.broker.admin.record_count import count_records
from kompakt.broker.admin.views import (ApiError, cleaner_of, cleaner_view, cleanup_policy, is_compacted, jsonable, kafka_error_of, log_manager_of, partition_view,
                                        resolve_partition, topic_partitions, transactions_view)
from kompakt.broker.observability.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)

DEFAULT_COMPACT_WAIT_S = 5.0
MAX_COMPACT_WAIT_S = 300.0
MAX_JOBS_KEPT = 256
SHUTDOWN_TIMEOUT_S = 2.0

# --- the handle ----------------------------------------------------------------------------------
class AdminHandle:
    """A started admin server. `await handle` waits until it serves (start_admin binds at once)."""

    def __init__(self, app: web.Application | None, sock: socket.socket | None,
                 ssl_context: ssl.SSLContext | None = None):
        self.app, self.sock, self.ssl_context = app, sock, ssl_context
        self.runner: web.AppRunner | None = None
        self.host: str | None = None
        self.port: int | None = None
        if sock is not None:
            self.host, self.port = sock.getsockname()[:2]
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str | None:
        if self.port is None:
            return None
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"{'https' if self.ssl_context else 'http'}://{host}:{self.port}"

    async def _serve(self) -> "AdminHandle":
        # A request still running at shutdown (a compact waiting up to ?wait= seconds) gets this
        # long to finish before it is cancelled; aiohttp's 60 s default would outlast the broker's
        # shutdown.timeout.ms and a container runtime's stop grace period.
        self.runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock, ssl_context=self.ssl_context).start()
        # the bound address as it is (self.url names loopback for 0.0.0.0, which would hide from
        # an operator that the API is reachable from outside)
        log.info("admin API, /metrics and the web console (/console) listening on %s://%s:%d",
                 "https" if self.ssl_context else "http", self.host, self.port)
        return self

    def __await__(self):
        if self._task is None:
            return _done(self).__await__()
        return self._task.__await__()


async def _done(value):
    return value


def start_admin(broker: Any, *, host: str | None = None, port: int | None = None) -> AdminHandle:
    """Bind `metrics.host:metrics.port` now and start serving on the running loop.

    Call from a coroutine on the broker's loop. `port`/`host` override the config (tests use 0 for
    an ephemeral port); a configured `metrics.port` of 0 disables the server (the handle's port is None).
    """
    config = getattr(broker, "config", None)
    if port is None:
        port = int(config["metrics.port"]) if config is not None else 0
        if port == 0:
            log.info("admin API disabled (metrics.port=0)")
            return AdminHandle(None, None)
    if host is None:
        host = str(config["metrics.host"]) if config is not None else "127.0.0.1"
    metrics = getattr(broker, "metrics", None)
    if metrics is not None and hasattr(metrics, "attach"):
        metrics.attach(broker)
    token, ssl_context = None, None
    if config is not None:
        token = admin_token(config)
        check_exposure(host, token)
        ssl_context = admin_ssl_context(config)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, reuse_port=False)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot bind the admin API to {host}:{port} ({exc.strerror}); "
                                 f"set metrics.port to a free port or 0 to disable it") from exc
    sock.setblocking(False)
    protect_reads = bool(config["admin.api.token.required.for.reads"]) if token else False
    handle = AdminHandle(make_app(broker, token=token, protect_reads=protect_reads), sock, ssl_context)
    handle._task = asyncio.get_running_loop().create_task(handle._serve(), name="kompakt-admin")
    return handle


async def stop_admin(handle: AdminHandle | None) -> None:
    """Stop serving; idempotent."""
    if handle is None or handle.app is None:
        return
    if handle._task is not None and not handle._task.done():
        try:
            await handle._task
        except Exception:
            log.exception("admin API failed to start")
    if handle.runner is not None:
        await handle.runner.cleanup()
        handle.runner = None
    if handle.sock is not None:
        handle.sock.close()
        handle.sock = None


# --- application ---------------------------------------------------------------------------------
BROKER_KEY = web.AppKey("broker", object)
JOBS_KEY = web.AppKey("jobs", object)


@web.middleware
async def _errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
        message = {404: f"no such endpoint {request.path}; see /openapi.json",
                   405: f"{request.method} is not allowed on {request.path}; see /openapi.json"}.get(exc.status, exc.reason)
        return web.json_response({"error": kind, "message": message, "status": exc.status}, status=exc.status,
                                 headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"})
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # never take the broker down; tell the caller what broke
        mapped = kafka_error_of(exc)
        if mapped is not None:
            return web.json_response(mapped.body(), status=mapped.status)
        log.exception("admin request %s %s failed", request.method, request.path)
        return web.json_response({"error": "internal", "message": f"{type(exc).__name__}: {exc}",
                                  "status": 500}, status=500)


# --- helpers -------------------------------------------------------------------------------------
def _broker(request: web.Request) -> Any:
    return request.app[BROKER_KEY]


async def _maybe_await(value: Any) -> Any:
    if isinstance(value, concurrent.futures.Future):
        return await asyncio.wrap_future(value)
    if inspect.isawaitable(value):
        return await value
    return value


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a cleaner hook: coroutine functions are awaited on the loop; plain functions (which may
    block, e.g. abort_and_pause_cleaning waiting for a running clean to stop) run in a thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    return await _maybe_await(await asyncio.to_thread(fn, *args))


def _wait_param(request: web.Request) -> float:
    raw = request.query.get("wait", str(DEFAULT_COMPACT_WAIT_S))
    try:
        wait = float(raw)
    except ValueError:
        raise ApiError(400, "bad_wait", f"wait must be a number of seconds, got {raw!r}")
    if not 0 <= wait <= MAX_COMPACT_WAIT_S:
        raise ApiError(400, "bad_wait", f"wait must be between 0 and {MAX_COMPACT_WAIT_S:g} seconds, got {wait:g}")
    return wait


# --- routes --------------------------------------------------------------------------------------
routes = web.RouteTableDef()


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    m = getattr(_broker(request), "metrics", None)
    if m is None:
        raise ApiError(503, "no_metrics", "the broker has no metrics registry")
    # Rendering reads every log and the cleaner's view of it: with a thousand partitions that is
    # tens to hundreds of milliseconds of Python, so it runs in a thread and Kafka requests on the
    # loop keep flowing during a scrape. (Collectors only read; the cleaner's threads do the same.)
    body = await asyncio.to_thread(m.render)
    response = web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
    if len(body) > 4096:  # Prometheus asks for gzip; ~10x smaller on big brokers (compressed off-loop)
        response.enable_compression()
    return response


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@routes.get("/ready")
async def ready(request: web.Request) -> web.Response:
    broker = _broker(request)
    manager = getattr(broker, "log_manager", None)
    offline = list(getattr(manager, "offline_dirs", None) or [])
    if getattr(broker, "ready", False):
        if not offline:
            return web.json_response({"ready": True})
        # a failed log dir: its partitions answer KAFKA_STORAGE_ERROR, the others are served
        live = bool(getattr(manager, "log_dirs", None))
        return web.json_response({"ready": live, "offline_log_dirs": offline,
                                  "message": f"log dirs offline after an I/O error: {', '.join(offline)}"
                                             + ("" if live else "; no log dir is left online")},
                                 status=200 if live else 503)
    return web.json_response({"ready": False, "message": "logs are loading or listeners are not bound yet"},
                             status=503)


@routes.get("/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    from kompakt.broker.admin.openapi import OPENAPI
    return web.json_response(OPENAPI)


@routes.get("/v1/partitions")
async def list_partitions(request: web.Request) -> web.Response:
    broker = _broker(request)
    manager = log_manager_of(broker)
    topic = request.query.get("topic")
    logs = manager.all_logs()
    items = sorted(logs.items(), key=lambda kv: (kv[0][0], kv[0][1]))
    if topic is not None:
        if topic not in topic_partitions(manager):
            raise ApiError(404, "unknown_topic", f"unknown topic {topic!r}", kafka_error="UNKNOWN_TOPIC_OR_PARTITION")
        items = [kv for kv in items if kv[0][0] == topic]
    count = _flag(request, "count")
    if count and topic is None:
        raise ApiError(400, "count_needs_topic", "count=true reads every batch header of the partitions listed; "
                                                 "name one topic with ?topic=<name>")

    def build() -> dict[str, Any]:
        views = [partition_view(broker, tp, lg) for tp, lg in items]
        out: dict[str, Any] = {"partitions": views}
        if count:
            for view, (_, lg) in zip(views, items):
                view["records"] = count_records(lg)
            out["total_records"] = sum(v["records"]["records"] for v in views)
        return out

    return web.json_response(await asyncio.to_thread(build))


def _flag(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0", ""):
        raise ApiError(400, f"bad_{name}", f"{name} must be true or false, got {raw!r}")
    return raw in ("true", "1", "")


@routes.get("/v1/partitions/{topic}/{partition}")
async def get_partition(request: web.Request) -> web.Response:
    broker = _broker(request)
    tp, lg = resolve_partition(broker, request.match_info["topic"], request.match_info["partition"])
    count = _flag(request, "count")

    def build() -> dict[str, Any]:
        # off the loop as the list is: each segment's largest timestamp and mtime may read the disk
        view = partition_view(broker, tp, lg, detail=True)
        if count:
            view["records"] = count_records(lg)
        return view

    return web.json_response(await asyncio.to_thread(build))


class Jobs:
    """Compact jobs that outlived the request's wait, for GET /v1/jobs/{id}. Bounded: oldest go first."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.jobs: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def add(self, tp: Any, task: asyncio.Future) -> dict[str, Any]:
        job_id = str(next(self._ids))
        job = {"id": job_id, "topic": tp[0], "partition": tp[1], "state": "running",
               "started_ms": int(time.time() * 1000), "status_url": f"/v1/jobs/{job_id}"}
        self.jobs[job_id] = job
        while len(self.jobs) > MAX_JOBS_KEPT:
            self.jobs.popitem(last=False)
        task.add_done_callback(lambda t: self._finish(job, t))
        return job

    @staticmethod
    def _finish(job: dict[str, Any], task: asyncio.Future) -> None:
        job["finished_ms"] = int(time.time() * 1000)
        if task.cancelled():
            job.update(state="failed", error={"error": "cancelled", "message": "the clean was cancelled"})
        elif task.exception() is not None:
            job.update(state="failed", error=_error_body(task.exception()))
        else:
            job.update(state="done", stats=jsonable(task.result()))


def _error_body(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ApiError):
        return exc.body()
    mapped = kafka_error_of(exc)
    if mapped is not None:
        return mapped.body()
    if type(exc) is RuntimeError:  # the cleaner is stopping or not running: try again later
        return {"error": "cleaner_unavailable", "message": str(exc), "status": 503}
    return {"error": "internal", "message": f"{type(exc).__name__}: {exc}", "status": 500}


async def start_compact(broker: Any, topic: str, partition: str, *, roll: bool = False) -> tuple[Any, asyncio.Future]:
    """Check that the partition may be cleaned now and start the clean: (tp, the clean's future,
    whose result is the clean's figures). ApiError 404/409/503 when it may not (also the web
    console's "compact now")."""
    tp, lg = resolve_partition(broker, topic, partition)
    if not is_compacted(lg):
        raise ApiError(409, "not_compacted", f"{tp[0]}-{tp[1]} has cleanup.policy={','.join(cleanup_policy(lg)) or 'delete'}; "
                                             "only cleanup.policy=compact logs are compacted (alter the topic's "
                                             "cleanup.policy to compact first)",
                       kafka_error="INVALID_CONFIG")
    cleaner = cleaner_of(broker, "compact")
    paused = cleaner_view(broker, tp, lg).get("paused_count") or 0
    if paused:
        raise ApiError(409, "paused", f"cleaning of {tp[0]}-{tp[1]} is paused ({paused} pause(s) outstanding); "
                                      "POST .../resume once per pause first")
    if roll:
        # `?roll=true`: the active segment is never cleaned, so roll it first and everything
        # written so far becomes cleanable (kompakt.testing's compact helper)
        await asyncio.to_thread(lg.roll)
    return tp, asyncio.ensure_future(_maybe_await(cleaner.clean_now(tp)))


@routes.post("/v1/partitions/{topic}/{partition}/compact")
async def compact(request: web.Request) -> web.Response:
    broker = _broker(request)
    resolve_partition(broker, request.match_info["topic"], request.match_info["partition"])   # 404 first
    wait = _wait_param(request)
    tp, task = await start_compact(broker, request.match_info["topic"], request.match_info["partition"],
                                   roll=request.query.get("roll", "").lower() in ("1", "true", "yes"))
    done, _ = await asyncio.wait({task}, timeout=wait)
    if task in done:
        exc = task.exception()
        if exc is not None:
            body = _error_body(exc)
            if body["status"] == 500:
                log.error("compact-now of %s-%s failed: %s", tp[0], tp[1], body["message"], exc_info=exc)
            return web.json_response(body, status=body["status"])
        return web.json_response({"topic": tp[0], "partition": tp[1], "state": "done",
                                  "stats": jsonable(task.result())})
    job = request.app[JOBS_KEY].add(tp, task)
    return web.json_response(job, status=202, headers={"Location": job["status_url"]})


@routes.get("/v1/jobs/{job_id}")
async def get_job(request: web.Request) -> web.Response:
    job = request.app[JOBS_KEY].jobs.get(request.match_info["job_id"])
    if job is None:
        raise ApiError(404, "unknown_job", f"no compact job {request.match_info['job_id']!r} "
                                           f"(the last {MAX_JOBS_KEPT} jobs are kept)")
    return web.json_response(job)


async def pause_cleaning(broker: Any, topic: str, partition: str) -> dict[str, Any]:
    """Pause one partition's cleaning (aborting a running clean); its cleaner view after. Also the
    web console's pause button."""
    tp, lg = resolve_partition(broker, topic, partition)
    cleaner = cleaner_of(broker, "pause cleaning")
    await _call(cleaner.abort_and_pause_cleaning, tp)
    log.info("cleaning of %s-%s paused through the admin API", tp[0], tp[1])
    return {"topic": tp[0], "partition": tp[1], "cleaner": cleaner_view(broker, tp, lg)}


async def resume_cleaning(broker: Any, topic: str, partition: str) -> dict[str, Any]:
    """Undo one pause (409 when not paused); its cleaner view after. Also the console's resume."""
    tp, lg = resolve_partition(broker, topic, partition)
    cleaner = cleaner_of(broker, "resume cleaning")
    try:
        await _call(cleaner.resume_cleaning, tp)
    except Exception as exc:
        if kafka_error_of(exc) is not None:
            raise
        # Kafka's resumeCleaning raises IllegalStateException when the partition is not paused.
        # Say it in the operator's words; the state machine's own message is for the log.
        log.debug("resume of %s-%d refused: %s", tp[0], tp[1], exc)
        raise ApiError(409, "not_paused", f"cannot resume cleaning of {tp[0]}-{tp[1]}: it is not paused "
                                          f"(each pause is undone by one resume)") from exc
    log.info("cleaning of %s-%s resumed through the admin API", tp[0], tp[1])
    return {"topic": tp[0], "partition": tp[1], "cleaner": cleaner_view(broker, tp, lg)}


@routes.post("/v1/partitions/{topic}/{partition}/pause")
async def pause(request: web.Request) -> web.Response:
    return web.json_response(await pause_cleaning(_broker(request), request.match_info["topic"],
                                                  request.match_info["partition"]))


@routes.post("/v1/partitions/{topic}/{partition}/resume")
async def resume(request: web.Request) -> web.Response:
    return web.json_response(await resume_cleaning(_broker(request), request.match_info["topic"],
                                                   request.match_info["partition"]))


@routes.get("/v1/transactions")
async def transactions(request: web.Request) -> web.Response:
    broker = _broker(request)
    log_manager_of(broker)
    return web.json_response(transactions_view(broker, request.query.get("state")))


@routes.get("/v1/cleaner")
async def cleaner_status(request: web.Request) -> web.Response:
    broker = _broker(request)
    cleaner = getattr(broker, "cleaner", None)
    if cleaner is None:
        return web.json_response({"enabled": False})
    status = jsonable(cleaner.status()) if callable(getattr(cleaner, "status", None)) else {}
    out = {"enabled": True}
    out.update(status if isinstance(status, dict) else {"status": status})
    # compact-now requests that outlived their HTTP wait (see /v1/jobs/{id})
    out["compact_jobs_running"] = [job for job in request.app[JOBS_KEY].jobs.values() if job["state"] == "running"]
    return web.json_response(out)


@routes.post("/v1/partitions/{topic}/{partition}/adopt")
async def adopt(request: web.Request) -> web.Response:
    broker = _broker(request)
    tp, lg = resolve_partition(broker, request.match_info["topic"], request.match_info["partition"])
    try:
        body = await request.json()
    except ValueError:
        raise ApiError(400, "bad_body", 'the body must be JSON: {"staging_dir": "<path>"}')
    staging = body.get("staging_dir") if isinstance(body, dict) else None
    if not isinstance(staging, str) or not staging:
        raise ApiError(400, "bad_body", 'the body must be JSON with a "staging_dir" path: {"staging_dir": "<path>"}')
    if not os.path.isdir(staging):
        raise ApiError(400, "bad_staging_dir", f"staging_dir {staging!r} is not a directory on the broker's host")
    try:
        from kompakt.pipeline.adopt import StaleStagingError, adopt_staging
    except ImportError as exc:
        raise ApiError(501, "not_available", f"adoption is not available in this build: {exc}")
    cleaner = getattr(broker, "cleaner", None)
    if cleaner is not None:
        await _call(cleaner.abort_and_pause_cleaning, tp)
    try:
        result = await asyncio.to_thread(adopt_staging, lg, staging)
        if cleaner is not None:
            await asyncio.to_thread(_advance_cleaner_point, cleaner, tp, lg, result)
    except StaleStagingError as exc:
        raise ApiError(409, "stale_staging", f"cannot adopt {staging!r} into {tp[0]}-{tp[1]}: {exc}; "
                                             "the live log is unchanged", kafka_error="KAFKA_STORAGE_ERROR") from exc
    except (ValueError, OSError) as exc:
        if kafka_error_of(exc) is not None:
            raise
        raise ApiError(400, "adopt_failed", f"cannot adopt {staging!r} into {tp[0]}-{tp[1]}: {exc}; "
                                            "the live log is unchanged") from exc
    finally:
        if cleaner is not None:
            await _call(cleaner.resume_cleaning, tp)
    log.info("adopted staging dir %s into %s-%s", staging, tp[0], tp[1])
    return web.json_response({"topic": tp[0], "partition": tp[1], "adopted": staging,
                              "result": jsonable(result), "partition_state": partition_view(broker, tp, lg)})


def _advance_cleaner_point(cleaner: Any, tp: Any, lg: Any, result: Any) -> None:
    """Everything below the adopted range's end is clean now: move the cleaner checkpoint there
    (never backwards), so the cleaner does not redo the pipeline's work."""
    end = result.get("first_dirty_offset") if isinstance(result, Mapping) else None
    update = getattr(cleaner, "update_checkpoints", None)
    if end is None or update is None:
        return
    status = cleaner.partition_status(tp) if callable(getattr(cleaner, "partition_status", None)) else None
    current = status.get("cleaner_point") if isinstance(status, Mapping) else None
    if current is not None and current >= end:
        return
    update(os.path.dirname(os.path.abspath(os.fspath(lg.dir))), partition_to_update=(tp, int(end)))


def make_app(broker: Any, *, token: str | None = None, protect_reads: bool = False) -> web.Application:
    throttle = TokenThrottle()
    middlewares = [browser_guard(token)] + ([token_middleware(token, protect_reads, throttle)] if token else [])
    app = web.Application(middlewares=[*middlewares, _errors], client_max_size=1 << 20)
    app[THROTTLE_KEY] = throttle
    app[BROKER_KEY] = broker
    app[JOBS_KEY] = Jobs()
    app.add_routes(routes)
    from kompakt.broker.admin.whatif import routes as whatif_routes
    app.add_routes(whatif_routes)
    # The web console is a room of its own (kompakt/console) mounted on this listener, under the
    # same token and TLS; mounting it imports only its routes (Jinja2 and matplotlib load on the
    # first page or chart).
    from kompakt.console.pages import add_console
    add_console(app, broker, token)
    return app
