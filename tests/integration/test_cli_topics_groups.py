"""`kompakt topic` and `kompakt group` against a real broker process, checked by other clients.

What each command did is read back through confluent-kafka (AdminClient, Consumer), never through
the CLI alone: a topic created with `cleanup.policy=compact` has that config, a reset moves where
a new member of the group starts reading. Groups are real: confluent-kafka consumers with the
classic protocol and with KIP-848's (`group.protocol=consumer`). Bad input gets Kafka's error
name on one stderr line, a non-zero exit status, no traceback, and changes nothing.
Most runs call `kompakt.cli.main` in this process (the broker is another process, over TCP); a
few run the installed entry point as a user would (`python -m kompakt`).
"""
from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import TopicPartition

from kompakt.cli import main
from kompakt.testing.ports import closed_port

WAIT_S = 30.0


def kompakt(broker, *args: str) -> tuple[int, str, str]:
    """`kompakt ARGS --bootstrap <broker>` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--bootstrap", broker.bootstrap])
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def kompakt_json(broker, *args: str):
    code, out, err = kompakt(broker, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def run_installed(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-m", "kompakt", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def admin(broker):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def topic_configs(broker, topic: str) -> dict[str, str]:
    """The topic's overrides as confluent-kafka's AdminClient reads them."""
    from confluent_kafka.admin import ConfigResource, ConfigSource
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    client = admin(broker)   # kept alive until the answer is in (a collected client aborts its requests)
    entries = client.describe_configs([resource])[resource].result(WAIT_S)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def produce(broker, topic: str, per_partition: dict[int, int], timestamp_ms: int | None = None) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, n in per_partition.items():
        for i in range(n):
            p.produce(topic, key=f"k{i}".encode(), value=b"v", partition=partition,
                      **({"timestamp": timestamp_ms + i} if timestamp_ms is not None else {}))
    assert p.flush(WAIT_S) == 0


def consumer(broker, group: str, topic: str, protocol: str = "classic", client_id: str = "cli-test",
             early: list | None = None):
    """A member of `group` that has been assigned partitions of `topic` (it polls until so; what
    those polls returned goes to `early`)."""
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": client_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = 6000
    c = Consumer(conf)
    c.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while not c.assignment():
        assert time.monotonic() < deadline, f"{group}: no assignment within {WAIT_S}s"
        m = c.poll(0.1)
        if m is not None and not m.error() and early is not None:
            early.append(m)
    return c


def consume(c, n: int) -> list:
    got, deadline = [], time.monotonic() + WAIT_S
    while len(got) < n:
        assert time.monotonic() < deadline, f"consumed {len(got)} of {n}"
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m)
    return got


def committed(broker, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of `topic`'s partitions 0 and 1, read without joining it."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                                               timeout=WAIT_S)}
    finally:
        c.close()


def first_offsets(broker, group: str, topic: str) -> dict[int, int]:
    """Where a new member of `group` starts reading each partition of `topic` (every one has records)."""
    early: list = []
    c = consumer(broker, group, topic, client_id="probe", early=early)
    try:
        got, deadline = {}, time.monotonic() + WAIT_S
        for m in early:
            got.setdefault(m.partition(), m.offset())
        while len(got) < len(c.assignment()):
            assert time.monotonic() < deadline, f"read only partitions {sorted(got)}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.setdefault(m.partition(), m.offset())
        return got
    finally:
        c.close()


# -- topics ------------------------------------------------------------------------------------

def test_topic_create_describe_alter_delete(module_broker):
    done = run_installed("topic", "create", "prices", "--partitions", "3", "--config", "cleanup.policy=compact",
                         "--bootstrap", module_broker.bootstrap)
    assert (done.returncode, done.stdout, done.stderr) == (0, "Created topic prices.\n", "")
    assert topic_configs(module_broker, "prices") == {"cleanup.policy": "compact"}
    produce(module_broker, "prices", {0: 4, 2: 1})

    [t] = kompakt_json(module_broker, "topic", "describe", "prices")
    meta = admin(module_broker).list_topics("prices", timeout=WAIT_S).topics["prices"]
    assert t["topic"] == "prices" and t["partition_count"] == 3 and t["replication_factor"] == 1
    assert [(p["partition"], p["leader"], p["log_start_offset"], p["log_end_offset"]) for p in t["partitions"]] == [
        (i, meta.partitions[i].leader, 0, n) for i, n in ((0, 4), (1, 0), (2, 1))]
    assert {c["name"]: (c["value"], c["source"]) for c in t["configs"]} == {
        "cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG")}

    code, out, err = kompakt(module_broker, "topic", "describe", "prices")
    assert code == 0 and "PartitionCount: 3" in out and "cleanup.policy  compact  DYNAMIC_TOPIC_CONFIG" in out

    code, out, err = kompakt(module_broker, "topic", "alter", "prices", "--config", "min.cleanable.dirty.ratio=0.1",
                             "--config", "segment.ms=3600000", "--partitions", "5")
    assert code == 0, err
    assert topic_configs(module_broker, "prices") == {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
                                                "segment.ms": "3600000"}
    assert len(admin(module_broker).list_topics("prices", timeout=WAIT_S).topics["prices"].partitions) == 5
    assert kompakt(module_broker, "topic", "alter", "prices", "--delete-config", "segment.ms")[0] == 0
    assert topic_configs(module_broker, "prices") == {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}

    listed = {r["topic"]: r for r in kompakt_json(module_broker, "topic", "list")}
    assert listed["prices"] == {"topic": "prices", "partitions": 5, "replication_factor": 1, "internal": False,
                                "cleanup_policy": "compact"}
    code, out, _ = kompakt(module_broker, "topic", "list")
    assert any(line.split() == ["prices", "5", "1", "compact"] for line in out.splitlines())

    assert kompakt(module_broker, "topic", "delete", "prices") == (0, "Deleted topic prices.\n", "")
    assert "prices" not in admin(module_broker).list_topics(timeout=WAIT_S).topics


@pytest.mark.parametrize("args, error", [
    (("topic", "create", "kept", "--partitions", "2"), "TOPIC_ALREADY_EXISTS"),
    (("topic", "create", "other", "--config", "cleanup.policy=sometimes"), "INVALID_CONFIG"),
    (("topic", "create", "other", "--config", "no.such.config=1"), "INVALID_CONFIG"),
    (("topic", "create", "bad/name"), "INVALID_TOPIC_EXCEPTION"),
    (("topic", "describe", "missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topic", "alter", "kept", "--config", "min.cleanable.dirty.ratio=2"), "INVALID_CONFIG"),
    (("topic", "alter", "kept", "--partitions", "1"), "INVALID_PARTITIONS"),
    (("topic", "alter", "missing", "--partitions", "4"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topic", "delete", "missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
    (("group", "describe", "no-such-group"), "GROUP_ID_NOT_FOUND"),
    (("group", "delete", "no-such-group"), "GROUP_ID_NOT_FOUND"),
])
def test_bad_input_is_refused_with_kafkas_error_and_changes_nothing(module_broker, args, error):
    if "kept" not in admin(module_broker).list_topics(timeout=WAIT_S).topics:
        assert kompakt(module_broker, "topic", "create", "kept", "--partitions", "3",
                       "--config", "cleanup.policy=compact")[0] == 0
    code, out, err = kompakt(module_broker, *args)
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and f": {error}: " in err, err
    assert "other" not in admin(module_broker).list_topics(timeout=WAIT_S).topics
    assert len(admin(module_broker).list_topics("kept", timeout=WAIT_S).topics["kept"].partitions) == 3
    assert topic_configs(module_broker, "kept") == {"cleanup.policy": "compact"}


def test_bad_arguments_and_an_unreachable_broker_exit_2_in_one_line(module_broker):
    code, _, err = kompakt(module_broker, "topic", "create", "x", "--config", "cleanup.policy")
    assert code == 2 and "expected key=value" in err
    with closed_port() as nobody:
        done = run_installed("topic", "list", "--bootstrap", f"127.0.0.1:{nobody}")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "cannot reach a Kafka broker at 127.0.0.1:" in done.stderr, done.stderr


# -- groups ------------------------------------------------------------------------------------

def test_group_describe_both_protocols_with_lag(module_broker):
    assert kompakt(module_broker, "topic", "create", "orders", "--partitions", "2")[0] == 0
    produce(module_broker, "orders", {0: 6, 1: 3})
    early: dict[str, list] = {"classic": [], "modern": []}
    classic = consumer(module_broker, "classic-g", "orders", client_id="classic-client", early=early["classic"])
    modern = consumer(module_broker, "modern-g", "orders", protocol="consumer", client_id="modern-client",
                      early=early["modern"])
    try:
        for c, kind in ((classic, "classic"), (modern, "modern")):
            consume(c, max(0, 4 - len(early[kind])))
            c.commit(asynchronous=False)
        listed = {g["group"]: g for g in kompakt_json(module_broker, "group", "list")}
        assert (listed["classic-g"]["type"], listed["classic-g"]["state"]) == ("classic", "Stable")
        assert (listed["modern-g"]["type"], listed["modern-g"]["state"]) == ("consumer", "Stable")

        for c, group, kind, protocol in ((classic, "classic-g", "classic", "range"),
                                         (modern, "modern-g", "consumer", "uniform")):
            [d] = kompakt_json(module_broker, "group", "describe", group)
            assert (d["type"], d["state"], d["protocol"]) == (kind, "Stable", protocol)
            [m] = d["members"]
            assert m["client_id"] == f"{kind.replace('consumer', 'modern')}-client"
            assert m["assignment"] == {"orders": [0, 1]}
            commits = {tp.partition: tp.offset for tp in c.committed(c.assignment(), timeout=WAIT_S)}
            rows = {o["partition"]: o for o in d["offsets"]}
            for p, end in ((0, 6), (1, 3)):
                assert c.get_watermark_offsets(TopicPartition("orders", p), timeout=WAIT_S)[1] == end
                current = commits[p] if commits[p] >= 0 else None
                assert (rows[p]["current_offset"], rows[p]["log_end_offset"]) == (current, end)
                assert rows[p]["lag"] == (None if current is None else end - current)
                assert rows[p]["member_id"] == m["member_id"]
        code, out, _ = kompakt(module_broker, "group", "describe", "classic-g")
        assert code == 0 and "State: Stable" in out and "LAG" in out and "classic-client" in out
    finally:
        classic.close()
        modern.close()
    # once their members have left, both kinds of group take an admin reset (OffsetCommit with
    # generation / member epoch -1 and no member), as Kafka accepts for an empty group
    for group, kind in (("classic-g", "classic"), ("modern-g", "consumer")):
        deadline = time.monotonic() + WAIT_S
        while (d := kompakt_json(module_broker, "group", "describe", group)[0])["state"] != "Empty":
            assert time.monotonic() < deadline, f"{group} is still {d['state']}"
            time.sleep(0.1)
        assert d["type"] == kind
        code, _, err = kompakt(module_broker, "group", "reset-offsets", group, "--topic", "orders:1",
                               "--to-offset", "2", "--execute")
        assert code == 0, err
        assert committed(module_broker, group, "orders")[1] == 2


def test_group_delete_refuses_a_group_with_members(module_broker):
    assert kompakt(module_broker, "topic", "create", "deletes", "--partitions", "1")[0] == 0
    produce(module_broker, "deletes", {0: 2})
    early: list = []
    c = consumer(module_broker, "busy-g", "deletes", early=early)
    try:
        consume(c, 2 - len(early))
        c.commit(asynchronous=False)
        code, out, err = kompakt(module_broker, "group", "delete", "busy-g")
        assert code == 1 and ": NON_EMPTY_GROUP: " in err
    finally:
        c.close()
    # deleting the topic deletes the group's offsets of it, as on Kafka; the group stays, Empty
    assert kompakt(module_broker, "topic", "delete", "deletes")[0] == 0
    [d] = kompakt_json(module_broker, "group", "describe", "busy-g")
    assert (d["state"], d["offsets"]) == ("Empty", [])
    assert kompakt(module_broker, "group", "delete", "busy-g") == (0, "Deleted group busy-g.\n", "")
    code, _, err = kompakt(module_broker, "group", "describe", "busy-g")
    assert code == 1 and "GROUP_ID_NOT_FOUND: Consumer group 'busy-g' does not exist." in err


def test_group_reset_offsets_dry_run_execute_and_active_group(module_broker):
    base_ms = 1_700_000_000_000
    assert kompakt(module_broker, "topic", "create", "resets", "--partitions", "2")[0] == 0
    produce(module_broker, "resets", {0: 10, 1: 10}, timestamp_ms=base_ms)   # offset i has timestamp base + i
    early: list = []
    c = consumer(module_broker, "reset-g", "resets", early=early)
    try:
        consume(c, 20 - len(early))
        c.commit(asynchronous=False)
        code, _, err = kompakt(module_broker, "group", "reset-offsets", "reset-g", "--topic", "resets", "--to-earliest")
        assert code == 1 and "inactive, but the current state is Stable" in err
    finally:
        c.close()

    result = kompakt_json(module_broker, "group", "reset-offsets", "reset-g", "--topic", "resets", "--to-earliest")
    assert not result["executed"] and [r["new_offset"] for r in result["offsets"]] == [0, 0]
    assert committed(module_broker, "reset-g", "resets") == {0: 10, 1: 10}      # a dry run commits nothing

    when = datetime.datetime.fromtimestamp((base_ms + 7) / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")
    cases = [(("--topic", "resets:1", "--to-datetime", when), {0: 10, 1: 7}, ""),
             (("--topic", "resets", "--to-offset", "3"), {0: 3, 1: 3}, ""),
             (("--all-topics", "--shift-by", "-2"), {0: 1, 1: 1}, ""),
             (("--topic", "resets:0", "--to-offset", "99"), {0: 10, 1: 1},
              "New offset (99) is higher than latest offset for topic partition resets-0. Value will be set to 10"),
             (("--topic", "resets", "--to-earliest"), {0: 0, 1: 0}, "")]
    for args, expected, note in cases:
        code, out, err = kompakt(module_broker, "group", "reset-offsets", "reset-g", *args, "--execute")
        assert code == 0, err
        assert [line for line in err.splitlines() if "New offset" in line] == ([f"kompakt group: {note}"] if note else [])
        assert committed(module_broker, "reset-g", "resets") == expected, (args, out, err)
    assert first_offsets(module_broker, "reset-g", "resets") == {0: 0, 1: 0}    # where a new member starts

    code, _, err = kompakt(module_broker, "group", "reset-offsets", "reset-g", "--topic", "resets", "--to-datetime", "soon")
    assert code == 2 and "bad --to-datetime" in err


def test_describe_shows_an_offline_partition_without_offsets(start_broker, tmp_path, monkeypatch):
    """A partition whose log dir failed has no leader (Metadata: LEADER_NOT_AVAILABLE, leader -1):
    describe shows it with no offsets instead of failing, and the other partitions in full."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    monkeypatch.setenv("TEST_KOMPAKT_IO_ERROR", os.path.join("offl-1", "0000"))   # storage/faults.py
    b = start_broker(config={"log.dirs": f"{tmp_path / 'd1'},{tmp_path / 'd2'}", "offsets.topic.num.partitions": "1"})
    assert kompakt(b, "topic", "create", "offl", "--partitions", "2")[0] == 0
    p = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 2000, "retries": 0})
    p.produce("offl", b"x", partition=1)      # its first write fails with EIO: the dir goes offline
    p.flush(10)
    admin_client = AdminClient({"bootstrap.servers": b.bootstrap})
    deadline = time.monotonic() + WAIT_S
    while admin_client.list_topics("offl", timeout=10).topics["offl"].partitions[1].leader != -1:
        assert time.monotonic() < deadline, "offl-1 never went offline"
        time.sleep(0.1)
    [t] = kompakt_json(b, "topic", "describe", "offl")
    rows = {r["partition"]: r for r in t["partitions"]}
    assert (rows[1]["leader"], rows[1]["isr"], rows[1]["log_start_offset"], rows[1]["log_end_offset"]) == \
        (-1, [], None, None)
    code, out, _ = kompakt(b, "topic", "describe", "offl")
    assert code == 0 and any(line.split()[:2] == ["1", "-1"] for line in out.splitlines())
