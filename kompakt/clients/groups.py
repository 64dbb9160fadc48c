"""Consumer-group operations over the Kafka protocol, as plain data: list, describe, reset, delete.

Role: what `kompakt group` does, without the printing, as Kafka's Admin client and
kafka-consumer-groups.sh do it:
  * list: ListGroups on every broker (type and state from v5 / v4 on).
  * describe: to the group's coordinator (FindCoordinator), ConsumerGroupDescribe for a KIP-848
    group, else DescribeGroups for a classic one (Kafka answers GROUP_ID_NOT_FOUND to each for
    the other kind); members and assignments (a classic "consumer" group's assignment bytes are
    decoded with Kafka's ConsumerProtocolAssignment); committed offsets (OffsetFetch) against
    each partition's log end offset (ListOffsets latest): lag = end - committed (no end, no lag,
    for a committed partition whose topic has been deleted since).
  * reset_offsets: only while the group is inactive (Empty, or unknown: Kafka then creates it by
    committing), like kafka-consumer-groups.sh; new offsets are computed from ListOffsets, clamped
    into [log start, log end] as Kafka does (with a note), and committed with OffsetCommit
    (generation -1, no member: an admin commit) only when `execute`.
  * delete: DeleteGroups; a group with members is refused by the broker with NON_EMPTY_GROUP.

An unknown group (Dead before DescribeGroups v6, GROUP_ID_NOT_FOUND after) is GROUP_ID_NOT_FOUND
with kafka-consumer-groups.sh's wording.
"""
from __future__ import annotations

import datetime
from collections import defaultdict

from kompakt.clients.cluster import BrokerError, Cluster, CommandError, check
from kompakt.clients.offsets import EARLIEST, LATEST, list_offsets

GROUP_ID_NOT_FOUND = 69
UNSUPPORTED_VERSION = 35
INACTIVE_STATES = ("Empty", "Dead")


def list_groups(cluster: Cluster) -> list[dict]:
    cluster.metadata([])
    rows = []
    for node_id in sorted(cluster.brokers):
        answer = cluster.node(node_id).call(16, states_filter=[], types_filter=[])
        check(answer.error_code, None, f"ListGroups on broker {node_id}")
        for g in answer.groups:
            rows.append({"group": g.group_id, "type": getattr(g, "group_type", None) if answer.API_VERSION >= 5 else None,
                         "protocol_type": g.protocol_type,
                         "state": g.group_state if answer.API_VERSION >= 4 else None, "coordinator": node_id})
    return sorted(rows, key=lambda r: r["group"])


def _not_found(group: str) -> BrokerError:
    return BrokerError(GROUP_ID_NOT_FOUND, f"Consumer group '{group}' does not exist.", f"group '{group}'")


def _describe_membership(conn, group: str) -> dict:
    """State and members from ConsumerGroupDescribe or DescribeGroups; GROUP_ID_NOT_FOUND if none."""
    if conn.supports(69):
        (g,) = conn.call(69, group_ids=[group], include_authorized_operations=False).groups
        if g.error_code == 0:
            return {"group": group, "type": "consumer", "state": g.group_state, "protocol_type": "consumer",
                    "protocol": g.assignor_name, "group_epoch": g.group_epoch, "members": [
                        {"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
                         "host": m.client_host, "member_epoch": m.member_epoch,
                         "assignment": {tp.topic_name: sorted(tp.partitions) for tp in m.assignment.topic_partitions}}
                        for m in g.members]}
        if g.error_code not in (GROUP_ID_NOT_FOUND, UNSUPPORTED_VERSION):
            check(g.error_code, g.error_message, f"group '{group}'")
    (g,) = conn.call(15, groups=[group], include_authorized_operations=False).groups
    if g.error_code == GROUP_ID_NOT_FOUND or (g.error_code == 0 and g.group_state == "Dead"):
        raise _not_found(group)
    check(g.error_code, getattr(g, "error_message", None), f"group '{group}'")
    return {"group": group, "type": "classic", "state": g.group_state, "protocol_type": g.protocol_type,
            "protocol": g.protocol_data or None, "members": [
                {"member_id": m.member_id, "instance_id": getattr(m, "group_instance_id", None),
                 "client_id": m.client_id, "host": m.client_host,
                 "assignment": _classic_assignment(g.protocol_type, m.member_assignment)}
                for m in g.members]}


def _classic_assignment(protocol_type: str, data: bytes | None) -> dict:
    if protocol_type != "consumer" or not data:
        return {}   # another protocol's bytes (Connect, Streams' own) or not yet synced
    from kompakt.protocol.consumer_protocol import decode_assignment
    from kompakt.protocol.group_records import GroupRecordError
    try:
        return {t: sorted(ps) for t, ps in decode_assignment(data).items()}
    except GroupRecordError:
        return {}


def committed_offsets(conn, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of `group` (OffsetFetch of all topics)."""
    answer = conn.call(9, group_id=group, topics=None, require_stable=False,
                       groups=[{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}])
    if answer.API_VERSION >= 8:
        (g,) = answer.groups
        error, topics = g.error_code, g.topics
    else:
        error, topics = answer.error_code, answer.topics
    check(error, None, f"committed offsets of group '{group}'")
    out = {}
    for t in topics:
        for p in t.partitions:
            check(p.error_code, None, f"committed offset of group '{group}' on {t.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def describe(cluster: Cluster, group: str) -> dict:
    conn = cluster.coordinator(group)
    desc = _describe_membership(conn, group)
    committed = committed_offsets(conn, group)
    owner = {}
    for m in desc["members"]:
        for topic, partitions in m["assignment"].items():
            for p in partitions:
                owner[(topic, p)] = m
    partitions = sorted(set(committed) | set(owner))
    ends = list_offsets(cluster, {tp: LATEST for tp in partitions}, missing_ok=True)
    desc["offsets"] = []
    for tp in partitions:
        member = owner.get(tp, {})
        current, end = committed.get(tp), ends[tp]
        desc["offsets"].append({
            "topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
            "lag": None if current is None or end is None else max(end - current, 0),
            "member_id": member.get("member_id"), "host": member.get("host"), "client_id": member.get("client_id")})
    return desc


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime ('YYYY-MM-DDTHH:mm:SS.sss', optional zone, local time without one),
    or ms since the epoch; ms since the epoch."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"bad --to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss[+HH:MM|Z]", 2) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def _partitions(cluster: Cluster, specs: list[str]) -> list[tuple[str, int]]:
    """`topic` (every partition) or `topic:0,2` (those) into (topic, partition) pairs."""
    wanted: dict[str, list[int] | None] = {}
    for spec in specs:
        name, sep, numbers = spec.partition(":")
        try:
            wanted[name] = [int(n) for n in numbers.split(",")] if sep else None
        except ValueError:
            raise CommandError(f"bad --topic {spec!r}: expected topic or topic:0,1,2", 2) from None
    out = []
    for t in cluster.metadata(sorted(wanted)).topics:
        check(t.error_code, None, f"topic '{t.name}'")
        existing = sorted(p.partition_index for p in t.partitions)
        for p in wanted[t.name] if wanted[t.name] is not None else existing:
            if p not in existing:
                raise CommandError(f"topic '{t.name}' has no partition {p} (it has {len(existing)})")
            out.append((t.name, p))
    return sorted(out)


def reset_offsets(cluster: Cluster, group: str, topics: list[str], all_topics: bool, strategy: str,
                  value=None, execute: bool = False) -> dict:
    """New committed offsets of `group` by `strategy` (earliest, latest, offset, datetime, shift-by),
    committed only with `execute`. Returns {group, state, executed, offsets: [...], notes: [...]}."""
    conn = cluster.coordinator(group)
    try:
        state = _describe_membership(conn, group)["state"]
    except BrokerError as exc:
        if exc.code != GROUP_ID_NOT_FOUND:
            raise
        state = "Dead"   # no such group yet: committing creates it, as with Kafka's tool
    if state not in INACTIVE_STATES:
        raise CommandError(f"Assignments can only be reset if the group '{group}' is inactive, but the "
                           f"current state is {state}.")
    committed = committed_offsets(conn, group)
    partitions = sorted(committed) if all_topics else _partitions(cluster, topics)
    if not partitions:
        raise CommandError(f"group '{group}' has no committed offsets to reset; name the topics with --topic")
    starts = list_offsets(cluster, {tp: EARLIEST for tp in partitions})
    ends = list_offsets(cluster, {tp: LATEST for tp in partitions}, missing_ok=True)
    if strategy == "datetime":
        found = list_offsets(cluster, {tp: parse_datetime(value) for tp in partitions})
    notes, rows = [], []
    for tp in partitions:
        if strategy == "earliest":
            target = starts[tp]
        elif strategy == "latest":
            target = ends[tp]
        elif strategy == "datetime":
            target = found[tp] if found[tp] >= 0 else ends[tp]   # no record at or after it: the end
        elif strategy == "offset":
            target = int(value)
        elif strategy == "shift-by":
            if tp not in committed:
                raise CommandError(f"--shift-by needs a committed offset, and group '{group}' has none "
                                   f"for {tp[0]}-{tp[1]}")
            target = committed[tp] + int(value)
        else:
            raise CommandError(f"unknown reset strategy {strategy!r}", 2)
        if target > ends[tp]:
            notes.append(f"New offset ({target}) is higher than latest offset for topic partition "
                         f"{tp[0]}-{tp[1]}. Value will be set to {ends[tp]}")
            target = ends[tp]
        elif target < starts[tp]:
            notes.append(f"New offset ({target}) is lower than earliest offset for topic partition "
                         f"{tp[0]}-{tp[1]}. Value will be set to {starts[tp]}")
            target = starts[tp]
        rows.append({"topic": tp[0], "partition": tp[1], "current_offset": committed.get(tp), "new_offset": target})
    if execute:
        _commit(conn, group, rows)
    return {"group": group, "state": state, "executed": execute, "offsets": rows, "notes": notes}


def _commit(conn, group: str, rows: list[dict]) -> None:
    by_topic = defaultdict(list)
    for r in rows:
        by_topic[r["topic"]].append({"partition_index": r["partition"], "committed_offset": r["new_offset"],
                                     "committed_leader_epoch": -1, "commit_timestamp": -1,
                                     "committed_metadata": ""})
    answer = conn.call(8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                       group_instance_id=None, retention_time_ms=-1,
                       topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
    for t in answer.topics:
        for p in t.partitions:
            check(p.error_code, None, f"cannot commit the offset of group '{group}' on {t.name}-{p.partition_index}")


def delete(cluster: Cluster, groups: list[str]) -> tuple[list[str], list[BrokerError]]:
    """DeleteGroups, each group at its coordinator: (groups deleted, one BrokerError per refusal)."""
    deleted, errors = [], []
    for group in groups:
        (result,) = cluster.coordinator(group).call(42, groups_names=[group]).results
        if result.error_code == GROUP_ID_NOT_FOUND:
            errors.append(_not_found(group))
        elif result.error_code:
            errors.append(BrokerError(result.error_code, None, f"cannot delete group '{group}'"))
        else:
            deleted.append(group)
    return deleted, errors
