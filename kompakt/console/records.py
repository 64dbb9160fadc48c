"""The console's record browser: a page of one partition's records, as a consumer would get them.

Role: start from an offset or a timestamp (ListOffsets' rule: the first record whose timestamp is
at or after it, `Log.offset_for_timestamp`), read whole batches from the log (`Log.read`, what
Fetch serves), and decode up to `limit` records: offset, timestamp, key, value, headers, and the
batch's producer id and whether it is transactional. Keys, values and header values are shown as
text (UTF-8, undecodable bytes replaced), JSON (pretty-printed when they parse, else text) or hex.

Isolation, as a consumer sees it: read_uncommitted reads up to the high watermark and shows
records of aborted transactions too; read_committed reads up to the last stable offset and drops
the records of aborted transactions, using the log's aborted-transaction index the way a Kafka
consumer uses Fetch's `aborted_transactions` (a producer's batches are skipped from the first
offset of its aborted transaction until its abort marker). Control batches (markers) are never
records.

Invariants: read-only; runs in a worker thread (it reads segment files); at most MAX_LIMIT
records per page, and reading stops once MAX_BYTES of batches are read (one batch more than that
at most: a page always shows a record when there is one); a key, value or header value longer
than MAX_FIELD bytes is shown cut there, saying how many bytes were left out. A page cut inside a
batch ends there: `next_offset` is the first record not shown, never the batch's end.
"""
from __future__ import annotations

import binascii
import json
from typing import Any

from kompakt.protocol import records as R

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_BYTES = 4 * 1024 * 1024
MAX_FIELD = 256 * 1024
DECODINGS = ("text", "json", "hex")
ISOLATIONS = ("read_uncommitted", "read_committed")


def decode_bytes(data: bytes | None, how: str) -> str | None:
    if data is None:
        return None
    left_out = len(data) - MAX_FIELD
    if left_out > 0:
        return decode_bytes(data[:MAX_FIELD], how) + f" … ({left_out:,} more bytes not shown)"
    data = bytes(data)
    if how == "hex":
        return binascii.hexlify(data, " ", -2).decode() if data else ""
    text = data.decode("utf-8", "replace")
    if how == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def browse(lg: Any, *, offset: int | None = None, timestamp_ms: int | None = None, limit: int = DEFAULT_LIMIT,
           decode: str = "text", isolation: str = "read_uncommitted") -> dict[str, Any]:
    """Records from `offset` (default: the log start) or from the first at/after `timestamp_ms`."""
    limit = max(1, min(int(limit), MAX_LIMIT))
    read_committed = isolation == "read_committed"
    upper = lg.last_stable_offset if read_committed else lg.high_watermark
    start = lg.log_start_offset
    note = None
    if timestamp_ms is not None:
        found = lg.offset_for_timestamp(int(timestamp_ms))
        if found is None:
            return _page(lg, [], upper, upper, isolation, decode,
                         note=f"no record has a timestamp at or after {timestamp_ms}")
        offset = found[0]
    if offset is None:
        offset = start
    if offset < start:
        note = f"offset {offset} is below the log start offset {start}: starting there"
        offset = start
    if offset > upper:
        note = f"offset {offset} is past the {'last stable offset' if read_committed else 'high watermark'} {upper}"
        offset = upper
    aborted = sorted(lg.aborted_transactions(offset, upper), key=lambda a: a.first_offset) if read_committed else []
    out: list[dict[str, Any]] = []
    skipping: set[int] = set()
    position = offset
    read = 0
    while len(out) < limit and position < upper and read < MAX_BYTES:
        data = lg.read(position, MAX_BYTES - read, max_offset=upper).records
        if not data:
            break
        read += len(data)
        for pos, h in R.iter_batches(data):
            position = h.last_offset + 1
            while aborted and aborted[0].first_offset <= h.last_offset:
                skipping.add(aborted.pop(0).producer_id)
            if h.is_control:
                skipping.discard(h.producer_id)   # the abort (or commit) marker ends the transaction
                continue
            if read_committed and h.is_transactional and h.producer_id in skipping:
                continue
            for rec in R.decode_records(data, pos, h):
                at = h.base_offset + rec.offset_delta
                if at < offset or at >= upper:
                    continue
                out.append({"offset": at, "timestamp_ms": R.record_timestamp(h, rec),
                            "key": decode_bytes(rec.key, decode), "value": decode_bytes(rec.value, decode),
                            "tombstone": rec.value is None,
                            "headers": [{"key": k.decode("utf-8", "replace") if isinstance(k, (bytes, bytearray)) else k,
                                         "value": decode_bytes(v, decode)} for k, v in rec.headers],
                            "producer_id": h.producer_id, "transactional": h.is_transactional})
                if len(out) >= limit:
                    position = at + 1   # the rest of this batch is the next page's start
                    break
            if len(out) >= limit:
                break
    return _page(lg, out, offset, position, isolation, decode, note=note)


def _page(lg: Any, records: list, start: int, next_offset: int, isolation: str, decode: str,
          note: str | None = None) -> dict[str, Any]:
    return {"records": records, "from_offset": start, "next_offset": next_offset, "isolation": isolation,
            "decode": decode, "log_start_offset": lg.log_start_offset, "high_watermark": lg.high_watermark,
            "last_stable_offset": lg.last_stable_offset, "note": note}
