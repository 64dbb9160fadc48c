"""`kompakt admin ...`: the admin HTTP API from a shell.

Role: one sub-command per endpoint of kompakt.broker.admin.app (partitions, partition, compact, pause,
resume, cleaner, transactions, adopt, count, whatif, ready — the container HEALTHCHECK), each printing a short human summary or, with `--json`, the API's JSON.
Uses only the standard library (urllib), so it starts fast and needs no event loop.

Exit status: 0 success; 1 the API answered an error (its message is printed); 2 the API could not be
reached (the message says which URL and how to point elsewhere), except `ready`, which exits 1 then
(Docker reserves a HEALTHCHECK's exit 2). `compact` follows a 202 answer by
polling the job's status URL until the clean ends, unless `--no-follow`; `--roll` rolls the active
segment first (`?roll=true`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kompakt.clients.output import print_table

DEFAULT_URL = "http://127.0.0.1:9644"


def default_token(environ=os.environ) -> str | None:
    """$KOMPAKT_ADMIN_TOKEN, else $KOMPAKT_ADMIN_API_TOKEN (the broker's own admin.api.token in a container)."""
    return environ.get("KOMPAKT_ADMIN_TOKEN") or environ.get("KOMPAKT_ADMIN_API_TOKEN") or None


def default_url(environ=os.environ) -> str:
    """$KOMPAKT_ADMIN_URL, else loopback on $KOMPAKT_METRICS_PORT (the port a container was given)."""
    if environ.get("KOMPAKT_ADMIN_URL"):
        return environ["KOMPAKT_ADMIN_URL"]
    return f"http://127.0.0.1:{environ.get('KOMPAKT_METRICS_PORT', '9644')}"
POLL_INTERVAL_S = 0.5


class AdminError(Exception):
    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=default_url(),
                        help=f"admin API base URL (default $KOMPAKT_ADMIN_URL, else http://127.0.0.1:"
                             f"$KOMPAKT_METRICS_PORT, else {DEFAULT_URL})")
    parser.add_argument("--token", default=default_token(),
                        help="admin API token (admin.api.token) for state-changing calls (default $KOMPAKT_ADMIN_TOKEN, "
                             "else $KOMPAKT_ADMIN_API_TOKEN)")
    parser.add_argument("--cacert", default=os.environ.get("KOMPAKT_ADMIN_CACERT"),
                        help="PEM CA file to verify an https:// admin API (default $KOMPAKT_ADMIN_CACERT)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON answer")
    parser.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout in seconds")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser("partitions", help="list partitions: offsets, sizes, cleaner state")
    p.add_argument("--topic", help="only this topic")
    for name, help_text in (("partition", "one partition in detail (segments, cleaner)"),
                            ("pause", "pause cleaning of a partition (reentrant)"),
                            ("resume", "undo one pause of a partition's cleaning")):
        p = sub.add_parser(name, help=help_text)
        _tp_args(p)
    p = sub.add_parser("compact", help="clean a partition now (ignores min.cleanable.dirty.ratio)")
    _tp_args(p)
    p.add_argument("--wait", type=float, default=5.0, help="seconds the broker waits before answering 202")
    p.add_argument("--no-follow", action="store_true", help="do not poll a 202 job until it ends")
    p.add_argument("--roll", action="store_true",
                   help="roll the active segment first, so everything written so far is cleanable "
                        "(the active segment is never cleaned)")
    p = sub.add_parser("count", help="exact number of records a consumer reading from the start would get")
    p.add_argument("topic")
    p.add_argument("partition", type=int, nargs="?", help="one partition (default: every partition, summed)")
    sub.add_parser("cleaner", help="cleaner workers, current jobs, throttle and figures")
    p = sub.add_parser("transactions", help="transactional ids: state, producer, partitions of the running transaction")
    p.add_argument("--state", help="only this state (Ongoing, CompleteCommit, ...)")
    sub.add_parser("ready", help="exit 0 when the broker is ready (GET /ready), 1 otherwise (container HEALTHCHECK)")
    p = sub.add_parser("whatif", help="replay a partition's newest records under other compaction settings")
    _tp_args(p)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting to try (repeatable), e.g. min.cleanable.dirty.ratio=0.1 or segment.ms=3600000")
    p.add_argument("--max-records", type=int, help="newest records replayed (the broker's default: 100000)")
    p.add_argument("--chart", help="also draw disk use and freshness over time into this PNG")
    p = sub.add_parser("adopt", help="swap a pipeline-compacted staging dir into a live partition")
    _tp_args(p)
    p.add_argument("staging_dir", help="staging directory on the broker's host")


def _tp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic")
    p.add_argument("partition", type=int)


# How this process reaches the API (set once by run() from --token / --cacert): the token header
# and the TLS context every call uses.
CONNECTION: dict[str, Any] = {"headers": {}, "context": None}


def configure_connection(token: str | None, cacert: str | None) -> None:
    import ssl
    CONNECTION["headers"] = {"Authorization": f"Bearer {token}"} if token else {}
    CONNECTION["context"] = ssl.create_default_context(cafile=cacert) if cacert else None


def request(base: str, method: str, path: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
    """(status, JSON) of one call; AdminError(exit 2) when the broker cannot be reached."""
    url = base.rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **CONNECTION["headers"]})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=CONNECTION["context"]) as resp:
            return resp.status, _decode(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _decode(exc.read())
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AdminError(f"cannot reach the Kompakt admin API at {base} ({reason}); is the broker running, "
                         f"and is --url (or $KOMPAKT_ADMIN_URL) its metrics.host:metrics.port?", 2) from None


def _check_url(url: str) -> None:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise AdminError(f"--url must look like http://host:port or https://host:port, not {url!r}", 2)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return {"message": raw.decode("utf-8", "replace")}


def _check(status: int, body: Any) -> Any:
    if status >= 400:
        message = body.get("message") if isinstance(body, dict) else None
        raise AdminError(f"error {status}: {message or body}")
    return body


def _tp_path(args: argparse.Namespace, suffix: str = "") -> str:
    return f"/v1/partitions/{urllib.parse.quote(args.topic, safe='')}/{args.partition}{suffix}"


def _fmt_time_ms(ms: Any) -> str:
    if not isinstance(ms, (int, float)) or ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def print_transactions(txns: list[dict[str, Any]], out=None) -> None:
    print_table(("TRANSACTIONAL-ID", "STATE", "PRODUCER", "EPOCH", "TIMEOUT-MS", "STARTED", "PARTITIONS"),
                [(t["transactional_id"], t["state"], str(t["producer_id"]), str(t["producer_epoch"]),
                  str(t["timeout_ms"]), _fmt_time_ms(t["start_time_ms"]) if t["start_time_ms"] >= 0 else "-",
                  ",".join(t["partitions"]) or "-") for t in txns], out)


def _state(cleaner: dict[str, Any]) -> str:
    """The cleaning state for the table: "-" for the idle state (the API's "None"), "disabled"."""
    if cleaner.get("enabled") is False:
        return "disabled"
    state = cleaner.get("state")
    return "-" if state in (None, "None") else str(state)


def print_partitions(parts: list[dict[str, Any]], out=None) -> None:
    header = ("TOPIC", "PART", "POLICY", "START", "END", "LSO", "TXNS", "BYTES", "SEGS", "DIRTY", "LAST-CLEAN",
              "STATE")
    rows = []
    for p in parts:
        c = p.get("cleaner") or {}
        rows.append((p["topic"], str(p["partition"]), ",".join(p.get("cleanup_policy") or []) or "-",
                     _fmt(p.get("log_start_offset")), _fmt(p.get("log_end_offset")),
                     _fmt(p.get("last_stable_offset")), str(len(p.get("ongoing_transactions") or ())),
                     _fmt(p.get("size_bytes")),
                     _fmt(p.get("segment_count")),
                     _fmt(c.get("dirty_ratio"), ".2f") if c.get("dirty_ratio") is not None else "-",
                     _fmt_time_ms(c.get("last_clean_time_ms")),
                     _state(c)))
    print_table(header, rows, out)


def print_mapping(data: Any, out=None, indent: str = "") -> None:
    out = out or sys.stdout
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, (dict, list)) and value:
                print(f"{indent}{key}:", file=out)
                print_mapping(value, out, indent + "  ")
            else:
                print(f"{indent}{key}: {_fmt(value)}", file=out)
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, dict):
                print(f"{indent}- " + ", ".join(f"{k}={_fmt(v)}" for k, v in item.items()), file=out)
            else:
                print(f"{indent}- {item}", file=out)
    else:
        print(f"{indent}{data}", file=out)


def _follow(args: argparse.Namespace, job: dict[str, Any]) -> dict[str, Any]:
    print(f"cleaning {args.topic}-{args.partition} (job {job.get('id')}); waiting ...", file=sys.stderr)
    while job.get("state") == "running":
        time.sleep(POLL_INTERVAL_S)
        job = _check(*request(args.url, "GET", job["status_url"], timeout=args.timeout))
    if job.get("state") == "failed":
        err = job.get("error") or {}
        raise AdminError(f"compaction of {args.topic}-{args.partition} failed: {err.get('message', err)}")
    return job


def _count(args: argparse.Namespace) -> int:
    if args.partition is not None:
        body = _check(*request(args.url, "GET", _tp_path(args, "?count=true"), timeout=args.timeout))
        rows, total = [body], body["records"]["records"]
    else:
        path = f"/v1/partitions?topic={urllib.parse.quote(args.topic)}&count=true"
        body = _check(*request(args.url, "GET", path, timeout=args.timeout))
        rows, total = body["partitions"], body["total_records"]
    if args.json:
        print(json.dumps(body, indent=2))
        return 0
    for row in rows:
        print(f"{row['topic']}-{row['partition']}: {row['records']['records']} records "
              f"in {row['records']['batches']} batches (offsets {row['log_start_offset']}..{row['log_end_offset']})")
    print(f"total: {total} records")
    return 0


def _whatif(args: argparse.Namespace) -> int:
    query = [("set", pair) for pair in args.set]
    if args.max_records is not None:
        query.append(("max_records", str(args.max_records)))
    path = _tp_path(args, "/whatif" + ("?" + urllib.parse.urlencode(query) if query else ""))
    body = _check(*request(args.url, "GET", path, timeout=max(args.timeout, 120.0)))
    if args.chart:
        from kompakt.pipeline.chart import whatif_chart
        with open(args.chart, "wb") as f:
            f.write(whatif_chart([body]))
    if args.json:
        print(json.dumps(body, indent=2))
        return 0
    from kompakt.pipeline.jobs.whatif import format_table
    print(format_table([body]))
    print(f"{body['records']} records replayed ({body['proposed']['settings']['label']})"
          + (f"; chart in {args.chart}" if args.chart else ""))
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        _check_url(args.url)
        try:
            configure_connection(getattr(args, "token", None), getattr(args, "cacert", None))
        except OSError as exc:   # a missing or unreadable --cacert file (ssl.SSLError is an OSError)
            raise AdminError(f"cannot use --cacert {args.cacert}: {exc}", 2) from None
        return _run(args)
    except AdminError as exc:
        print(f"kompakt admin: {exc}", file=sys.stderr)
        # Docker reserves a HEALTHCHECK's exit 2: for `ready` anything that is not ready exits 1
        return 1 if args.action == "ready" else exc.exit_code


def _table(args: argparse.Namespace, path: str, query: str, field: str, printer) -> int:
    """GET `path` (with `?query=` from the argument of that name), print `field` as a table."""
    value = getattr(args, query, None)
    if value:
        path += f"?{query}={urllib.parse.quote(value)}"
    body = _check(*request(args.url, "GET", path, timeout=args.timeout))
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        printer(body[field])
    return 0


def _run(args: argparse.Namespace) -> int:
    a = args.action
    if a == "ready":
        status, body = request(args.url, "GET", "/ready", timeout=min(args.timeout, 5.0))
        if status != 200:
            raise AdminError(f"not ready: {(body or {}).get('message', status)}")
        if args.json:
            print(json.dumps(body))
        return 0
    if a == "partitions":
        return _table(args, "/v1/partitions", "topic", "partitions", print_partitions)
    if a == "count":
        return _count(args)
    if a == "transactions":
        return _table(args, "/v1/transactions", "state", "transactions", print_transactions)
    if a == "partition":
        body = _check(*request(args.url, "GET", _tp_path(args), timeout=args.timeout))
    elif a == "cleaner":
        body = _check(*request(args.url, "GET", "/v1/cleaner", timeout=args.timeout))
    elif a in ("pause", "resume"):
        body = _check(*request(args.url, "POST", _tp_path(args, "/" + a), timeout=args.timeout))
    elif a == "whatif":
        return _whatif(args)
    elif a == "adopt":
        body = _check(*request(args.url, "POST", _tp_path(args, "/adopt"),
                               {"staging_dir": os.path.abspath(args.staging_dir)}, timeout=args.timeout))
    elif a == "compact":
        roll = "&roll=true" if args.roll else ""
        status, body = request(args.url, "POST", _tp_path(args, f"/compact?wait={args.wait:g}{roll}"),
                               timeout=max(args.timeout, args.wait + 10))
        body = _check(status, body)
        if status == 202 and not args.no_follow:
            body = _follow(args, body)
    else:  # argparse keeps us from getting here
        raise AdminError(f"unknown action {a!r}")
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print_mapping(body)
    return 0
