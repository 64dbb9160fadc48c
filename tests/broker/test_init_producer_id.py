"""InitProducerId (key 22): golden bytes (v4), epoch bumps; transactional ids: tests/broker/test_txn_coordinator.py."""
from kafka.protocol.producer.transaction import InitProducerIdRequest

from admin_harness import Harness, cs, framed, h, s16


async def init(h, version=4, **fields):
    values = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
              "producer_epoch": -1, **fields}
    r = await h.call(InitProducerIdRequest(**values), version)
    return r.error_code, r.producer_id, r.producer_epoch


async def test_golden_v4_first_id(h):
    request = (
        bytes.fromhex("0016 0004 0000000d") + s16("test") + b"\x00"   # header v2: InitProducerId v4, corr 13
        + cs(None)                                 # transactional_id null (idempotent producer)
        + bytes.fromhex("0000ea60")                # transaction_timeout_ms 60000
        + bytes.fromhex("ffffffffffffffff")        # producer_id -1
        + bytes.fromhex("ffff")                    # producer_epoch -1
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("0000000d") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + bytes.fromhex("0000")                    # error_code NONE
        + bytes.fromhex("0000000000000000")        # producer_id 0
        + bytes.fromhex("0000")                    # producer_epoch 0
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected


async def test_ids_bump_and_errors(h):
    assert await init(h, version=0) == (0, 0, 0)
    assert await init(h) == (0, 1, 0)
    assert await init(h, producer_id=1, producer_epoch=0) == (0, 1, 1)
    assert await init(h, producer_id=1, producer_epoch=-1) == (42, -1, -1)
    assert await init(h, transactional_id="tx") == (15, -1, -1)   # COORDINATOR_NOT_AVAILABLE: not started
    assert await init(h, producer_id=999_999, producer_epoch=2) == (0, 2, 0)


async def test_restart_continues_above_reserved_block(tmp_path):
    h = Harness(tmp_path)
    try:
        assert await init(h) == (0, 0, 0)
    finally:
        h.close()
    h = Harness(tmp_path)
    try:
        assert await init(h) == (0, 1000, 0)
    finally:
        h.close()


async def test_unreadable_block_file_is_retriable_and_logged(tmp_path, caplog):
    h = Harness(tmp_path)
    try:
        with open(f"{h.broker.config.log_dirs[0]}/producer-id-block", "w") as fh:
            fh.write("garbage")
        assert await init(h) == (14, -1, -1)      # COORDINATOR_LOAD_IN_PROGRESS: the client retries
        assert "producer-id-block is corrupt" in caplog.text
    finally:
        h.close()


async def test_ids_found_in_partitions_are_not_reissued(tmp_path):
    """A log dir whose block file is gone (or one adopted from Kafka) still holds producer ids."""
    from kompakt.protocol.records import build_batch
    from kompakt.storage import TopicPartition
    h = Harness(tmp_path)
    try:
        h.create("t")
        log = h.lm.get_log(TopicPartition("t", 0))
        log.append_as_leader(bytearray(build_batch([(b"k", b"v")], producer_id=5000, producer_epoch=0,
                                                   base_sequence=0)))
    finally:
        h.close()
    h = Harness(tmp_path)
    try:
        assert await init(h) == (0, 5001, 0)
    finally:
        h.close()
