"""Produce-time record checks: the compiled seam (kompakt/native/records.c) against the pure-Python
reference (record_check._py_check): same input -> same Check, and through validate_and_assign the
same bytes appended or the same error, over every codec, random batches and corrupt bytes. Golden
cases pin what the answer is, so both cannot be wrong the same way."""
from __future__ import annotations

import random
import struct

import pytest

from kompakt import native
from kompakt.config.topic_config import LogConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import KafkaError
from kompakt.storage import record_check as RC
from kompakt.storage.log_validator import validate_and_assign

NOW = 1_700_000_000_000
IMPLS = [pytest.param(None, id="python"),
         pytest.param("native", id="native",
                      marks=pytest.mark.skipif(native.LIB is None, reason="no C compiler"))]
needs_native = pytest.mark.skipif(native.LIB is None, reason="no C compiler: nothing to compare")


def v(n: int) -> bytes:
    return R.encode_varint(n)


def record(key=b"k", value=b"v", headers=(), td=0, od=0, attrs=0, raw_tail=b"") -> bytes:
    body = bytes([attrs]) + v(td) + v(od)
    body += v(-1) if key is None else v(len(key)) + key
    body += v(-1) if value is None else v(len(value)) + value
    body += v(len(headers))
    for hk, hv in headers:
        body += v(len(hk)) + hk + (v(-1) if hv is None else v(len(hv)) + hv)
    body += raw_tail
    return v(len(body)) + body


def both(data, pos, count, **kw):
    """(compiled, reference) answers for the same bytes."""
    return RC.check(data, pos, count, **kw), RC._py_check(data, pos, count, *_flags_args(**kw))


def _flags_args(require_key=False, check_timestamps=False, log_append_time=False, base_ts=0, fixed_ts=-1,
                now=0, before=0, after=0):
    flags = (RC.F_REQUIRE_KEY * require_key) | (RC.F_CHECK_TIMESTAMPS * check_timestamps) | \
            (RC.F_LOG_APPEND_TIME * log_append_time)
    return flags, base_ts, fixed_ts, now, before, after


@pytest.fixture(params=IMPLS)
def impl(request, monkeypatch):
    monkeypatch.setattr(RC, "_LIB", native.LIB if request.param else None)
    return request.param


# ---- golden answers, each implementation on its own ------------------------------------------

def test_golden_answers(impl):
    ok = record(od=0) + record(od=1)
    assert RC.check(ok, 0, 2, require_key=True, check_timestamps=False) == (RC.OK, 0, 0, False)
    assert RC.check(record(od=0) + record(od=5), 0, 2, require_key=True,
                    check_timestamps=False) == (RC.OK, 0, 0, True)
    keyless = record(od=0) + record(key=None, od=1) + record(key=None, od=2)
    assert RC.check(keyless, 0, 3, require_key=True, check_timestamps=False) == (RC.KEYLESS, 1, 0, False)
    assert RC.check(keyless, 0, 3, require_key=False, check_timestamps=False).status == RC.OK
    # a corrupt record after a keyless one: corrupt wins
    bad = keyless + b"\x7f"
    assert RC.check(bad, 0, 4, require_key=True, check_timestamps=False)[:3] == (RC.CORRUPT, 3, RC.BAD_SIZE)
    assert RC.check(ok + b"\x00", 0, 2, require_key=False, check_timestamps=False)[:3] == \
        (RC.CORRUPT, 2, RC.TRAILING)
    assert RC.check(ok, 0, 3, require_key=False, check_timestamps=False)[:3] == (RC.CORRUPT, 2, RC.PAST_END)
    # offsetDelta as a 6-byte varint: longer than Kafka's 5
    body = b"\x00\x00" + b"\x80\x80\x80\x80\x80\x00" + b"\x02k\x02v\x00"
    assert RC.check(v(len(body)) + body, 0, 1, require_key=False,
                    check_timestamps=False)[:3] == (RC.CORRUPT, 0, RC.VARINT_TOO_LONG)
    # a 5-byte varint whose high bits fall outside 32 bits is kept to 32 bits (Kafka's readVarint)
    body = b"\x00\x00" + b"\x80\x80\x80\x80\x10" + b"\x02k\x02v\x00"       # offsetDelta 2^32 -> 0
    assert RC.check(v(len(body)) + body, 0, 1, require_key=False, check_timestamps=False) == (RC.OK, 0, 0, False)
    body = b"\x00\x00\x00\x02k\x02v\x01"                                    # header count -1
    assert RC.check(v(len(body)) + body, 0, 1, require_key=False,
                    check_timestamps=False)[:3] == (RC.CORRUPT, 0, RC.NEG_HEADER_COUNT)
    body = b"\x00\x00\x00\x02k\x02v\x02\x01\x00"                            # header key size -1
    assert RC.check(v(len(body)) + body, 0, 1, require_key=False,
                    check_timestamps=False)[:3] == (RC.CORRUPT, 0, RC.NEG_HEADER_KEY)
    padded = record(raw_tail=b"\x00")                                       # a byte past the fields
    assert RC.check(padded, 0, 1, require_key=False, check_timestamps=False)[:3] == \
        (RC.CORRUPT, 0, RC.SIZE_MISMATCH)
    headers = record(headers=[(b"h1", b"x"), (b"h2", None)])
    assert RC.check(headers, 0, 1, require_key=True, check_timestamps=False).status == RC.OK


def test_golden_timestamps(impl):
    recs = record(td=0, od=0) + record(td=-5000, od=1) + record(td=9000, od=2)
    kw = dict(require_key=False, check_timestamps=True, base_ts=NOW, now=NOW, before=1000, after=10_000)
    assert RC.check(recs, 0, 3, **kw) == (RC.TIMESTAMP, 1, -5000, False)
    assert RC.check(recs, 0, 3, **dict(kw, before=10_000, after=1000)) == (RC.TIMESTAMP, 2, 9000, False)
    # no timestamp (-1) is never checked; LogAppendTime batches use the fixed timestamp for all
    assert RC.check(record(td=0), 0, 1, **dict(kw, base_ts=-1)).status == RC.OK
    assert RC.check(recs, 0, 3, **dict(kw, log_append_time=True, fixed_ts=NOW)).status == RC.OK
    assert RC.check(recs, 0, 3, **dict(kw, log_append_time=True, fixed_ts=NOW - 5000))[:2] == (RC.TIMESTAMP, 0)
    # the key rule comes first within a record
    both_bad = record(key=None, td=-9999, od=0)
    assert RC.check(both_bad, 0, 1, **dict(kw, require_key=True))[:2] == (RC.KEYLESS, 0)
    # extreme values never overflow into a wrong answer
    huge = record(td=2**63 - 1, od=0)
    assert RC.check(huge, 0, 1, **dict(kw, base_ts=2**62, before=2**63 - 1, after=2**63 - 1))[:2] == (RC.TIMESTAMP, 0)


# ---- differential: the compiled seam against the reference -----------------------------------

def random_records(rnd: random.Random, n: int) -> bytes:
    out = []
    for i in range(n):
        key = None if rnd.random() < 0.1 else bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 1, 5, 70, 200])))
        value = None if rnd.random() < 0.1 else bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 3, 100, 300])))
        headers = [(b"h%d" % j, None if rnd.random() < 0.3 else b"x" * rnd.randrange(20))
                   for j in range(rnd.choice([0, 0, 1, 3]))]
        od = i if rnd.random() < 0.95 else rnd.randrange(-3, n + 3)
        td = rnd.choice([0, 1, -1, 500, -70_000, 2**40, -(2**40)])
        out.append(record(key, value, headers, td=td, od=od))
    return b"".join(out)


def mutate(rnd: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    kind = rnd.randrange(5)
    if kind == 0 and b:                       # flip bytes
        for _ in range(rnd.randrange(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    elif kind == 1 and b:                     # truncate
        del b[rnd.randrange(len(b)):]
    elif kind == 2:                           # insert
        at = rnd.randrange(len(b) + 1)
        b[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 6)))
    elif kind == 3 and b:                     # continuation bits: long varints
        at = rnd.randrange(len(b))
        b[at:at] = b"\x80" * rnd.randrange(1, 11)
    else:                                     # high bits in a varint's last byte
        at = rnd.randrange(len(b)) if b else 0
        b[at:at] = b"\xff\xff\xff\xff\x7f"
    return bytes(b)


@needs_native
def test_compiled_and_reference_agree_on_random_and_corrupt_records():
    rnd = random.Random(13)
    checked = {RC.OK: 0, RC.CORRUPT: 0, RC.KEYLESS: 0, RC.TIMESTAMP: 0}
    for trial in range(3000):
        n = rnd.randrange(0, 12)
        data = random_records(rnd, n)
        if trial % 3:
            data = mutate(rnd, data)
        pos = rnd.choice([0, 0, 0, 1])
        data = b"\x00" * pos + data
        count = n if rnd.random() < 0.9 else rnd.randrange(-2, n + 3)
        kw = dict(require_key=rnd.random() < 0.7, check_timestamps=rnd.random() < 0.5,
                  log_append_time=rnd.random() < 0.1, base_ts=rnd.choice([NOW, -1, 0, 2**62]),
                  fixed_ts=rnd.choice([NOW, -1]), now=NOW, before=rnd.choice([1000, 2**63 - 1]),
                  after=rnd.choice([1000, 2**63 - 1]))
        compiled, reference = both(data, pos, count, **kw)
        assert compiled == reference, (trial, data.hex(), pos, count, kw)
        # bytearray and memoryview inputs are read in place and give the same answer
        assert RC.check(bytearray(data), pos, count, **kw) == compiled
        assert RC.check(memoryview(bytearray(data)), pos, count, **kw) == compiled
        checked[compiled.status] += 1
    assert all(checked.values()), checked      # every outcome was exercised


# ---- through validate_and_assign: every codec, same bytes or same error ------------------------

def cfg(**kw):
    return LogConfig.from_overrides({k.replace("_", "."): str(v) for k, v in kw.items()})


def outcome(monkeypatch, lib, data, config):
    monkeypatch.setattr(RC, "_LIB", lib)
    try:
        vr = validate_and_assign(data, next_offset=500, config=config, now_ms=NOW)
    except KafkaError as exc:
        return ("error", type(exc).__name__, exc.code, str(exc))
    return ("ok", bytes(vr.buffer), vr.first_offset, vr.last_offset, vr.recompressed)


def batch_with_payload(payload: bytes, count: int, codec: int) -> bytes:
    body = R.compress(codec, payload) if codec else payload
    buf = bytearray(R.BATCH_OVERHEAD + len(body))
    R._HEADER.pack_into(buf, 0, 0, len(buf) - 12, 0, 2, 0, codec, max(count - 1, 0), NOW, NOW, -1, -1, -1, count)
    buf[R.RECORDS_POS:] = body
    R._rewrite_crc(buf, 0, len(buf))
    return bytes(buf)


@needs_native
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=lambda c: R.CODEC_NAMES[c])
def test_validator_same_result_or_error_for_every_codec(monkeypatch, codec):
    rnd = random.Random(100 + codec)
    configs = [cfg(cleanup_policy="compact"), cfg(cleanup_policy="compact", message_timestamp_before_max_ms=60_000),
               cfg(), cfg(cleanup_policy="compact", compression_type="gzip")]
    outcomes = set()
    for trial in range(250):
        n = rnd.randrange(1, 10)
        payload = random_records(rnd, n)
        if trial % 2:
            payload = mutate(rnd, payload)
        data = batch_with_payload(payload, n, codec)
        config = configs[trial % len(configs)]
        a = outcome(monkeypatch, native.LIB, data, config)
        b = outcome(monkeypatch, None, data, config)
        assert a == b, (trial, payload.hex())
        outcomes.add(a[0] if a[0] == "ok" else a[2])
    assert "ok" in outcomes and len(outcomes) >= 3, outcomes


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=lambda c: R.CODEC_NAMES[c])
def test_validator_rules_per_codec(impl, codec):
    compact = cfg(cleanup_policy="compact")
    good = R.build_batch([(b"a", b"1", None, NOW), (b"b", None, [("h", b"x")], NOW)], compression=codec)
    vr = validate_and_assign(good, next_offset=9, config=compact, now_ms=NOW)
    assert (vr.first_offset, vr.last_offset, vr.recompressed) == (9, 10, False)
    assert bytes(vr.buffer[R.ATTRIBUTES_POS:]) == good[R.ATTRIBUTES_POS:]
    keyless = R.build_batch([(b"a", b"1", None, NOW), (None, b"2", None, NOW)], compression=codec)
    with pytest.raises(KafkaError, match="without key") as exc:
        validate_and_assign(keyless, next_offset=9, config=compact, now_ms=NOW)
    assert exc.value.code == 87   # INVALID_RECORD
    # inner offsets other than 0..n-1 are rewritten, as Kafka does
    odd = batch_with_payload(record(od=0) + record(od=7), 2, codec)
    vr = validate_and_assign(odd, next_offset=0, config=compact, now_ms=NOW)
    assert vr.recompressed and [r.offset_delta for r in R.decode_records(vr.buffer, 0, vr.header)] == [0, 1]
    trailing = batch_with_payload(record(od=0) + b"\x00\x00", 1, codec)
    with pytest.raises(KafkaError, match="followed by more bytes") as exc:
        validate_and_assign(trailing, next_offset=0, config=compact, now_ms=NOW)
    assert exc.value.code == 87   # INVALID_RECORD ("Incorrect declared batch size", Kafka's iterator)


def test_undecompressable_payload_is_corrupt(impl):
    data = bytearray(batch_with_payload(record(), 1, R.COMPRESSION_LZ4))
    data[R.RECORDS_POS + 4:] = b"\x00" * (len(data) - R.RECORDS_POS - 4)
    struct.pack_into(">I", data, R.CRC_POS, R.compute_crc(data, 0, len(data)))
    with pytest.raises(KafkaError, match="cannot decompress") as exc:
        validate_and_assign(bytes(data), next_offset=0, config=cfg(cleanup_policy="compact"), now_ms=NOW)
    assert exc.value.code == 2


@pytest.mark.parametrize("codec", [0, 4], ids=["none", "zstd"])
def test_every_rejected_record_is_listed(impl, codec):
    """Kafka's LogValidator lists each rejected record (index in the batch, reason), not the first."""
    compact = cfg(cleanup_policy="compact")
    keyless = R.build_batch([(None, b"1", None, NOW), (b"b", b"2", None, NOW), (None, b"3", None, NOW)],
                            compression=codec)
    with pytest.raises(KafkaError) as exc:
        validate_and_assign(keyless, next_offset=9, config=compact, now_ms=NOW, topic_partition="c-0")
    assert exc.value.code == 87
    reason = "Compacted topic cannot accept message without key in topic partition c-0"
    assert exc.value.record_errors == [(0, reason), (2, reason)]
    assert str(exc.value).startswith("One or more records have been rejected due to 2 record errors in total")
    late = R.build_batch([(b"a", b"1", None, NOW + 10**9), (b"b", b"2", None, NOW)], compression=codec)
    with pytest.raises(KafkaError) as exc:
        validate_and_assign(late, next_offset=0, config=cfg(message_timestamp_after_max_ms=1000), now_ms=NOW)
    assert exc.value.code == 32    # INVALID_TIMESTAMP
    assert [i for i, _ in exc.value.record_errors] == [0]
    assert exc.value.record_errors[0][1].startswith(f"Timestamp {NOW + 10**9} of message with offset 0 ")
