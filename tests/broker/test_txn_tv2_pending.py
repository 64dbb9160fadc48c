"""Transaction version 2 while a transaction's markers are still being written (PrepareCommit):
what a Produce v12 of the producer's next transaction gets.

Kafka 4.0: the coordinator answers the broker's implicit add (AddPartitionsToTxn v4+ for a
Produce v12) CONCURRENT_TRANSACTIONS while the previous transaction is PrepareCommit, and the
broker passes it to a TV2 client as is (retriable there), where a TV1 verification's would become
NOT_ENOUGH_REPLICAS. Nothing is appended; once the markers are in, the same produce goes through.
The markers are held back the real way: the group coordinator reloading __consumer_offsets, one
of the transaction's partitions (as test_txn_coordinator's offsets-load test does for TV1)."""
from __future__ import annotations

import pytest
from kafka.protocol.producer.transaction import AddOffsetsToTxnRequest

from kompakt.broker.txn.state import TxnState
from kompakt.protocol import txn_records as T
from test_txn_coordinator import E_CONCURRENT, E_NONE, end, h, init, log_of, markers, produce  # noqa: F401


@pytest.mark.parametrize("h", [{"kompakt.durable.acks.enable": "false"}], indirect=True)
async def test_a_tv2_produce_while_the_previous_end_is_pending_is_concurrent_transactions(h):
    from kompakt.broker.groups.coordinator import GroupCoordinator
    _, pid, epoch = await init(h, version=5)
    r = await h.call(AddOffsetsToTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                            group_id="grp"), 3)
    assert r.error_code == E_NONE
    assert await produce(h, pid, epoch, 0, version=12) == E_NONE        # a-0 added by the produce
    group_partition = h.broker.groups.topic.partition_for("grp")
    await h.broker.groups.stop()                 # the group coordinator reloads: no offsets marker yet
    groups = h.broker.groups = GroupCoordinator(h.broker, time_ms=h.clock)
    await groups.start(background=True)
    assert groups.loading
    assert await end(h, pid, epoch, True, version=5) == E_NONE
    assert h.broker.txn.txns["tx"].state == TxnState.PREPARE_COMMIT
    b_end = log_of(h, "b").log_end_offset
    # the next transaction's first write, at the bumped epoch, to a partition not added yet
    assert await produce(h, pid, epoch + 1, 0, topic="b", version=12) == E_CONCURRENT
    assert log_of(h, "b").log_end_offset == b_end
    assert ("b", 0) not in h.broker.txn.txns["tx"].partitions
    await groups._load_task
    h.broker.txn.retry_markers()
    assert markers(h, "__consumer_offsets", group_partition) == [(pid, epoch + 1, T.COMMIT)]
    assert await produce(h, pid, epoch + 1, 0, topic="b", version=12) == E_NONE
    assert h.broker.txn.txns["tx"].partitions == {("b", 0)}
