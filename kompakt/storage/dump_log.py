"""`kompakt dump-log`: print partition files the way Kafka's kafka-dump-log.sh (DumpLogSegments) does.

Files understood (by name; a trailing .deleted/.cleaned/.swap is looked through; a directory
means every file in it, sorted):
  .log          "Log starting offset: N", then one line per batch:
                baseOffset lastOffset count baseSequence lastSequence producerId producerEpoch
                partitionLeaderEpoch isTransactional isControl deleteHorizonMs position
                <CreateTime|LogAppendTime> size magic compresscodec crc isvalid
                With --deep-iteration one "| offset: ..." line per record (keySize, valueSize,
                sequence, headerKeys; endTxnMarker for control records); --print-data-log adds
                key/payload (UTF-8), --offsets-decoder decodes __consumer_offsets keys and values,
                --transaction-log-decoder __transaction_state ones (Kafka's JSON forms).
                Bytes after the last whole batch: "Found N invalid bytes at the end of NAME".
  .index        "offset: O position: P" (stops at the zero tail of a preallocated index);
                --verify-index-only checks each entry against the log; --index-sanity-check runs
                the startup sanity check.
  .timeindex    "timestamp: T offset: O", same two options; a preallocated, still all-zero one
                (a live broker's active segment) is "empty", like the .index.
  .snapshot     producer-state entries, as Kafka prints them.
  .txnindex     aborted transactions: version producerId firstOffset lastOffset lastStableOffset.
  checkpoints   recovery-point-offset-checkpoint, log-start-offset-checkpoint,
                cleaner-offset-checkpoint, replication-offset-checkpoint: "topic: t partition: p offset: o";
                leader-epoch-checkpoint: "epoch: e startOffset: o"; partition.metadata: its topic id;
                kompakt-topics.json: one line per topic (id, partitions, configs); meta.properties.
Problems found (index mismatches, non-consecutive offsets, corrupt files) go to stderr after the
dump, worded like Kafka's. `--json` prints one JSON object per file per line instead (same facts,
Kafka's field names). The tool only reads; it never repairs.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import struct
import sys
from typing import Any, Callable, Iterator

from kompakt.protocol import records as R
from kompakt.storage import checkpoint as C

INT_MAX = 2**31 - 1
_DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
_IDX = struct.Struct(">ii")
_TIDX = struct.Struct(">qi")
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 ABORT, 1 COMMIT)
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch
_TRANSIT_SUFFIXES = (".deleted", ".cleaned", ".swap")
OFFSET_CHECKPOINTS = {C.RECOVERY_POINT_CHECKPOINT_FILE, C.LOG_START_OFFSET_CHECKPOINT_FILE,
                      C.CLEANER_OFFSET_CHECKPOINT_FILE, "replication-offset-checkpoint"}
TIMESTAMP_TYPE_NAMES = {0: "CreateTime", 1: "LogAppendTime"}
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or partition directories to dump")
    parser.add_argument("--files", default=None,
                        help="comma-separated files (kafka-dump-log.sh spelling; adds to PATH...)")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print record keys and values (implies --deep-iteration)")
    parser.add_argument("--skip-record-metadata", action="store_true", help="omit per-record metadata")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="run the startup sanity check on index files and print the verdict")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode records as __consumer_offsets keys/values (implies --print-data-log)")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode records as __transaction_state keys/values (implies --print-data-log)")
    parser.add_argument("--max-message-size", type=int, default=_DEFAULT_MAX_MESSAGE_SIZE,
                        help="largest batch read when verifying an index (default 5 MiB)")
    parser.add_argument("--max-bytes", type=int, default=INT_MAX,
                        help="read at most this many bytes of each .log file")
    parser.add_argument("--json", action="store_true", help="one JSON object per file per line")


class _Problems:
    """What Kafka prints to stderr after the dump, collected per file."""

    def __init__(self, err=None):
        self.err = err or sys.stderr
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.time_not_found: dict[str, list[tuple[int, int]]] = {}

    def error(self, message: str) -> None:
        print(message, file=self.err)

    def lines(self) -> list[str]:
        out = []
        for name, pairs in self.index_mismatches.items():
            out.append(f"Mismatches in :{name}")
            out += [f"  Index offset: {a}, log offset: {b}" for a, b in pairs]
        for name, pairs in self.time_mismatches.items():
            out.append(f"Found timestamp mismatch in :{name}")
            out += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in pairs]
        for name, pairs in self.time_out_of_order.items():
            out.append(f"Found out of order timestamp in :{name}")
            out += [f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in pairs]
        for pairs in self.time_not_found.values():
            out.append("The following indexed offsets are not found in the log.")
            out += [f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs]
        for name, pairs in self.non_consecutive.items():
            out.append(f"Non-consecutive offsets in {name}")
            out += [f"  {a} is followed by {b}" for a, b in pairs]
        return out


# --- helpers ----------------------------------------------------------------------------------

def _kind(path: str) -> tuple[str, str]:
    """(kind, logical name) of a file: log/index/timeindex/snapshot/txnindex/offsets/epochs/partition-metadata."""
    name = os.path.basename(path)
    for suffix in _TRANSIT_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name in OFFSET_CHECKPOINTS:
        return "offset-checkpoint", name
    if name == C.LEADER_EPOCH_CHECKPOINT_FILE:
        return "leader-epoch-checkpoint", name
    if name == "partition.metadata":
        return "partition-metadata", name
    if name == "kompakt-topics.json":
        return "topic-store", name
    if name == "meta.properties":
        return "meta-properties", name
    ext = name[name.rfind("."):] if "." in name else ""
    return {".log": "log", ".index": "index", ".timeindex": "timeindex", ".snapshot": "snapshot",
            ".txnindex": "txnindex"}.get(ext, "unknown"), name


def _base_offset(name: str) -> int:
    return int(name.split(".")[0])


def _sibling(path: str, name: str, ext: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(path)), name.split(".")[0] + ext)


class _Mapped:
    """Read-only bytes of a file (mmap when non-empty)."""

    def __init__(self, path: str, limit: int | None = None):
        self._fh = open(path, "rb")
        size = os.fstat(self._fh.fileno()).st_size
        self.size = size
        self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.end = size if limit is None else min(size, limit)

    @property
    def buf(self):
        return self._map if self._map is not None else b""

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _whole_batches(buf, end: int) -> Iterator[tuple[int, R.BatchHeader]]:
    """Complete v2 batches in buf[:end]; stops (like Kafka's FileRecords) at the first that does not parse."""
    pos = 0
    while end - pos >= R.BATCH_OVERHEAD:
        try:
            header = R.read_header(buf, pos)
        except R.CorruptRecordError:
            return
        if header.magic != R.CURRENT_MAGIC or header.size < R.BATCH_OVERHEAD or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def _str_decoder(data: bytes | None) -> str | None:
    return None if data is None else bytes(data).decode("utf-8", "replace")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def _offsets_parser() -> Callable[[int, bytes | None, bytes | None], tuple[str | None, str | None]]:
    """Kafka's OffsetsMessageParser over kompakt.protocol.group_records (hex if it is unavailable)."""
    try:
        from kompakt.protocol import group_records as G
    except ImportError:  # the groups package has not landed: show raw bytes
        return lambda offset, k, v: (None if k is None else bytes(k).hex(), None if v is None else bytes(v).hex())

    def as_json(d: dict, version_field: str) -> str:
        data = {_camel(k): (bytes(v).hex() if isinstance(v, (bytes, bytearray, memoryview)) else v)
                for k, v in d.items() if k not in ("type", "version")}
        for m in data.get("members", []) if isinstance(data.get("members"), list) else []:
            for k in list(m):
                if isinstance(m[k], (bytes, bytearray, memoryview)):
                    m[k] = bytes(m[k]).hex()
            for k in list(m):
                m[_camel(k)] = m.pop(k)
        return json.dumps({version_field: str(d["version"]), "data": data}, separators=(",", ":"))

    def parse(offset: int, key: bytes | None, value: bytes | None):
        if key is None:
            return (f"Error at offset {offset}, skipping. Failed to decode message at offset {offset} "
                    "using offset topic decoder (message had a missing key)", None)
        try:
            k = G.decode_key(bytes(key))
            if k.get("type") == "unknown":
                return f"Unknown record type {k['version']} at offset {offset}, skipping.", None
            v = G.decode_value(k, None if value is None else bytes(value))
            if k["type"].startswith("consumer_group_"):     # KIP-848 records: Kafka's field names
                from kompakt.protocol import consumer_group_records as C
                key_json = json.dumps({"type": str(k["version"]), "data": C.kafka_json_key(k)},
                                      separators=(",", ":"))
                if v is None:
                    return key_json, "<DELETE>"
                return key_json, json.dumps({"version": str(v["version"]), "data": C.kafka_json_value(
                    k["version"], v)}, separators=(",", ":"))
            if v is not None and k.get("type") == "offset_commit":
                # Kafka's JSON shows only the fields of the value's version
                v = dict(v)
                if v["version"] < 3:
                    v.pop("leader_epoch", None)
                if v["version"] != 1:
                    v.pop("expire_timestamp", None)
            return as_json(k, "type"), ("<DELETE>" if v is None else as_json(v, "version"))
        except Exception as exc:  # noqa: BLE001 - Kafka prints any decoding error and goes on
            return f"Error at offset {offset}, skipping. {exc}", None

    return parse


def _txn_parser() -> Callable[[int, bytes | None, bytes | None], tuple[str | None, str | None]]:
    """Kafka's TransactionLogMessageParser over kompakt.protocol.txn_records: key
    {"type": version, "data": {"transactionalId"}}, value {"version", "data": TransactionLogValue}."""
    from kompakt.protocol import txn_records as T

    def parse(offset: int, key: bytes | None, value: bytes | None):
        if key is None:
            return (f"Error at offset {offset}, skipping. Failed to decode message at offset {offset} "
                    "using transaction log decoder (message had a missing key)", None)
        try:
            k = T.decode_key(bytes(key))
            if k["transactional_id"] is None:
                return f"Unknown record type {k['version']} at offset {offset}, skipping.", None
            key_json = json.dumps({"type": str(k["version"]), "data": {"transactionalId": k["transactional_id"]}},
                                  separators=(",", ":"))
            v = T.decode_value(None if value is None else bytes(value))
            if v is None:
                return key_json, "<DELETE>"
            data = {"producerId": v["producer_id"], "producerEpoch": v["producer_epoch"],
                    "transactionTimeoutMs": v["timeout_ms"], "transactionStatus": v["state"],
                    "transactionPartitions": None if v["state"] == 0 else
                    [{"topic": t, "partitionIds": ids} for t, ids in v["partitions"].items()],
                    "transactionLastUpdateTimestampMs": v["last_update_ms"],
                    "transactionStartTimestampMs": v["start_ms"]}
            if v["version"] >= 1:
                data.update(previousProducerId=v["previous_producer_id"], nextProducerId=v["next_producer_id"],
                            clientTransactionVersion=v["client_transaction_version"])
            return key_json, json.dumps({"version": str(v["version"]), "data": data}, separators=(",", ":"))
        except Exception as exc:  # noqa: BLE001 - Kafka prints any decoding error and goes on
            return f"Error at offset {offset}, skipping. {exc}", None

    return parse


# --- .log -------------------------------------------------------------------------------------

def _sequence(header: R.BatchHeader, offset_delta: int) -> int:
    if header.base_sequence == R.NO_SEQUENCE:
        return R.NO_SEQUENCE
    return (header.base_sequence + offset_delta) % (2**31)


def _batch_fields(header: R.BatchHeader, pos: int, valid: bool) -> dict[str, Any]:
    return {
        "baseOffset": header.base_offset, "lastOffset": header.last_offset, "count": header.records_count,
        "baseSequence": header.base_sequence, "lastSequence": header.last_sequence,
        "producerId": header.producer_id, "producerEpoch": header.producer_epoch,
        "partitionLeaderEpoch": header.partition_leader_epoch,
        "isTransactional": header.is_transactional, "isControl": header.is_control,
        "deleteHorizonMs": header.delete_horizon_ms if header.has_delete_horizon else None,
        "position": pos, "timestampType": TIMESTAMP_TYPE_NAMES[header.timestamp_type],
        "maxTimestamp": header.max_timestamp, "size": header.size, "magic": header.magic,
        "compresscodec": R.CODEC_NAMES.get(header.compression, str(header.compression)),
        "crc": header.crc, "isvalid": valid,
    }


def _bool(b: bool) -> str:
    return "true" if b else "false"


def _batch_text(f: dict[str, Any]) -> str:
    horizon = "OptionalLong.empty" if f["deleteHorizonMs"] is None else f"OptionalLong[{f['deleteHorizonMs']}]"
    return (f"baseOffset: {f['baseOffset']} lastOffset: {f['lastOffset']} count: {f['count']} "
            f"baseSequence: {f['baseSequence']} lastSequence: {f['lastSequence']} "
            f"producerId: {f['producerId']} producerEpoch: {f['producerEpoch']} "
            f"partitionLeaderEpoch: {f['partitionLeaderEpoch']} isTransactional: {_bool(f['isTransactional'])} "
            f"isControl: {_bool(f['isControl'])} deleteHorizonMs: {horizon} position: {f['position']} "
            f"{f['timestampType']}: {f['maxTimestamp']} size: {f['size']} magic: {f['magic']} "
            f"compresscodec: {f['compresscodec']} crc: {f['crc']} isvalid: {_bool(f['isvalid'])}")


def _record_fields(header: R.BatchHeader, rec: R.Record, opts, parser) -> dict[str, Any]:
    offset = header.base_offset + rec.offset_delta
    out: dict[str, Any] = {
        "offset": offset, "timestampType": TIMESTAMP_TYPE_NAMES[header.timestamp_type],
        "timestamp": R.record_timestamp(header, rec),
        "keySize": -1 if rec.key is None else len(rec.key),
        "valueSize": -1 if rec.value is None else len(rec.value),
        "sequence": _sequence(header, rec.offset_delta),
        "headerKeys": [k for k, _ in rec.headers],
    }
    if header.is_control:
        ctype = None
        if rec.key is not None and len(rec.key) >= _CONTROL_KEY.size:
            ctype = _CONTROL_KEY.unpack_from(bytes(rec.key), 0)[1]
        if ctype in CONTROL_TYPES and rec.value is not None and len(rec.value) >= _CONTROL_VALUE.size:
            out["endTxnMarker"] = CONTROL_TYPES[ctype]
            out["coordinatorEpoch"] = _CONTROL_VALUE.unpack_from(bytes(rec.value), 0)[1]
        else:
            out["controlType"] = f"UNKNOWN({ctype})"
    elif opts.print_data_log:
        key, payload = parser(offset, rec.key, rec.value)
        if key is not None:
            out["key"] = key
        if payload is not None:
            out["payload"] = payload
    return out


def _record_text(r: dict[str, Any], skip_metadata: bool) -> str:
    parts = ["|"]
    if not skip_metadata:
        parts.append(f"offset: {r['offset']} {r['timestampType']}: {r['timestamp']} keySize: {r['keySize']} "
                     f"valueSize: {r['valueSize']} sequence: {r['sequence']} "
                     f"headerKeys: [{','.join(r['headerKeys'])}]")
        if "endTxnMarker" in r:
            parts.append(f"endTxnMarker: {r['endTxnMarker']} coordinatorEpoch: {r['coordinatorEpoch']}")
        elif "controlType" in r:
            parts.append(f"controlType: {r['controlType']}")
    if "key" in r:
        parts.append(f"key: {r['key']}")
    if "payload" in r:
        parts.append(f"payload: {r['payload']}")
    return " ".join(parts)


def dump_log(path: str, name: str, opts, problems: _Problems, emit: Callable[[str], None]) -> dict[str, Any]:
    result: dict[str, Any] = {"file": path, "type": "log", "start_offset": _base_offset(name), "batches": []}
    emit(f"Log starting offset: {_base_offset(name)}")
    if opts.offsets_decoder:
        parser = _offsets_parser()
    elif getattr(opts, "transaction_log_decoder", False):
        parser = _txn_parser()
    else:
        parser = lambda o, k, v: (_str_decoder(k), _str_decoder(v))  # noqa: E731
    deep = opts.deep_iteration or opts.print_data_log
    last_offset = -1
    valid_bytes = 0
    with _Mapped(path, opts.max_bytes) as m:
        for pos, header in _whole_batches(m.buf, m.end):
            fields = _batch_fields(header, pos, R.valid_crc(m.buf, pos, header))
            emit(_batch_text(fields))
            if deep:
                fields["records"] = []
                try:
                    recs = R.decode_records(m.buf, pos, header)
                except R.CorruptRecordError as exc:
                    fields["error"] = str(exc)
                    emit(f"| cannot decode records: {exc}")
                    recs = []
                for rec in recs:
                    r = _record_fields(header, rec, opts, parser)
                    if last_offset != -1 and r["offset"] != last_offset + 1:
                        problems.non_consecutive.setdefault(os.path.abspath(path), []).append((last_offset, r["offset"]))
                    last_offset = r["offset"]
                    fields["records"].append(r)
                    emit(_record_text(r, opts.skip_record_metadata))
            result["batches"].append(fields)
            valid_bytes += header.size
        trailing = m.end - valid_bytes
        result["trailing_invalid_bytes"] = trailing
        if trailing > 0 and opts.max_bytes == INT_MAX:
            emit(f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}")
    return result


# --- indexes ----------------------------------------------------------------------------------

def _index_entries(data: bytes, fmt: struct.Struct) -> list[tuple]:
    """Entries up to the zero tail of a preallocated index (an all-zero entry after the first)."""
    out = []
    for i in range(len(data) // fmt.size):
        entry = fmt.unpack_from(data, i * fmt.size)
        if i > 0 and not any(entry):
            break
        out.append(entry)
    return out


def _batch_at(log_path: str, position: int, max_size: int) -> R.BatchHeader | None:
    try:
        with open(log_path, "rb") as fh:
            fh.seek(position)
            data = fh.read(max(max_size, R.BATCH_OVERHEAD))
    except OSError:
        return None
    for _, header in _whole_batches(data, len(data)):
        return header
    if len(data) >= R.BATCH_OVERHEAD:  # a batch bigger than max_size: its header still says where it ends
        try:
            return R.read_header(data, 0)
        except R.CorruptRecordError:
            return None
    return None


def dump_index(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    base = _base_offset(name)
    with open(path, "rb") as fh:
        data = fh.read()
    result: dict[str, Any] = {"file": path, "type": "index", "base_offset": base, "entries": []}
    if opts.index_sanity_check:
        error = None
        if len(data) % _IDX.size:
            error = (f"Index file {name} is corrupt, found {len(data)} bytes which is neither positive "
                     f"nor a multiple of {_IDX.size}.")
        else:
            entries = _index_entries(data, _IDX)
            if entries and base + entries[-1][0] < base:
                error = (f"Corrupt index found, index file ({path}) has non-zero size but the last offset "
                         f"is {base + entries[-1][0]} which is less than the base offset {base}.")
            prev = -1
            for rel, pos in entries:
                if rel < prev:
                    error = f"Corrupt index found, index file ({path}) has entries out of order at offset {base + rel}."
                    break
                prev = rel
        result["sanity_check"] = "passed" if error is None else error
        emit(f"{path} passed sanity check." if error is None else error)
        return result
    entries = _index_entries(data, _IDX)
    # Empty: nothing written, or a preallocated file still all zeros (a trimmed 8-byte file of zeros
    # is a real entry: relative offset 0 at position 0).
    if not entries or (len(data) > _IDX.size and not any(data)):
        result["empty"] = True
        emit(f"{path} is empty.")
        return result
    log_path = _sibling(path, name, ".log")
    for rel, pos in entries:
        offset = base + rel
        header = _batch_at(log_path, pos, opts.max_message_size)
        found = header.last_offset if header is not None else -1
        entry = {"offset": offset, "position": pos}
        if found != offset:
            problems.index_mismatches.setdefault(os.path.abspath(path), []).append((offset, found))
            entry["log_offset"] = found
        result["entries"].append(entry)
        if not opts.verify_index_only:
            emit(f"offset: {offset} position: {pos}")
    return result


def dump_time_index(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    base = _base_offset(name)
    with open(path, "rb") as fh:
        data = fh.read()
    result: dict[str, Any] = {"file": path, "type": "timeindex", "base_offset": base, "entries": []}
    entries = _index_entries(data, _TIDX)
    if opts.index_sanity_check:
        error = None
        if len(data) % _TIDX.size:
            error = (f"Time index file {name} is corrupt, found {len(data)} bytes which is neither "
                     f"positive nor a multiple of {_TIDX.size}.")
        elif entries and entries[-1][0] < entries[0][0]:
            error = (f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                     f"timestamp is {entries[-1][0]} which is less than the first timestamp {entries[0][0]}.")
        result["sanity_check"] = "passed" if error is None else error
        emit(f"{path} passed sanity check." if error is None else error)
        return result
    # The active segment's time index is preallocated with zeros until its first entry: read as
    # an entry it is a "timestamp mismatch" on every live partition, so it is empty, as .index is.
    if len(data) > _TIDX.size and not any(data):
        result["empty"] = True
        emit(f"{path} is empty.")
        return result
    batches: dict[int, int] = {}
    log_path = _sibling(path, name, ".log")
    if os.path.exists(log_path):
        with _Mapped(log_path) as m:
            for _, header in _whole_batches(m.buf, m.end):
                batches[header.last_offset] = header.max_timestamp
    prev = R.NO_TIMESTAMP
    abspath = os.path.abspath(path)
    for ts, rel in entries:
        offset = base + rel
        if offset in batches:
            if batches[offset] != ts:
                problems.time_mismatches.setdefault(abspath, []).append((ts, batches[offset]))
            if prev >= ts:
                problems.time_out_of_order.setdefault(abspath, []).append((ts, prev))
        else:
            later = [o for o in batches if o >= offset]
            problems.time_not_found.setdefault(abspath, []).append((offset, min(later) if later else -1))
        result["entries"].append({"timestamp": ts, "offset": offset})
        if not opts.verify_index_only:
            emit(f"timestamp: {ts} offset: {offset}")
        prev = ts
    return result


# --- other files ------------------------------------------------------------------------------

def dump_snapshot(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    from kompakt.storage.producer_state import CorruptSnapshotError, decode_snapshot
    result: dict[str, Any] = {"file": path, "type": "snapshot", "producers": []}
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        entries = decode_snapshot(data, path)
    except CorruptSnapshotError as exc:
        result["error"] = str(exc)
        problems.error(str(exc))
        return result
    for e in entries:
        p: dict[str, Any] = {"producerId": e.producer_id, "producerEpoch": e.producer_epoch,
                             "coordinatorEpoch": e.coordinator_epoch,
                             "currentTxnFirstOffset": e.current_txn_first_offset,
                             "lastTimestamp": e.last_timestamp}
        text = " ".join(f"{k}: {v}" for k, v in p.items()) + " "
        if e.batches:
            b = e.batches[0]
            more = {"firstSequence": b.first_seq, "lastSequence": b.last_seq, "lastOffset": b.last_offset,
                    "offsetDelta": b.offset_delta, "timestamp": b.timestamp}
            p.update(more)
            text += " ".join(f"{k}: {v}" for k, v in more.items())
        result["producers"].append(p)
        emit(text)
    return result


def _dump_checkpoint(path: str, name: str, problems: _Problems, emit, formatter,
                     fields: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {"file": path, "type": name, "entries": []}
    try:
        entries = C.CheckpointFile(path, formatter).read_strict()
    except C.CheckpointCorruptError as exc:
        result["error"] = str(exc)
        problems.error(f"Corrupt checkpoint: {exc}")
        return result
    emit(f"version: {C.CURRENT_VERSION} entries: {len(entries)}")
    for entry in entries:
        row = fields(entry)
        result["entries"].append(row)
        emit(" ".join(f"{k}: {v}" for k, v in row.items()))
    return result


_TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
assert _TXN_ENTRY.size == 34


def dump_txn_index(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    """Aborted transactions (Kafka's TransactionIndex: 34-byte entries)."""
    with open(path, "rb") as fh:
        data = fh.read()
    result: dict[str, Any] = {"file": path, "type": "txnindex", "aborted": []}
    if len(data) % _TXN_ENTRY.size:
        problems.error(f"{path}: {len(data)} bytes is not a multiple of {_TXN_ENTRY.size}; the tail is ignored")
    for i in range(len(data) // _TXN_ENTRY.size):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(data, i * _TXN_ENTRY.size)
        row = {"version": version, "producerId": pid, "firstOffset": first, "lastOffset": last,
               "lastStableOffset": lso}
        result["aborted"].append(row)
        emit(" ".join(f"{k}: {v}" for k, v in row.items()))
    return result


def dump_offset_checkpoint(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    return _dump_checkpoint(path, name, problems, emit, C.OFFSET_FORMATTER,
                            lambda e: {"topic": e[0].topic, "partition": e[0].partition, "offset": e[1]})


def dump_epoch_checkpoint(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    return _dump_checkpoint(path, name, problems, emit, C.EPOCH_FORMATTER,
                            lambda e: {"epoch": e[0], "startOffset": e[1]})


def dump_partition_metadata(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    from kompakt.storage.topic_store import read_partition_metadata, uuid_to_str
    topic_id = read_partition_metadata(os.path.dirname(os.path.abspath(path)))
    result = {"file": path, "type": name, "topic_id": None if topic_id is None else uuid_to_str(topic_id)}
    if topic_id is None:
        problems.error(f"Cannot read {path}")
    else:
        emit(f"version: 0 topic_id: {result['topic_id']}")
    return result


def dump_topic_store(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    from kompakt.storage.topic_store import TopicStoreCorruptError, decode, uuid_to_str
    result: dict[str, Any] = {"file": path, "type": "topic-store", "topics": [], "deleted_topic_ids": []}
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        topics, deleted = decode(data)
    except TopicStoreCorruptError as exc:
        result["error"] = str(exc)
        problems.error(f"Corrupt topic store {path}: {exc}")
        return result
    for meta in sorted(topics.values(), key=lambda t: t.name):
        row = {"topic": meta.name, "topicId": uuid_to_str(meta.topic_id), "partitions": meta.partitions,
               "configs": dict(sorted(meta.configs.items()))}
        result["topics"].append(row)
        configs = ",".join(f"{k}={v}" for k, v in row["configs"].items())
        emit(f"topic: {meta.name} topicId: {row['topicId']} partitions: {meta.partitions} configs: {configs}")
    for topic_id in sorted(uuid_to_str(u) for u in deleted):
        result["deleted_topic_ids"].append(topic_id)
        emit(f"deleted topicId: {topic_id}")
    return result


def dump_meta_properties(path: str, name: str, opts, problems: _Problems, emit) -> dict[str, Any]:
    from kompakt.config.broker_config import read_properties
    props = read_properties(path)
    for key, value in sorted(props.items()):
        emit(f"{key}={value}")
    return {"file": path, "type": "meta.properties", "properties": dict(sorted(props.items()))}


DUMPERS = {"log": dump_log, "index": dump_index, "timeindex": dump_time_index, "snapshot": dump_snapshot,
           "txnindex": dump_txn_index,
           "offset-checkpoint": dump_offset_checkpoint, "leader-epoch-checkpoint": dump_epoch_checkpoint,
           "partition-metadata": dump_partition_metadata, "topic-store": dump_topic_store,
           "meta-properties": dump_meta_properties}


def _expand(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += [os.path.join(p, n) for n in sorted(os.listdir(p)) if os.path.isfile(os.path.join(p, n))]
        else:
            out.append(p)
    return out


def run(args, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    paths = list(args.paths) + ([p.strip() for p in args.files.split(",") if p.strip()] if args.files else [])
    if not paths:
        print("dump-log: give at least one PATH (or --files a,b,...)", file=err)
        return 2
    if args.offsets_decoder or getattr(args, "transaction_log_decoder", False):
        args.print_data_log = True
    problems = _Problems(err)
    status = 0
    for path in _expand(paths):
        kind, name = _kind(path)
        if not args.json:
            print(f"Dumping {path}", file=out)
        if kind not in DUMPERS:
            if not os.path.exists(path):   # a mistyped path is an error, not a file to skip
                print(f"Cannot dump {path}: no such file or directory", file=err)
                status = 1
                continue
            print(f"Ignoring unknown file {path}", file=err)
            continue
        emit = (lambda line: None) if args.json else (lambda line: print(line, file=out))
        try:
            result = DUMPERS[kind](path, name, args, problems, emit)
        except (OSError, ValueError) as exc:
            print(f"Cannot dump {path}: {exc}", file=err)
            status = 1
            continue
        if args.json:
            print(json.dumps(result, separators=(",", ":")), file=out)
    for line in problems.lines():
        print(line, file=err)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kompakt dump-log")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
