"""What each console page shows, as plain JSON-able dicts (the `.json` of every page).

Role: gather a page's figures from what already answers them: the admin API's views
(kompakt.broker.admin.views: partition_view, cleaner_view, transactions_view; record_count), the
broker's own Kafka handlers called in process (kafka_calls.py), and the cleaner's history
(kompakt.cleaner.history). Nothing here computes a Kafka figure a second time.

Invariants: functions only read; the ones that walk logs or files run in worker threads
(`asyncio.to_thread`), so a page never stalls Kafka requests on the loop; a page that cannot get
one figure (cleaner disabled, coordinator loading) says so in the dict instead of failing.
"""
from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
from typing import Any

from kompakt.broker.admin.record_count import count_records
from kompakt.broker.admin.views import (ApiError, jsonable, log_manager_of, partition_view, resolve_partition,
                                        topic_partitions, transactions_view)
from kompakt.console import kafka_calls as K


def _versions() -> dict[str, str]:
    from importlib import metadata
    out = {"python": platform.python_version()}
    for dist in ("kompakt", "aiohttp", "kafka-python"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def process_start_s() -> float | None:
    """When this process started (seconds since the epoch), from /proc; None elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# --- the broker -----------------------------------------------------------------------------------
async def broker_page(broker: Any) -> dict[str, Any]:
    log_manager_of(broker)
    started = process_start_s()
    listeners = []
    for name, host, port in getattr(broker, "bound", []):
        adv = broker.advertised_by_listener.get(name)
        protocol = next((s.listener.protocol for s in broker.listeners if s.name == name), "?")
        listeners.append({"name": name, "security_protocol": protocol, "host": host or "0.0.0.0", "port": port,
                          "advertised": f"{adv[0]}:{adv[1]}" if adv else None})
    admin = getattr(broker, "_admin", None)
    dirs = await K.describe_log_dirs(broker)
    offline = list(getattr(broker.log_manager, "offline_dirs", None) or [])
    for d in dirs:
        d["used_bytes"] = (d["total_bytes"] - d["usable_bytes"]) if d["total_bytes"] >= 0 else None
        d["used_percent"] = (100.0 * d["used_bytes"] / d["total_bytes"]) if d["total_bytes"] > 0 else None
    cleaner = getattr(broker, "cleaner", None)
    return {
        "node_id": broker.node_id, "cluster_id": broker.cluster_id,
        "started_ms": int(started * 1000) if started else None,
        "uptime_s": round(time.time() - started, 1) if started else None,
        "versions": _versions(),
        "listeners": listeners,
        "admin_listener": getattr(admin, "url", None),
        "log_dirs": dirs, "offline_log_dirs": offline,
        "topics": len(topic_partitions(broker.log_manager)),
        "partitions": len(broker.log_manager.all_logs()),
        "connections": len(getattr(broker, "connections", ()) or ()),
        "cleaner": jsonable(cleaner.status()) if cleaner is not None else {"enabled": False},
        "api_versions": [{"api_key": key, "name": broker.dispatcher.names.get(key, str(key)),
                          "min_version": lo, "max_version": hi} for key, lo, hi in broker.dispatcher.ranges],
        "platform": f"{platform.system()} {platform.release()} ({sys.implementation.name})",
    }


# --- topics ---------------------------------------------------------------------------------------
def _topics_summary(broker: Any) -> list[dict[str, Any]]:
    manager = log_manager_of(broker)
    counts = topic_partitions(manager)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, lg in sorted(manager.all_logs().items(), key=lambda kv: (kv[0][0], kv[0][1])):
        by_topic.setdefault(tp[0], []).append(partition_view(broker, tp, lg))
    out = []
    for name in sorted(counts):
        views = by_topic.get(name, [])
        ratios = [v["cleaner"].get("dirty_ratio") for v in views if v["cleaner"].get("dirty_ratio") is not None]
        out.append({"name": name, "internal": name.startswith("__"), "partitions": counts[name],
                    "cleanup_policy": views[0]["cleanup_policy"] if views else [],
                    "size_bytes": sum(v["size_bytes"] or 0 for v in views),
                    "end_offsets": sum(v["high_watermark"] or 0 for v in views),
                    "max_dirty_ratio": max(ratios) if ratios else None})
    return out


async def topics_page(broker: Any) -> dict[str, Any]:
    return {"topics": await asyncio.to_thread(_topics_summary, broker)}


async def topic_page(broker: Any, topic: str) -> dict[str, Any]:
    manager = log_manager_of(broker)
    counts = topic_partitions(manager)
    if topic not in counts:
        raise ApiError(404, "unknown_topic", f"unknown topic {topic!r}", kafka_error="UNKNOWN_TOPIC_OR_PARTITION")

    logs: list[tuple[Any, Any]] = []

    def build() -> list[dict[str, Any]]:
        views = []
        for p in range(counts[topic]):
            tp, lg = resolve_partition(broker, topic, str(p))
            logs.append((tp, lg))
            view = partition_view(broker, tp, lg, detail=True)
            view["records"] = count_records(lg)
            views.append(view)
        return views

    try:
        partitions = await asyncio.to_thread(build)
        configs = await K.describe_topic_configs(broker, topic)
    except (OSError, ValueError, K.CallError) as exc:
        # its files renamed away or its log closed under the read, or DescribeConfigs' UNKNOWN_TOPIC
        if topic_gone(broker, topic, logs):
            raise deleted_while_read(topic) from exc
        raise
    history = cleaner_history(broker)
    samples = history.dirty(topic) if history is not None else {}
    return {"topic": topic, "topic_id": partitions[0].get("topic_id") if partitions else None,
            # names the dirty-ratio chart's content, so the page reloads it only when it changed
            "dirty_chart_version": f"{sum(len(v) for v in samples.values())}-"
                                   f"{max([v[-1][0] for v in samples.values() if v] + [0])}",
            "partitions": partitions, "configs": configs,
            "overrides": {c["name"]: c["value"] for c in configs if c["source"] == "topic"}}


def topic_gone(broker: Any, topic: str, logs: list[tuple[Any, Any]]) -> bool:
    """Whether `topic` was deleted (perhaps made anew: another topic id) since `logs`, its (tp, log)
    pairs, were looked up. A log moved to another dir (AlterReplicaLogDirs) is the same topic."""
    manager = broker.log_manager
    if topic not in topic_partitions(manager):
        return True
    for tp, lg in logs:
        now = manager.get_log(tp)
        if now is None or getattr(now, "topic_id", None) != getattr(lg, "topic_id", None):
            return True
    return False


def deleted_while_read(topic: str) -> ApiError:
    return ApiError(404, "unknown_topic", f"topic {topic!r} was deleted while this page was being read",
                    kafka_error="UNKNOWN_TOPIC_OR_PARTITION")


# --- groups ---------------------------------------------------------------------------------------
def _end_offsets(broker: Any, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """High watermarks (what kafka-consumer-groups measures lag against) of the partitions that exist."""
    manager = broker.log_manager
    known = topic_partitions(manager)
    out = {}
    for tp in tps:
        lg = manager.get_log(tp) if tp[0] in known else None
        if lg is not None:
            out[tp] = lg.high_watermark
    return out


async def groups_page(broker: Any) -> dict[str, Any]:
    log_manager_of(broker)
    groups = await K.list_groups(broker)
    for g in groups:
        try:
            committed = await K.committed_offsets(broker, g["group_id"])
        except K.CallError as exc:
            g["error"] = exc.message
            continue
        ends = _end_offsets(broker, list(committed))
        g["partitions"] = len(committed)
        g["lag"] = sum(max(0, ends[tp] - off) for tp, off in committed.items() if tp in ends)
        g["topics"] = sorted({tp[0] for tp in committed})
        detail = await _describe(broker, g["group_id"], g["type"])
        g["members"] = len(detail.get("members", []))
    return {"groups": groups}


async def _describe(broker: Any, group: str, group_type: str) -> dict[str, Any]:
    """State, members and each member's assignment, for either protocol."""
    from kompakt.protocol.consumer_protocol import decode_assignment

    if group_type == "consumer":
        d = await K.describe_consumer_group(broker, group)
        if d.error_code:
            return {"error": d.error_message or K.error_name(d.error_code), "members": []}
        members = [{"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
                    "client_host": m.client_host, "member_epoch": m.member_epoch,
                    "subscribed_topics": list(m.subscribed_topic_names or []),
                    "subscribed_regex": m.subscribed_topic_regex,
                    "assignment": {t.topic_name: sorted(t.partitions) for t in m.assignment.topic_partitions},
                    "target_assignment": {t.topic_name: sorted(t.partitions)
                                          for t in m.target_assignment.topic_partitions}}
                   for m in d.members]
        return {"protocol": "consumer (KIP-848)", "state": d.group_state, "group_epoch": d.group_epoch,
                "assignment_epoch": d.assignment_epoch, "assignor": d.assignor_name, "members": members}
    d = await K.describe_classic_group(broker, group)
    if d.error_code:
        return {"error": d.error_message or K.error_name(d.error_code), "members": []}
    members = []
    for m in d.members:
        try:
            assignment = decode_assignment(bytes(m.member_assignment or b"")) if d.protocol_type == "consumer" else {}
        except ValueError:
            assignment = {}
        members.append({"member_id": m.member_id, "instance_id": getattr(m, "group_instance_id", None),
                        "client_id": m.client_id, "client_host": m.client_host,
                        "assignment": {t: sorted(ps) for t, ps in assignment.items()}})
    return {"protocol": f"classic ({d.protocol_type or 'no protocol type'})", "state": d.group_state,
            "assignor": d.protocol_data, "members": members}


async def group_page(broker: Any, group: str) -> dict[str, Any]:
    log_manager_of(broker)
    listed = {g["group_id"]: g for g in await K.list_groups(broker)}
    if group not in listed:
        raise ApiError(404, "unknown_group", f"no group {group!r} on this broker", kafka_error="GROUP_ID_NOT_FOUND")
    info = listed[group]
    detail = await _describe(broker, group, info["type"])
    committed = await K.committed_offsets(broker, group)
    ends = _end_offsets(broker, list(committed))
    owner = {}
    for m in detail.get("members", []):
        for t, ps in m.get("assignment", {}).items():
            for p in ps:
                owner[(t, p)] = m["client_id"] or m["member_id"]
    offsets = [{"topic": t, "partition": p, "committed_offset": off, "high_watermark": ends.get((t, p)),
                "lag": max(0, ends[(t, p)] - off) if (t, p) in ends else None, "member": owner.get((t, p))}
               for (t, p), off in sorted(committed.items())]
    return {"group_id": group, "type": info["type"], "protocol_type": info["protocol_type"],
            "state": detail.get("state") or info["state"], **{k: v for k, v in detail.items() if k != "state"},
            "offsets": offsets, "lag": sum(o["lag"] or 0 for o in offsets),
            "topics": sorted({o["topic"] for o in offsets})}


# --- transactions and producers -------------------------------------------------------------------
async def transactions_page(broker: Any) -> dict[str, Any]:
    manager = log_manager_of(broker)
    try:
        txns = transactions_view(broker)
    except ApiError as exc:
        txns = {"transactions": [], "counters": {}, "coordinator_error": exc.message}
    tps = [(tp[0], tp[1]) for tp in manager.all_logs() if not tp[0].startswith("__")]
    producers = await K.describe_producers(broker, tps) if tps else []
    ongoing = []
    for tp, lg in sorted(manager.all_logs().items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for pid, first in lg.ongoing_transactions():
            ongoing.append({"topic": tp[0], "partition": tp[1], "producer_id": pid, "first_offset": first,
                            "last_stable_offset": lg.last_stable_offset, "high_watermark": lg.high_watermark})
    return {**txns, "producers": producers, "open_transactions_by_partition": ongoing}


# --- the cleaner ----------------------------------------------------------------------------------
def _compacted(broker: Any) -> list[dict[str, Any]]:
    manager = log_manager_of(broker)
    out = []
    for tp, lg in sorted(manager.all_logs().items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if not getattr(lg.config, "compact", False):
            continue
        view = partition_view(broker, tp, lg)
        out.append({"topic": tp[0], "partition": tp[1], "size_bytes": view["size_bytes"],
                    "cleaner": view["cleaner"], "tombstone_retention": view.get("tombstone_retention")})
    return out


async def cleaner_page(broker: Any) -> dict[str, Any]:
    cleaner = getattr(broker, "cleaner", None)
    partitions = await asyncio.to_thread(_compacted, broker)
    if cleaner is None:
        return {"enabled": False, "partitions": partitions, "passes": [], "held_back": []}
    history = cleaner.history
    passes = history.passes()
    held = [{"topic": p["topic"], "partition": p["partition"],
             "held_back_by_last_clean": p["tombstone_retention"].get("held_back_by_last_clean"),
             "horizon_offset": p["tombstone_retention"].get("horizon_offset"),
             "held_by": p["tombstone_retention"].get("held_by") or [],
             "groups": p["tombstone_retention"].get("groups") or [],
             "groups_config": p["tombstone_retention"].get("groups_config"),
             "note": p["tombstone_retention"].get("note")}
            for p in partitions if p.get("tombstone_retention")]
    return {"enabled": True, "status": jsonable(cleaner.status()), "passes": list(reversed(passes)),
            "totals": {"passes": len(passes), "bytes_read": sum(p["bytes_read"] for p in passes),
                       "bytes_written": sum(p["bytes_written"] for p in passes),
                       "records_removed": sum(p["records_removed"] for p in passes)},
            "partitions": partitions, "held_back": held,
            "dirty_samples": {f"{t}-{p}": s for (t, p), s in history.dirty().items()}}


def cleaner_history(broker: Any):
    cleaner = getattr(broker, "cleaner", None)
    return None if cleaner is None else cleaner.history

