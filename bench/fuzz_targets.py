"""Fuzz targets: one function per kind of untrusted input, `target(data: bytes) -> None`.

Each target feeds fuzzed bytes to one of Kompakt's parsers the way the broker does and catches
exactly the errors that parser promises for bad input (the ones the broker turns into a Kafka
error code, a closed connection or a repaired file). Anything else escaping a target is a bug:
bench/bench_fuzz.py runs these under atheris (coverage-guided), tests/fuzz/test_fuzz_smoke.py runs a
short smoke of each, and every crash found becomes a regression input in tests/fuzz/regressions/.

Targets:
  frames      request framing (FrameReader over a chunked stream) and the decoding of every API
              key and version the broker advertises (dispatch.prepare's path: the handler's own
              decoder or kafka-python's schema)
  records     record batches in every codec: header fields and records from the fuzzer, the CRC
              made valid so the parser is reached; decode_records and the produce validation
              (validate_and_assign for a compact topic and a recompressing delete topic)
  cleaner     the cleaner's per-batch seam, the compiled and the pure-Python implementation side by
              side: index_batch and filter_batch must give the same result (or both refuse the batch)
  offsets     __consumer_offsets records: decode_key / decode_value
  files       checkpoint files, the topic store, partition.metadata and producer snapshots
  loader      a partition directory of fuzzed files opened by the loader (recovery after a crash)
  all         every target above, the first byte choosing (one process: the suite's smoke)
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import uuid

import crc32c

from kompakt.broker.handlers import load_handlers
from kompakt.cleaner import batch_ops, native, offset_map
from kompakt.config.topic_config import LogConfig
from kompakt.protocol import codec, group_records, registry
from kompakt.protocol import records as R
from kompakt.protocol.errors import KafkaError
from kompakt.protocol.framing import FrameReader, InvalidFrameError
from kompakt.storage import checkpoint, producer_state, topic_store
from kompakt.storage.log_validator import validate_and_assign

HANDLERS = load_handlers()
SERVED = sorted((key, v) for key, m in HANDLERS.items() for v in range(m.MIN_VERSION, m.MAX_VERSION + 1))


# ------------------------------------------------------------------------------------- frames
def frames(data: bytes) -> None:
    if len(data) < 3:
        return
    if data[0] & 1:                                   # a byte stream through the frame reader
        reader = FrameReader(max_bytes=4096)
        step = 1 + data[1] % 64
        try:
            for i in range(2, len(data), step):
                reader.feed(data[i:i + step])
                while (frame := reader.next_frame()) is not None:
                    assert len(frame) <= 4096
        except InvalidFrameError:
            pass
        return
    key, version = SERVED[int.from_bytes(data[1:3], "big") % len(SERVED)]
    flexible = registry.API[key].flexible_from if key in registry.API else None
    head = struct.pack(">hhih", key, version, 7, -1)
    if flexible is not None and version >= flexible:
        head += b"\x00"                               # request header v2: empty tagged fields
    frame = bytearray(head + data[3:])
    try:
        header = codec.read_request_header(frame)
        decode = getattr(HANDLERS[key], "decode", None) or codec.decode_request
        decode(header, frame)
    except codec.MalformedRequestError:
        pass


# ------------------------------------------------------------------------------------- records
_HDR = struct.Struct(">qiibIhiqqqhii")   # a v2 batch header, records_count last
COMPACT = LogConfig.from_overrides({"cleanup.policy": "compact"})
RECOMPRESS = LogConfig.from_overrides({"compression.type": "zstd"})


def make_batch(data: bytes) -> bytes | None:
    """A v2 batch whose header fields and records come from `data`, with a valid CRC and length.
    Layout of `data`: attrs(2) last_delta(2) count(2) flags(1) base_ts(8) pid(2) rest=records."""
    if len(data) < 17:
        return None
    attrs, last_delta, count, flags = struct.unpack_from(">hhhB", data, 0)
    base_ts = struct.unpack_from(">q", data, 7)[0]
    pid = struct.unpack_from(">h", data, 15)[0]
    body = data[17:]
    codec_id = attrs & 0x07
    if flags & 1 and codec_id in (1, 2, 3, 4):
        try:
            body = R.compress(codec_id, body)         # so the decompressed bytes are the fuzzer's
        except Exception:  # noqa: BLE001 - a codec that cannot compress this: keep it raw
            pass
    max_ts = min(base_ts + (flags >> 1), 2**63 - 1)
    head = _HDR.pack(0, 49 + len(body), 0, 2, 0, attrs, last_delta, base_ts, max_ts,
                     pid if flags & 0x80 else -1, 0, 0 if flags & 0x80 else -1, count)
    batch = bytearray(head + body)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def records(data: bytes) -> None:
    batch = make_batch(data)
    if batch is None:
        return
    for pos, header in R.iter_batches(batch):
        try:
            R.decode_records(batch, pos, header)
        except R.CorruptRecordError:
            pass
    for config in (COMPACT, RECOMPRESS):
        try:
            validate_and_assign(bytearray(batch), next_offset=100, config=config, now_ms=1_700_000_000_000)
        except KafkaError:
            pass


# ------------------------------------------------------------------------------------- cleaner
def _filter_outcome(fn):
    try:
        res = fn()
    except batch_ops.CorruptBatchError:
        return "corrupt"
    return (None if res.output is None else bytes(res.output), res.read, res.retained, res.tombstones,
            res.keyless, res.copied, res.stamped, res.held)


def _index_outcome(omap, batch, hdr):
    try:
        res = batch_ops.index_batch(batch, hdr, omap, 0, omap.max_desired_size)
    except batch_ops.CorruptBatchError:
        return "corrupt"
    return res, omap.size, omap.latest_offset, bytes(omap.buffer[:omap.slots * offset_map.BYTES_PER_ENTRY])


def _maps():
    """Two fresh small offset maps: nothing left from an earlier input (a corrupt batch may leave a
    map partly filled, differently in each implementation; the clean is abandoned then anyway)."""
    return offset_map.SkimpyOffsetMap(24 * 257), offset_map.SkimpyOffsetMap(24 * 257)


def cleaner(data: bytes) -> None:
    """The compiled seam against the Python one: same result, byte for byte, or both refuse."""
    if native.LIB is None:
        raise RuntimeError("the cleaner target needs the compiled seam (a C compiler)")
    batch = make_batch(data)
    if batch is None:
        return
    hdr = batch_ops.HEADER.unpack_from(batch)
    saved = batch_ops._LIB
    outcomes = []
    try:
        for lib, omap in zip((native.LIB, None), _maps()):
            batch_ops._LIB = lib
            indexed = _index_outcome(omap, batch, hdr)
            filtered = _filter_outcome(lambda: batch_ops.filter_batch(
                batch, hdr, omap, 1_700_000_000_000, 86_400_000, retain_empty=bool(data[6] & 2)))
            outcomes.append((indexed, filtered))
    finally:
        batch_ops._LIB = saved
    if outcomes[0] != outcomes[1]:
        raise AssertionError("compiled and Python cleaner seams disagree: " + _first_difference(*outcomes))


def _first_difference(c, py) -> str:
    names = (("index_batch", ("result", "map size", "latest offset", "map bytes")),
             ("filter_batch", ("output", "read", "retained", "tombstones", "keyless", "copied", "stamped", "held")))
    for (step, fields), a, b in zip(names, c, py):
        if a == b:
            continue
        if "corrupt" in (a, b):
            return f"{step}: C {'refused' if a == 'corrupt' else 'accepted'} the batch, Python " \
                   f"{'refused' if b == 'corrupt' else 'accepted'} it"
        for name, x, y in zip(fields, a, b):
            if x != y:
                show = (lambda v: v.hex() if isinstance(v, bytes) else repr(v))  # noqa: E731
                return f"{step} {name}: C {show(x)[:400]} / Python {show(y)[:400]}"
    return "?"


# ------------------------------------------------------------------------------------- offsets
def offsets(data: bytes) -> None:
    if len(data) < 2:
        return
    cut = 1 + data[0] % max(1, len(data) - 1)
    key_bytes, value_bytes = data[1:cut], data[cut:]
    try:
        key = group_records.decode_key(key_bytes)
    except group_records.GroupRecordError:
        key = {"type": ("offset_commit", "group_metadata")[data[0] & 1]}
    try:
        group_records.decode_value(key, value_bytes if data[0] & 2 else None)
        group_records.decode_value(key, value_bytes)
    except group_records.GroupRecordError:
        pass


# ------------------------------------------------------------------------------------- files
def files(data: bytes) -> None:
    if not data:
        return
    kind, body = data[0] % 5, data[1:]
    if kind in (0, 1):
        formatter = (checkpoint.OFFSET_FORMATTER, checkpoint.EPOCH_FORMATTER)[kind]
        try:
            checkpoint.parse(body.decode("utf-8", "replace"), formatter)
        except checkpoint.CheckpointCorruptError:
            pass
    elif kind == 2:                                   # the topic store, its CRC made valid when it parses
        try:
            doc = json.loads(body.decode("utf-8"))
            if isinstance(doc, dict) and isinstance(doc.get("topics"), list):
                doc["crc32c"] = crc32c.crc32c(topic_store._canonical(
                    {"deleted_topic_ids": doc.get("deleted_topic_ids"), "topics": doc["topics"]}))
                body = json.dumps(doc).encode()
        except (ValueError, TypeError):
            pass
        try:
            topic_store.decode(body)
        except topic_store.TopicStoreCorruptError:
            pass
    elif kind == 3:                                   # a producer snapshot, its CRC made valid
        snap = bytearray(body)
        if len(snap) >= producer_state.SNAPSHOT_HEADER_SIZE:
            struct.pack_into(">I", snap, 2, crc32c.crc32c(bytes(snap[producer_state.CRC_START:])))
        try:
            producer_state.decode_snapshot(bytes(snap))
        except producer_state.CorruptSnapshotError:
            pass
    else:
        with _scratch() as d:
            with open(os.path.join(d, "partition.metadata"), "wb") as f:
                f.write(body)
            try:
                topic_store.read_partition_metadata(d)
            except topic_store.TopicStoreCorruptError:
                pass


class _scratch:
    """A fresh directory under /dev/shm (memory) when there is one."""

    def __enter__(self) -> str:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.path = tempfile.mkdtemp(prefix="kompakt-fuzz-", dir=base)
        return self.path

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# ------------------------------------------------------------------------------------- loader
LOADER_CONFIG = LogConfig.from_overrides({"cleanup.policy": "compact", "internal.segment.bytes": "4096"})
_NAMES = ["00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
          "00000000000000000005.log", "00000000000000000005.index", "00000000000000000005.snapshot",
          "00000000000000000005.log.cleaned", "00000000000000000005.log.swap", "00000000000000000000.log.deleted",
          "leader-epoch-checkpoint", "partition.metadata", "00000000000000000000.txnindex"]


def loader(data: bytes) -> None:
    """Files cut from `data` (each: name index, length, bytes; a valid batch where asked), then
    Log.open as after a crash: it must repair the dir or refuse it with its own error."""
    from kompakt.storage.log import Log
    from kompakt.storage.offset_index import CorruptIndexError
    with _scratch() as root:
        d = os.path.join(root, "t-0")
        os.mkdir(d)
        pos = 0
        while pos + 3 <= len(data):
            name = _NAMES[data[pos] % len(_NAMES)]
            n = int.from_bytes(data[pos + 1:pos + 3], "big") % 2048
            chunk = data[pos + 3:pos + 3 + n]
            pos += 3 + n
            if data[pos - n - 3] & 0x80 and name.endswith(".log"):
                chunk = (make_batch(chunk) or b"") + chunk[:8]     # a real batch and a torn tail
            with open(os.path.join(d, name), "ab") as f:
                f.write(chunk)
        try:
            lg = Log.open(d, LOADER_CONFIG, had_clean_shutdown=bool(data[:1] and data[0] & 0x40),
                          log_start_offset=None, recovery_point=0)
        except (KafkaError, CorruptIndexError, producer_state.CorruptSnapshotError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, IsADirectoryError)):
                raise
            return
        try:
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                got = lg.read(offset, 1 << 16)
                if not got.records:
                    # a hole (a segment truncated by recovery, the next one starting later, as Kafka
                    # leaves it): go on at the next segment, as a reader must
                    later = [s.base_offset for s in lg.segments if s.base_offset > offset]
                    if not later:
                        break
                    offset = later[0]
                    continue
                last = None
                for p, h in R.iter_batches(got.records):
                    try:   # the loader checks CRCs, not codecs (as Kafka's recovery): fetch serves bytes
                        R.decode_records(got.records, p, h)
                    except R.CorruptRecordError:
                        pass
                    last = h
                offset = last.next_offset
        finally:
            lg.close()


TARGETS = {"frames": frames, "records": records, "cleaner": cleaner, "offsets": offsets,
           "files": files, "loader": loader}
_ORDER = sorted(TARGETS)


def every_target(data: bytes) -> None:
    """All targets in one (the suite's smoke: one process start): the first byte picks the target."""
    if data:
        name = _ORDER[data[0] % len(_ORDER)]
        if name != "cleaner" or native.LIB is not None:
            TARGETS[name](data[1:])


TARGETS["all"] = every_target


def seeds(name: str) -> list[bytes]:
    """A few valid inputs per target, so the fuzzer starts from the formats and mutates them."""
    batch = R.build_batch([(b"k1", b"v1"), (b"k2", None), (None, b"v3")], base_timestamp=1_700_000_000_000)
    if name == "frames":
        return [b"\x00\x00\x00" + bytes(batch), b"\x01\x05" + struct.pack(">i", 6) + b"abcdef"]
    if name in ("records", "cleaner"):
        recs = batch[61:]
        return [struct.pack(">hhhBqh", c, 2, 3, 1, 1_700_000_000_000, 5) + recs for c in range(5)]
    if name == "offsets":
        key = group_records.encode_offset_commit_key("g", "t", 0)
        return [bytes([len(key) + 1]) + key + group_records.encode_offset_commit_value(5, "m", 1)]
    if name == "files":
        return [b"\x00" + b"0\n1\nt 0 5\n", b"\x01" + b"0\n1\n0 0\n",
                b"\x02" + topic_store.encode({"t": topic_store.TopicMeta("t", uuid.uuid4(), 1, {})})]
    if name == "all":
        return [bytes([_ORDER.index(t)]) + seed for t in _ORDER for seed in seeds(t)]
    if name == "loader":
        spec = struct.pack(">hhhBqh", 0, 2, 3, 0, 1_700_000_000_000, 5) + batch[61:]
        return [b"\x80" + len(spec).to_bytes(2, "big") + spec]
    return [b""]
