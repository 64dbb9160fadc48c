"""The broker starts the group coordinator with `background=True`: __consumer_offsets loads in a
worker thread and slices on the loop while every group API answers COORDINATOR_LOAD_IN_PROGRESS
(Kafka's scheduleLoadGroupAndOffsets); then the loaded state serves. A topic deleted meanwhile has
its offsets tombstoned once the load is done."""
from __future__ import annotations

import types

from test_coordinator import Clock, join_alone, join_req, make_config, started

from kompakt.broker.groups.coordinator import GroupCoordinator
from kompakt.protocol.errors import ErrorCode as EC
from kompakt.protocol.errors import KafkaError
from kompakt.storage.log_manager import LogManager


async def test_group_apis_answer_load_in_progress_until_the_offsets_are_loaded(tmp_path):
    config = make_config(tmp_path)
    clock = Clock()
    lm = LogManager(config)
    lm.startup()
    lm.create_topic("t", 2, {})
    lm.create_topic("doomed", 1, {})
    broker = types.SimpleNamespace(config=config, log_manager=lm)
    c = await started(broker, clock)
    a = await join_alone(c, instance="i-1")
    await c.sync_group("g", 1, a.member_id, "i-1", None, None, [(a.member_id, b"ASG")])
    c.commit_offsets("g", 1, a.member_id, "i-1", -1, [("t", 0, 11, 4, "meta", -1), ("doomed", 0, 5, -1, "", -1)], 8)
    await c.stop()
    try:
        c2 = GroupCoordinator(broker, time_ms=clock)
        await c2.start(background=True)           # returns before the load ran: nothing yielded yet
        assert c2.loading
        join = await c2.join_group(join_req())
        assert join.error == EC.COORDINATOR_LOAD_IN_PROGRESS
        assert (await c2.sync_group("g", 1, a.member_id, "i-1", None, None, [])).error == EC.COORDINATOR_LOAD_IN_PROGRESS
        assert c2.heartbeat("g", 1, a.member_id, "i-1") == EC.COORDINATOR_LOAD_IN_PROGRESS
        assert c2.leave_group("g", [(a.member_id, None)]) == (EC.COORDINATOR_LOAD_IN_PROGRESS,
                                                               [EC.COORDINATOR_LOAD_IN_PROGRESS])
        assert c2.delete_groups(["g"]) == {"g": EC.COORDINATOR_LOAD_IN_PROGRESS}
        assert c2.delete_offsets("g", [("t", 0)]) == (EC.COORDINATOR_LOAD_IN_PROGRESS, {})
        try:
            c2.commit_offsets("g", 1, a.member_id, "i-1", -1, [("t", 0, 12, 4, "", -1)], 8)
            raise AssertionError("a commit while loading must be refused")
        except KafkaError as exc:
            assert exc.code == EC.COORDINATOR_LOAD_IN_PROGRESS
        assert c2.on_topic_deleted("doomed") == 0 and c2.deleted_while_loading == {"doomed"}
        await c2._load_task
        assert not c2.loading
        assert c2.heartbeat("g", 1, a.member_id, "i-1") == 0
        assert c2.fetch_offsets("g", None)[("t", 0)].offset == 11
        assert ("doomed", 0) not in c2.fetch_offsets("g", None)           # tombstoned after the load
        await c2.stop()
    finally:
        lm.shutdown()
