"""ListOffsets (key 2): golden bytes, earliest / latest / max timestamp / by timestamp, errors."""
from kafka.protocol.consumer.offsets import ListOffsetsRequest

from admin_harness import framed, h, s16  # noqa: F401  (h is a fixture)

from kompakt.protocol.records import build_batch
from kompakt.storage import TopicPartition

LT = ListOffsetsRequest.ListOffsetsTopic
LP = LT.ListOffsetsPartition
TS = 1_700_000_000_000


def fill(h, topic="t"):
    """Offsets 0-5, one batch each, timestamps TS, TS+1000, TS+5000 (max), TS+2000, TS+3000, TS+4000."""
    log = h.lm.get_log(TopicPartition(topic, 0))
    for ts in (TS, TS + 1000, TS + 5000, TS + 2000, TS + 3000, TS + 4000):
        log.append_as_leader(bytearray(build_batch([(b"k", b"v")], base_timestamp=ts)))
    log.sync_data()   # the high watermark is the durable offset


async def lookup(h, ts, version=7, isolation=0, partition=0, topic="t"):
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, timeout_ms=1000,
                             topics=[LT(name=topic, partitions=[LP(partition_index=partition, timestamp=ts,
                                                                   current_leader_epoch=-1)])])
    resp = await h.call(req, version)
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset, p.timestamp


async def test_golden_v1_latest(h):
    h.create("t", 1)
    fill(h)
    out = await h.send(bytes.fromhex("0002 0001 00000004") + s16("c")     # ListOffsets v1, corr 4
                       + bytes.fromhex("ffffffff")                        # replica_id -1
                       + bytes.fromhex("00000001") + s16("t")             # topics: "t"
                       + bytes.fromhex("00000001 00000000")               #   partitions: 1, index 0
                       + bytes.fromhex("ffffffffffffffff"))               #   timestamp -1 (latest)
    assert out == framed(bytes.fromhex("00000004")                        # correlation_id
                         + bytes.fromhex("00000001") + s16("t")           # topics: "t"
                         + bytes.fromhex("00000001 00000000 0000")        #   partition 0, error 0
                         + bytes.fromhex("ffffffffffffffff")              #   timestamp -1
                         + bytes.fromhex("0000000000000006"))             #   offset 6


async def test_special_timestamps(h):
    h.create("t", 1)
    fill(h)
    h.lm.get_log(TopicPartition("t", 0)).delete_records(2)
    assert await lookup(h, -2) == (0, 2, -1)             # earliest = log start offset
    assert await lookup(h, -1) == (0, 6, -1)             # latest = high watermark
    assert await lookup(h, -1, isolation=1) == (0, 6, -1)  # read_committed: last stable offset
    assert await lookup(h, -3) == (0, 2, TS + 5000)      # max timestamp
    assert await lookup(h, -4, version=8) == (0, 2, -1)  # earliest local
    assert await lookup(h, -5, version=9) == (0, -1, -1)  # latest tiered: none


async def test_by_timestamp(h):
    h.create("t", 1)
    fill(h)
    assert await lookup(h, TS) == (0, 0, TS)
    assert await lookup(h, TS + 1500) == (0, 2, TS + 5000)   # first offset with a timestamp >= target
    assert await lookup(h, TS + 5001) == (0, -1, -1)         # none that recent


async def test_empty_log_and_errors(h):
    h.create("t", 1)
    assert await lookup(h, -1) == (0, 0, -1)
    assert await lookup(h, -3) == (0, -1, -1)
    assert (await lookup(h, -1, partition=3))[0] == 3
    assert (await lookup(h, -1, topic="missing"))[0] == 3
    assert (await lookup(h, -42))[0] == 42                   # INVALID_REQUEST


async def test_lookups_by_time_run_off_the_loop(h):
    # by time and MAX_TIMESTAMP read segment bytes that may be cold: a worker thread; -1/-2 stay
    import threading
    h.create("t", 1)
    fill(h)
    plog = h.lm.get_log(TopicPartition("t", 0))
    loop_thread = threading.get_ident()
    seen = []
    real = plog.offset_for_timestamp

    def offset_for_timestamp(*args, **kw):
        seen.append(threading.get_ident() == loop_thread)
        return real(*args, **kw)

    real_max = plog.max_timestamp_offset

    def max_timestamp_offset(*args, **kw):
        seen.append(threading.get_ident() == loop_thread)
        return real_max(*args, **kw)

    plog.offset_for_timestamp = offset_for_timestamp
    plog.max_timestamp_offset = max_timestamp_offset
    assert await lookup(h, TS + 1500) == (0, 2, TS + 5000)
    assert await lookup(h, -3) == (0, 2, TS + 5000)          # MAX_TIMESTAMP reads the batch too
    assert await lookup(h, -1) == (0, 6, -1)
    assert seen == [False, False]
