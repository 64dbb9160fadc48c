"""The records a consumer group writes, built from the model (Kafka's GroupCoordinatorRecordHelpers).

Role: one small constructor per record (and its tombstone), returning group.Record values whose
`value` dicts have exactly the shape consumer_group_records.decode_value produces, so a record
is applied the same way whether it was just built or read back from the log; `encode()` turns a
Record into the (key, value) bytes appended to `__consumer_offsets`.

Kafka's orders, kept here: a leaving member writes its current assignment, target assignment and
subscription tombstones in that order (`member_removal`); a deleted group writes every member's
current-assignment, then target-assignment tombstones, the target-assignment epoch tombstone,
the subscription tombstones, the regex tombstones, the partition-metadata tombstone and last the
group epoch tombstone (`group_removal`).
"""
from __future__ import annotations

from kompakt.broker.groups.consumer.group import ConsumerGroup, Record
from kompakt.broker.groups.consumer.member import ConsumerGroupMember, Partitions
from kompakt.protocol import consumer_group_records as cgr


def encode(rec: Record) -> tuple[bytes, bytes | None]:
    v = rec.value
    if v is None:
        return rec.key_bytes(), None
    t = rec.type
    if t == cgr.GROUP_METADATA:
        value = cgr.encode_group_metadata_value(v["epoch"])
    elif t == cgr.PARTITION_METADATA:
        value = cgr.encode_partition_metadata_value(
            [(x["topic_id"], x["topic_name"], x["num_partitions"]) for x in v["topics"]])
    elif t == cgr.MEMBER_METADATA:
        value = cgr.encode_member_metadata_value(**{k: v[k] for k in (
            "instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
            "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor",
            "classic_member_metadata")})
    elif t == cgr.TARGET_ASSIGNMENT_METADATA:
        value = cgr.encode_target_assignment_metadata_value(v["assignment_epoch"])
    elif t == cgr.TARGET_ASSIGNMENT_MEMBER:
        value = cgr.encode_target_assignment_member_value(v["partitions"])
    elif t == cgr.CURRENT_MEMBER_ASSIGNMENT:
        value = cgr.encode_current_assignment_value(
            member_epoch=v["member_epoch"], previous_member_epoch=v["previous_member_epoch"],
            state=v["state"], assigned=v["assigned"], pending_revocation=v["pending_revocation"])
    elif t == cgr.REGULAR_EXPRESSION:
        value = cgr.encode_regex_value(v["topics"], v["regex_version"], v["timestamp"])
    else:
        raise ValueError(f"unknown consumer group record type {t}")
    return rec.key_bytes(), value


def _lists(partitions: Partitions) -> dict:
    return {t: sorted(p) for t, p in partitions.items() if p}


def group_epoch(group_id: str, epoch: int) -> Record:
    return Record(cgr.GROUP_METADATA, group_id, None, {"version": 0, "epoch": epoch})


def subscription_metadata(group_id: str, metadata: dict) -> Record:
    return Record(cgr.PARTITION_METADATA, group_id, None, {"version": 0, "topics": [
        {"topic_id": tid, "topic_name": name, "num_partitions": n}
        for name, (tid, n) in sorted(metadata.items())]})


def member_subscription(group_id: str, m: ConsumerGroupMember) -> Record:
    return Record(cgr.MEMBER_METADATA, group_id, m.member_id, {
        "version": 0, "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
        "client_host": m.client_host, "subscribed_topic_names": sorted(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "rebalance_timeout_ms": m.rebalance_timeout_ms, "server_assignor": m.server_assignor,
        "classic_member_metadata": None if m.classic is None else {
            "session_timeout_ms": m.classic.session_timeout_ms,
            "supported_protocols": list(m.classic.protocols)}})


def target_assignment(group_id: str, member_id: str, partitions: Partitions) -> Record:
    return Record(cgr.TARGET_ASSIGNMENT_MEMBER, group_id, member_id,
                  {"version": 0, "partitions": _lists(partitions)})


def target_assignment_epoch(group_id: str, epoch: int) -> Record:
    return Record(cgr.TARGET_ASSIGNMENT_METADATA, group_id, None,
                  {"version": 0, "assignment_epoch": epoch})


def current_assignment(group_id: str, m: ConsumerGroupMember) -> Record:
    return Record(cgr.CURRENT_MEMBER_ASSIGNMENT, group_id, m.member_id, {
        "version": 0, "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
        "state": int(m.state), "assigned": _lists(m.assigned),
        "pending_revocation": _lists(m.pending_revocation)})


def resolved_regex(group_id: str, regex: str, topics, version: int, timestamp: int) -> Record:
    return Record(cgr.REGULAR_EXPRESSION, group_id, regex, {
        "version": 0, "topics": sorted(topics), "regex_version": version, "timestamp": timestamp})


def regex_tombstone(group_id: str, regex: str) -> Record:
    return tombstone(cgr.REGULAR_EXPRESSION, group_id, regex)


def tombstone(record_type: int, group_id: str, second: str | None = None) -> Record:
    return Record(record_type, group_id, second, None)


def member_removal(group_id: str, member_id: str) -> list[Record]:
    return [tombstone(cgr.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id),
            tombstone(cgr.TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
            tombstone(cgr.MEMBER_METADATA, group_id, member_id)]


def group_removal(group: ConsumerGroup, renamed: dict[str, str] | None = None) -> list[Record]:
    """`renamed`: old member id -> new one, for a static member replaced in the same batch (its
    records were already tombstoned under the old id; Kafka's
    createGroupTombstoneRecordsWithReplacedMember)."""
    gid = group.group_id
    ids = [(renamed or {}).get(m, m) for m in group.members]
    out = [tombstone(cgr.CURRENT_MEMBER_ASSIGNMENT, gid, m) for m in ids]
    out += [tombstone(cgr.TARGET_ASSIGNMENT_MEMBER, gid, m) for m in ids]
    out.append(tombstone(cgr.TARGET_ASSIGNMENT_METADATA, gid))
    out += [tombstone(cgr.MEMBER_METADATA, gid, m) for m in ids]
    out += [tombstone(cgr.REGULAR_EXPRESSION, gid, r) for r in group.resolved_regexes]
    out.append(tombstone(cgr.PARTITION_METADATA, gid))
    out.append(tombstone(cgr.GROUP_METADATA, gid))
    return out
