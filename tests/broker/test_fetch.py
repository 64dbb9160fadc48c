"""Fetch (key 1): golden bytes, limits and the at-least-one-batch rule, errors, isolation,
long polls woken by appends, topic ids, sessions."""
import asyncio
import os
import struct
import sys
import threading
import uuid

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse

from admin_harness import framed, h, s16  # noqa: F401  (h is a fixture)

from kompakt.protocol.records import build_batch
from kompakt.storage import TopicPartition
from kompakt.testing.poll import until

FT = FetchRequest.FetchTopic
FP = FT.FetchPartition


async def send(h, frame: bytes) -> bytes:
    """Like Harness.send, joining the buffer list Fetch answers with (zero-copy encoder)."""
    ctx, module, request = h.broker.dispatcher.prepare(bytearray(frame))
    out = await h.broker.dispatcher.run(ctx, module, request)
    return b"".join(bytes(c) for c in out) if isinstance(out, list) else bytes(out)


async def call(h, request, version):
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id="test")
    out = await send(h, bytes(request.encode(header=True)))
    return FetchResponse.decode(out[4:], version=version, header=True)


def append(h, topic, partition, n, size=10, sync=True):
    """n records, synced (readable at once: the high watermark is the durable offset) unless
    sync=False, which leaves the sync to the group commit, as the broker's appends do."""
    log = h.lm.get_log(TopicPartition(topic, partition))
    log.append_as_leader(bytearray(build_batch([(b"k", b"x" * size) for _ in range(n)],
                                               base_timestamp=1_700_000_000_000)))
    if sync:
        log.sync_data()
    h.lm.notify_append(TopicPartition(topic, partition))


def stored(h, topic, partition, offset=0):
    return h.lm.get_log(TopicPartition(topic, partition)).read(offset, 1 << 30).records


async def fetch(h, parts, version=11, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation=0,
                session_id=0, by_id=None, epoch=-1, forget=()):
    """parts: [(topic, partition, offset, partition_max_bytes)] -> {(topic, p): partition data}."""
    topics = {}
    for topic, p, offset, pmax in parts:
        topics.setdefault(topic, []).append(FP(partition=p, fetch_offset=offset, partition_max_bytes=pmax,
                                               current_leader_epoch=-1, log_start_offset=-1))
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes,
                       isolation_level=isolation, session_id=session_id, session_epoch=epoch,
                       topics=[FT(topic=t, topic_id=(by_id or {}).get(t), partitions=ps) for t, ps in topics.items()],
                       forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in forget],
                       rack_id="")
    resp = await call(h, req, version)
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            out[(t.topic if version < 13 else t.topic_id, p.partition_index)] = p
    return resp, out


async def test_golden_v4(h):
    h.create("t", 1)
    append(h, "t", 0, 2)
    records = stored(h, "t", 0)
    out = await send(h, 
        bytes.fromhex("0001 0004 00000021") + s16("c")       # Fetch v4, correlation 33
        + bytes.fromhex("ffffffff")                           # replica_id -1
        + bytes.fromhex("00000000 00000000 00100000")         # max_wait 0, min_bytes 0, max_bytes 1 MiB
        + bytes.fromhex("00")                                 # isolation read_uncommitted
        + bytes.fromhex("00000001") + s16("t")                # topics: 1, "t"
        + bytes.fromhex("00000001 00000000")                  #   partitions: 1, partition 0
        + bytes.fromhex("0000000000000000 00010000"))         #   fetch_offset 0, partition_max 64 KiB
    assert out == framed(
        bytes.fromhex("00000021")                             # correlation_id
        + bytes.fromhex("00000000")                           # throttle_time_ms
        + bytes.fromhex("00000001") + s16("t")                # responses: 1, "t"
        + bytes.fromhex("00000001 00000000 0000")             #   partitions: 1, index 0, error 0
        + bytes.fromhex("0000000000000002")                   #   high_watermark 2
        + bytes.fromhex("0000000000000002")                   #   last_stable_offset 2
        + bytes.fromhex("ffffffff")                           #   aborted_transactions null
        + struct.pack(">i", len(records)) + records)          #   records: the stored batch, as stored


async def test_golden_v12_empty_at_log_end(h):
    h.create("t", 1)
    append(h, "t", 0, 1)
    out = await send(h, 
        bytes.fromhex("0001 000c 00000002") + s16("c") + bytes.fromhex("00")   # Fetch v12, header v2
        + bytes.fromhex("ffffffff 00000000 00000000 00100000 00")  # replica, wait 0, min 0, max, isolation
        + bytes.fromhex("00000000 ffffffff")                  # session_id 0, session_epoch -1
        + bytes.fromhex("02 0274")                            # topics: 1, compact "t"
        + bytes.fromhex("02 00000000 ffffffff")               #   partitions: 1, partition 0, leader epoch -1
        + bytes.fromhex("0000000000000001 ffffffff")          #   fetch_offset 1 (log end), last fetched epoch
        + bytes.fromhex("ffffffffffffffff 00010000 00")       #   log_start_offset, partition_max, tags
        + bytes.fromhex("00 01 01 00 00"))                    # topic tags, forgotten [], rack "", tags
    assert out == framed(
        bytes.fromhex("00000002 00")                          # correlation_id, header tags
        + bytes.fromhex("00000000 0000 00000000")             # throttle, error, session_id 0
        + bytes.fromhex("02 0274 02 00000000 0000")           # responses: "t", partitions: 0, error 0
        + bytes.fromhex("0000000000000001" "0000000000000001" "0000000000000000")  # hw, lso, log start
        + bytes.fromhex("00 ffffffff 01 00")                  # aborted null, preferred replica, records empty, tags
        + bytes.fromhex("00 00"))                             # topic tags, response tags


async def test_partition_max_bytes_and_at_least_one_batch(h):
    h.create("t", 2)
    for _ in range(3):
        append(h, "t", 0, 5, size=100)
        append(h, "t", 1, 5, size=100)
    one_batch = len(stored(h, "t", 0)) // 3
    # a limit smaller than one batch still returns the first batch of the first partition...
    _, out = await fetch(h, [("t", 0, 0, 10), ("t", 1, 0, 10)])
    assert len(out[("t", 0)].records) == one_batch
    # ...but not of later ones once data went out
    assert out[("t", 1)].records == b""
    # within the limit: whole batches only
    _, out = await fetch(h, [("t", 0, 0, one_batch * 2 + 5)])
    assert len(out[("t", 0)].records) == 2 * one_batch


async def test_response_max_bytes_shared_across_partitions(h):
    h.create("t", 2)
    for _ in range(4):
        append(h, "t", 0, 5, size=100)
        append(h, "t", 1, 5, size=100)
    one_batch = len(stored(h, "t", 0)) // 4
    _, out = await fetch(h, [("t", 0, 0, 1 << 20), ("t", 1, 0, 1 << 20)], max_bytes=3 * one_batch)
    assert len(out[("t", 0)].records) == 3 * one_batch and out[("t", 1)].records == b""


async def test_offset_out_of_range_and_unknown_partition(h):
    h.create("t", 1)
    append(h, "t", 0, 3)
    _, out = await fetch(h, [("t", 0, 4, 1000), ("missing", 0, 0, 1000), ("t", 9, 0, 1000)])
    assert out[("t", 0)].error_code == 1 and out[("t", 0)].high_watermark == 3
    assert out[("missing", 0)].error_code == 3 and out[("t", 9)].error_code == 3


async def test_read_committed_answers_empty_aborted_list(h):
    h.create("t", 1)
    append(h, "t", 0, 2)
    _, out = await fetch(h, [("t", 0, 0, 1000)], isolation=1)
    assert out[("t", 0)].aborted_transactions == [] and out[("t", 0)].records
    _, out = await fetch(h, [("t", 0, 0, 1000)], isolation=0)
    assert out[("t", 0)].aborted_transactions is None


async def test_long_poll_is_woken_by_an_append(h):
    h.create("t", 1)
    h.broker.fetch_waiters.bind(asyncio.get_running_loop())
    h.lm.append_listener = h.broker.fetch_waiters.notify
    task = asyncio.create_task(fetch(h, [("t", 0, 0, 1000)], max_wait=30_000, min_bytes=1))
    await until(lambda: h.broker.fetch_waiters.waiting, "the fetch to park")
    append(h, "t", 0, 1, sync=False)
    _, out = await asyncio.wait_for(task, 20)            # far below max_wait: the append's sync woke it
    assert out[("t", 0)].records
    assert h.broker.fetch_waiters.waiting == 0


async def test_long_poll_times_out_empty(h):
    h.create("t", 1)
    _, out = await fetch(h, [("t", 0, 0, 1000)], max_wait=20, min_bytes=1)
    assert out[("t", 0)].records == b"" and out[("t", 0)].error_code == 0
    assert h.broker.fetch_waiters.waiting == 0


async def test_topic_ids_from_v13(h):
    meta = h.create("t", 1)
    append(h, "t", 0, 1)
    _, out = await fetch(h, [("t", 0, 0, 1000)], version=13, by_id={"t": meta.topic_id})
    assert out[(meta.topic_id, 0)].records
    unknown = uuid.uuid4()
    _, out = await fetch(h, [("u", 0, 0, 1000)], version=16, by_id={"u": unknown})
    assert out[(unknown, 0)].error_code == 100


async def test_sessionless_fetch_answers_session_id_zero(h):
    h.create("t", 1)
    resp, _ = await fetch(h, [("t", 0, 0, 1000)], version=7, epoch=-1)
    assert resp.session_id == 0


async def test_incremental_session_answers_only_news(h):
    h.create("t", 2)
    append(h, "t", 0, 1)
    # full fetch, epoch 0: a session is opened and every partition answered
    resp, out = await fetch(h, [("t", 0, 0, 1000), ("t", 1, 0, 1000)], version=7, epoch=0)
    sid = resp.session_id
    assert sid != 0 and set(out) == {("t", 0), ("t", 1)} and out[("t", 0)].records
    # epoch 1: the client moved p0 to offset 1; nothing new anywhere -> no partitions at all
    resp, out = await fetch(h, [("t", 0, 1, 1000)], version=7, session_id=sid, epoch=1)
    assert (resp.error_code, resp.session_id, out) == (0, sid, {})
    # epoch 2: an append to p1 -> only p1, with its records and new high watermark
    append(h, "t", 1, 2)
    resp, out = await fetch(h, [], version=7, session_id=sid, epoch=2)
    assert set(out) == {("t", 1)} and out[("t", 1)].high_watermark == 2 and out[("t", 1)].records
    # epoch 3: p1 forgotten; appends to it are no longer reported
    resp, out = await fetch(h, [("t", 1, 2, 1000)], version=7, session_id=sid, epoch=3,
                            forget=[("t", [1])])
    append(h, "t", 1, 1)
    resp, out = await fetch(h, [], version=7, session_id=sid, epoch=4)
    assert out == {}


async def test_session_errors_and_close(h):
    h.create("t", 1)
    resp, _ = await fetch(h, [("t", 0, 0, 1000)], version=12, epoch=0)
    sid = resp.session_id
    resp, _ = await fetch(h, [], version=12, session_id=sid, epoch=5)
    assert resp.error_code == 71                          # INVALID_FETCH_SESSION_EPOCH
    resp, _ = await fetch(h, [], version=12, session_id=sid + 1, epoch=1)
    assert resp.error_code == 70                          # FETCH_SESSION_ID_NOT_FOUND
    resp, out = await fetch(h, [("t", 0, 0, 1000)], version=12, session_id=sid, epoch=-1)
    assert resp.session_id == 0 and ("t", 0) in out       # closed; answered in full
    resp, _ = await fetch(h, [], version=12, session_id=sid, epoch=1)
    assert resp.error_code == 70


async def test_sessions_by_topic_id(h):
    meta = h.create("t", 1)
    ids = {"t": meta.topic_id}
    resp, out = await fetch(h, [("t", 0, 0, 1000)], version=13, epoch=0, by_id=ids)
    sid = resp.session_id
    append(h, "t", 0, 1)
    resp, out = await fetch(h, [], version=13, session_id=sid, epoch=1, by_id=ids)
    assert list(out) == [(meta.topic_id, 0)] and out[(meta.topic_id, 0)].records


async def test_no_slots_means_no_sessions(tmp_path):
    from admin_harness import Harness
    h = Harness(tmp_path, **{"max.incremental.fetch.session.cache.slots": "0"})
    try:
        h.create("t", 1)
        resp, out = await fetch(h, [("t", 0, 0, 1000)], version=7, epoch=0)
        assert resp.session_id == 0 and ("t", 0) in out
    finally:
        h.close()


async def test_records_pass_through_all_versions(h):
    h.create("t", 1)
    append(h, "t", 0, 3)
    expected = stored(h, "t", 0)
    from kompakt.broker.handlers import fetch as fetch_handler
    for version in range(fetch_handler.MIN_VERSION, fetch_handler.MAX_VERSION + 1):
        resp, out = await fetch(h, [("t", 0, 0, 1 << 20)], version=version,
                                by_id={"t": h.lm.topics["t"].topic_id})
        key = ("t", 0) if version < 13 else (h.lm.topics["t"].topic_id, 0)
        assert bytes(out[key].records) == bytes(expected), version
        assert isinstance(resp, FetchResponse)


async def test_session_rotates_partitions_that_returned_data(h):
    h.create("t", 2)
    for p in (0, 1):
        for _ in range(2):
            append(h, "t", p, 5, size=200)
    one_batch = len(stored(h, "t", 0)) // 2
    # max_bytes fits one batch: the first partition in session order gets served
    resp, out = await fetch(h, [("t", 0, 0, 1 << 20), ("t", 1, 0, 1 << 20)], version=7, epoch=0,
                            max_bytes=one_batch)
    assert out[("t", 0)].records and not out[("t", 1)].records
    sid = resp.session_id
    # incremental: session order p0, p1 -> p0 is served and moves behind p1 ...
    resp, out = await fetch(h, [], version=7, session_id=sid, epoch=1, max_bytes=one_batch)
    assert set(out) == {("t", 0)}
    # ... so next time p1 goes first
    resp, out = await fetch(h, [], version=7, session_id=sid, epoch=2, max_bytes=one_batch)
    assert out[("t", 1)].records and ("t", 0) not in out


async def test_reads_from_older_segments_run_off_the_loop_the_tail_on_it(h):
    # a catch-up read may hit the disk: a worker thread; a tail read is page cache: the loop
    import threading
    h.create("t", 1)
    plog = h.lm.get_log(TopicPartition("t", 0))
    for _ in range(2):
        append(h, "t", 0, 5, size=50)
        plog.roll()
    append(h, "t", 0, 5, size=50)
    assert len(plog.segments) == 3
    tail = plog.active_segment.base_offset
    everything = bytes(stored(h, "t", 0))
    loop_thread = threading.get_ident()
    seen = []
    real_read = plog.read

    def read(offset, *args, **kw):
        seen.append((offset, threading.get_ident() == loop_thread))
        return real_read(offset, *args, **kw)

    plog.read = read
    _, got = await fetch(h, [("t", 0, 0, 1 << 20)])
    records = bytes(got[("t", 0)].records)
    assert records and records == everything[:len(records)]
    _, got = await fetch(h, [("t", 0, tail, 1 << 20)])
    assert got[("t", 0)].records
    assert seen == [(0, False), (tail, True)]


async def test_reads_of_what_was_on_disk_at_load_run_off_the_loop(tmp_path):
    # After a restart the active segment's bytes come from disk, not from this process's writes:
    # a read below the loaded log end goes to a worker thread; one above it stays on the loop.
    import threading
    from admin_harness import Harness
    first = Harness(tmp_path)
    first.create("t", 1)
    append(first, "t", 0, 5, size=50)
    first.close()
    h2 = Harness(tmp_path)
    try:
        plog = h2.lm.get_log(TopicPartition("t", 0))
        assert len(plog.segments) == 1 and plog.loaded_end_offset == 5
        append(h2, "t", 0, 5, size=50)
        loop_thread = threading.get_ident()
        seen = []
        real_read = plog.read

        def read(offset, *args, **kw):
            seen.append((offset, threading.get_ident() == loop_thread))
            return real_read(offset, *args, **kw)

        plog.read = read
        for offset in (0, 5):
            _, got = await fetch(h2, [("t", 0, offset, 1 << 20)])
            assert got[("t", 0)].records
        assert seen == [(0, False), (5, True)]
    finally:
        h2.close()


def _thread_in_log_read() -> bool:
    """Whether some other thread is inside Log.read (here: blocked on the log's lock)."""
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        while ident != me and frame is not None:
            if frame.f_code.co_name == "read" and frame.f_code.co_filename.endswith(os.path.join("storage", "log.py")):
                return True
            frame = frame.f_back
    return False


async def test_an_append_during_a_threaded_read_is_not_slept_through(h):
    """A cold read runs the pass in a worker thread; an append landing on a partition the pass has
    already read must not leave the fetch parked until max_wait (Kafka's DelayedFetch re-checks)."""
    h.create("t", 2)
    h.broker.fetch_waiters.bind(asyncio.get_running_loop())
    h.lm.append_listener = h.broker.fetch_waiters.notify
    append(h, "t", 0, 1)
    cold = h.lm.get_log(TopicPartition("t", 0))
    cold.roll()                                          # offset 0 below the active segment: a cold read
    one = len(stored(h, "t", 0))
    with cold.lock:                                      # the worker's Log.read of t-0 waits here
        # t-1 first: read (nothing yet) before the pass reaches t-0
        task = asyncio.create_task(fetch(h, [("t", 1, 0, 1 << 20), ("t", 0, 0, 1 << 20)],
                                         max_wait=120_000, min_bytes=one + 1))
        def reading():
            assert not task.done()
            return _thread_in_log_read()
        await until(reading, "the worker's read of t-0 to wait for the log's lock")
        append(h, "t", 1, 1, sync=False)                 # lands during the pass, after t-1 was read
    _, out = await asyncio.wait_for(task, 30)            # far below max_wait: the append is noticed
    assert out[("t", 0)].records == stored(h, "t", 0) and len(out[("t", 0)].records) == one
    assert out[("t", 1)].records == stored(h, "t", 1) != b""
    assert h.broker.fetch_waiters.waiting == 0


async def test_a_parked_fetch_answers_at_once_when_its_topic_is_deleted(h):
    h.create("t", 1)
    h.create("u", 1)
    h.broker.fetch_waiters.bind(asyncio.get_running_loop())
    h.lm.append_listener = h.broker.fetch_waiters.notify
    task = asyncio.create_task(fetch(h, [("t", 0, 0, 1000), ("u", 0, 0, 1000)], max_wait=120_000, min_bytes=1))
    await until(lambda: h.broker.fetch_waiters.waiting, "the fetch to park")
    h.lm.delete_topic("t")
    _, out = await asyncio.wait_for(task, 30)            # far below max_wait
    assert out[("t", 0)].error_code == 3 and out[("u", 0)].error_code == 0
    assert h.broker.fetch_waiters.waiting == 0
