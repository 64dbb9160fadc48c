"""A consumer-group member as a separate process, for the group integration tests.

    python groups_consumer.py CLIENT BOOTSTRAP GROUP TOPIC [--instance-id ID] [--session-ms N]
                              [--protocol classic|consumer]

CLIENT is kafka-python, confluent or aiokafka. The process subscribes TOPIC in GROUP with manual
commits (auto.offset.reset=earliest) and writes JSON lines to stdout, each with "t" (time.time()):

    {"event": "assigned", "partitions": [0, 3]}     (after each rebalance: the full assignment)
    {"event": "revoked", "partitions": [0, 3]}
    {"event": "committing", "records": [...]}   the batch about to be committed (a member
                                                 killed before the answer leaves it in doubt)
    {"event": "records", "records": [[partition, offset, "value"], ...]}   only after the commit
                                                                           of those records
    {"event": "commit_failed" | "poll_failed", "error": "..."}   (the consumer carries on)
    {"event": "closed"}

Records whose commit fails are not reported: the partition's next owner (a rebalance started)
or the member itself (it kept the partition: the confluent runner seeks back) reads them again
from the committed offset, so the reported records are exactly the committed ones.
A line "close" on stdin closes the consumer gracefully (LeaveGroup unless static) and exits; the
tests SIGKILL the process to simulate a crash (no LeaveGroup: the session timeout must expire).
With --wait-for-go the process loads its client, emits {"event": "ready"} and subscribes only
after a line "go" (so a test can take a member's place without a process start in between).
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
import threading
import time

HEARTBEAT_MS = 250
POLL_S = 0.1
# kafka-python 3.0.12 drops a JoinGroup/SyncGroup round trip that completes after poll()'s timer
# ran out if, by the next poll(), its consumer no longer asks to rejoin (the leader's metadata
# snapshot caught up): the member never re-enables heartbeats, never applies its assignment and is
# expired at its session timeout; when it still asks to rejoin it sends a fresh JoinGroup instead,
# a needless rebalance. A short poll() hits that window under load (a join started with the
# poll's last milliseconds), so kafka-python members poll for a second: records still return at
# once, and a join almost always completes inside one poll() call.
KAFKA_PYTHON_POLL_MS = 1000


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def watch_stdin(stop: threading.Event) -> None:
    def run():
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()
    threading.Thread(target=run, daemon=True).start()


def run_kafka_python(args, stop: threading.Event) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    from kafka.consumer.subscription_state import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    extra = {"group_instance_id": args.instance_id} if args.instance_id else {}
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                             client_id=f"kp-{args.instance_id or 'dyn'}",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=args.session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
                             max_poll_interval_ms=args.rebalance_ms, **extra)
    consumer.subscribe([args.topic], listener=Listener())
    while not stop.is_set():
        try:
            batches = consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
        except KafkaError as exc:   # e.g. KafkaConnectionError while the broker restarts
            emit("poll_failed", error=repr(exc))
            time.sleep(POLL_S)
            continue
        records = [[r.partition, r.offset, r.value.decode()] for rs in batches.values() for r in rs]
        if records:
            emit("committing", records=records)
            try:
                consumer.commit()
            except KafkaError as exc:   # e.g. CommitFailedError during a rebalance
                emit("commit_failed", error=repr(exc))
                continue
            emit("records", records=records)
    consumer.close()
    emit("closed")


def run_confluent(args, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
            "client.id": f"ck-{args.instance_id or 'dyn'}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": args.session_ms, "heartbeat.interval.ms": HEARTBEAT_MS,
            "max.poll.interval.ms": args.rebalance_ms, "topic.metadata.refresh.interval.ms": 1000}
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.protocol == "consumer":
        # KIP-848: the broker assigns and partitions come and go one by one; each assignment
        # event carries the full assignment after the change.
        for key in ("session.timeout.ms", "heartbeat.interval.ms"):
            conf.pop(key)          # the broker's group.consumer.* settings rule these
        conf["group.protocol"] = "consumer"

        def on_assign(c, ps):
            c.incremental_assign(ps)
            emit("assigned", partitions=sorted(p.partition for p in c.assignment()))

        def on_revoke(c, ps):
            c.incremental_unassign(ps)
            emit("revoked", partitions=sorted(p.partition for p in ps))
    else:
        def on_assign(c, ps):
            emit("assigned", partitions=sorted(p.partition for p in ps))

        def on_revoke(c, ps):
            emit("revoked", partitions=sorted(p.partition for p in ps))
    consumer = Consumer(conf)
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stop.is_set():
        msgs = consumer.consume(num_messages=1000, timeout=POLL_S)
        # Commit (explicit offsets) and report only the partitions still assigned after the
        # batch: records of a partition revoked meanwhile are neither, its next owner reads them
        # again from the last commit - so the reported records are exactly the committed ones
        # whatever the interleaving of fetches and (incremental) revocations.
        owned = {p.partition for p in consumer.assignment()}
        records = [[m.partition(), m.offset(), m.value().decode()] for m in msgs
                   if m.error() is None and m.partition() in owned]
        if not records:
            continue
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for partition, offset, _ in records:
            first[partition] = min(offset, first.get(partition, offset))
            last[partition] = max(offset, last.get(partition, -1))
        emit("committing", records=records)
        try:
            consumer.commit(offsets=[TopicPartition(args.topic, p, o + 1) for p, o in last.items()],
                            asynchronous=False)
        except KafkaException as exc:
            emit("commit_failed", error=repr(exc))
            # The member may keep the partitions (KIP-848: STALE_MEMBER_EPOCH, its epoch moved
            # while the commit was on its way): it reads them again from the committed offset -
            # the first of this batch - so no record goes past uncommitted and unreported.
            for partition, offset in first.items():
                try:
                    consumer.seek(TopicPartition(args.topic, partition, offset))
                except KafkaException:
                    pass            # no longer assigned: its next owner starts there anyway
            continue
        emit("records", records=records)
    consumer.close()
    emit("closed")


def run_aiokafka(args, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.errors import IllegalStateError, KafkaError

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned):
            emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    async def main():
        extra = {"group_instance_id": args.instance_id} if args.instance_id else {}
        consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                                    client_id=f"ak-{args.instance_id or 'dyn'}",
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    session_timeout_ms=args.session_ms,
                                    heartbeat_interval_ms=HEARTBEAT_MS,
                                    max_poll_interval_ms=args.rebalance_ms,
                                    rebalance_timeout_ms=args.rebalance_ms, **extra)
        consumer.subscribe([args.topic], listener=Listener())
        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
                records = [[r.partition, r.offset, r.value.decode()] for rs in batches.values() for r in rs]
                if records:
                    emit("committing", records=records)
                    try:
                        await consumer.commit()
                    except (KafkaError, IllegalStateError) as exc:
                        emit("commit_failed", error=repr(exc))
                        continue
                    emit("records", records=records)
        finally:
            await consumer.stop()
        emit("closed")

    asyncio.run(main())


RUNNERS = {"kafka-python": run_kafka_python, "confluent": run_confluent, "aiokafka": run_aiokafka}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("client", choices=sorted(RUNNERS))
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--instance-id")
    p.add_argument("--session-ms", type=int, default=2000)
    p.add_argument("--rebalance-ms", type=int, default=6000)
    p.add_argument("--protocol", choices=["classic", "consumer"], default="classic",
                   help="group.protocol (confluent only): consumer = KIP-848")
    p.add_argument("--wait-for-go", action="store_true",
                   help="load the client, say {\"event\": \"ready\"}, and join only after a line "
                        "\"go\" on stdin (a restart that must beat a short session timeout)")
    args = p.parse_args()
    args.rebalance_ms = max(args.rebalance_ms, args.session_ms)   # librdkafka insists
    # Client warnings (and everything with GROUPS_CONSUMER_DEBUG=1) go to the member's stderr log.
    logging.basicConfig(level=logging.DEBUG if os.environ.get("GROUPS_CONSUMER_DEBUG") else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s")
    if os.environ.get("GROUPS_CONSUMER_DEBUG"):
        import faulthandler
        faulthandler.dump_traceback_later(3, repeat=True)   # where each thread is, every 3 s
    stop = threading.Event()
    if args.wait_for_go:
        importlib.import_module({"confluent": "confluent_kafka", "kafka-python": "kafka",
                                 "aiokafka": "aiokafka"}[args.client])
        emit("ready")
        for line in sys.stdin:
            if line.strip() == "go":
                break
    watch_stdin(stop)
    RUNNERS[args.client](args, stop)


if __name__ == "__main__":
    main()
