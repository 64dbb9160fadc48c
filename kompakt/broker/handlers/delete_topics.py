"""DeleteTopics (API key 20), versions 1-6.

Behaviour (Kafka's ControllerApis.deleteTopics):
* `delete.topic.enable=false`: every topic fails with TOPIC_DELETION_DISABLED (v3+) or
  INVALID_REQUEST "Topic deletion is disabled." (v1-2).
* v0-5 name topics in `topic_names`; v6 sends `topics` entries with a name *or* a topic id:
  both set -> INVALID_REQUEST "You may not specify both topic name and topic id.", neither ->
  INVALID_REQUEST; a name or id given twice -> one INVALID_REQUEST "Duplicate topic name." /
  "Duplicate topic id."; a name and an id naming the same topic -> neither is deleted, one
  INVALID_REQUEST answer (at the name's place) for both, as Kafka.
* Unknown name: UNKNOWN_TOPIC_OR_PARTITION (when the principal may describe it, see below);
  unknown id: UNKNOWN_TOPIC_ID.
* Internal topics (`__consumer_offsets`): Kafka lets an authorized admin delete them; here the
  group coordinator holds that log open, so we refuse with INVALID_REQUEST and say why.
* Success: the log manager deletes the topic (partition dirs renamed `-delete`, removed in the
  background); the answer carries name and topic id (v6).

Version notes: v0 is below Kafka 4's floor; v4+ flexible; v5 adds error_message; v6 topic ids.

Authorization (ControllerApis.deleteTopics): DELETE on the cluster allows every topic; else
DELETE on each topic. A name the principal may not DESCRIBE gets TOPIC_AUTHORIZATION_FAILED
even when no such topic exists (so a client cannot probe for hidden topics), and an id of a topic
it may not DESCRIBE is answered without the name. Answers come in request order, which depends
on nothing but the request (Kafka shuffles its answers instead).
"""
from __future__ import annotations

import logging
import uuid
from collections import Counter

from kafka.protocol.admin.topics import DeleteTopicsResponse

from kompakt.broker.handlers._common import error_code_of, is_internal, run_storage
from kompakt.protocol.errors import ErrorCode, KafkaError
from kompakt.broker.security.acl import Op, Res

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
DENIED = "Topic authorization failed."      # Kafka's message for TOPIC_AUTHORIZATION_FAILED here
Result = DeleteTopicsResponse.DeletableTopicResult


def _result(name, topic_id, code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> Result:
    return Result(name=name, topic_id=topic_id or ZERO_UUID, error_code=int(code), error_message=message)


def _requested(request, version: int) -> tuple[list[tuple[str | None, uuid.UUID | None]], list[Result]]:
    """(name, id) pairs to delete, plus the results of malformed entries."""
    if version < 6:
        return [(name, None) for name in request.topic_names], []
    wanted, errors = [], []
    for state in request.topics:
        has_id = state.topic_id is not None and state.topic_id != ZERO_UUID
        if state.name is not None and has_id:
            errors.append(_result(state.name, state.topic_id, ErrorCode.INVALID_REQUEST,
                                  "You may not specify both topic name and topic id."))
        elif state.name is None and not has_id:
            errors.append(_result(None, None, ErrorCode.INVALID_REQUEST,
                                  "Neither topic name nor id were specified."))
        else:
            wanted.append((state.name, state.topic_id if has_id else None))
    return wanted, errors


def _resolve(ctx, wanted, topics) -> list:
    """Per requested entry, in request order: a Result, or a (topic, name, id) to delete.

    Kafka's ControllerApis.deleteTopics: DELETE on the cluster covers every topic; otherwise
    a topic named by name that the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
    whether or not it exists (an absent topic and a hidden one look alike), a describable
    absent one UNKNOWN_TOPIC_OR_PARTITION, and one it may not DELETE TOPIC_AUTHORIZATION_FAILED;
    a topic named by id answers its name only if the principal may DESCRIBE it.
    """
    name_counts = Counter(n for n, _ in wanted if n is not None)
    id_counts = Counter(t for _, t in wanted if t is not None)
    by_id = {meta.topic_id: name for name, meta in topics.items()}
    cluster = ctx.authorize_cluster(Op.DELETE)
    out: list = []
    reported = set()
    for name, tid in wanted:
        if (name is not None and name_counts[name] > 1) or (tid is not None and id_counts[tid] > 1):
            if (name, tid) not in reported:   # one answer per duplicated name or id, as Kafka
                reported.add((name, tid))
                what = "name" if name is not None else "id"
                out.append(_result(name, tid, ErrorCode.INVALID_REQUEST, f"Duplicate topic {what}."))
            continue
        topic = by_id.get(tid) if tid is not None else name
        if topic is None:
            out.append(_result(None, tid, ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {tid} does not exist."))
            continue
        describable = cluster or ctx.authorize(Op.DESCRIBE, Res.TOPIC, topic)
        if tid is None and not describable:
            out.append(_result(name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, DENIED))
        elif topic not in topics:
            out.append(_result(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               "This server does not host this topic-partition."))
        elif not (cluster or ctx.authorize(Op.DELETE, Res.TOPIC, topic)):
            out.append(_result(topic if describable else None, tid, ErrorCode.TOPIC_AUTHORIZATION_FAILED, DENIED))
        else:
            out.append((topic, name, tid))
    # A name and an id of the same topic, both allowed: nothing deleted, one answer (Kafka)
    named = {entry[0] for entry in out if isinstance(entry, tuple) and entry[2] is None}
    clash = {entry[0]: entry[2] for entry in out
             if isinstance(entry, tuple) and entry[2] is not None and entry[0] in named}
    final: list = []
    for entry in out:
        if isinstance(entry, tuple) and entry[0] in clash:
            if entry[2] is None:
                final.append(_result(entry[1], clash[entry[0]], ErrorCode.INVALID_REQUEST,
                                     "The provided topic name maps to an ID that was already supplied."))
            continue
        final.append(entry)
    return final


async def _delete(ctx, topic: str, topic_id) -> Result:
    if is_internal(topic):
        return _result(topic, topic_id, ErrorCode.INVALID_REQUEST,
                       f"Kompakt does not delete the internal topic {topic}: the group "
                       f"coordinator keeps committed offsets in it.")
    try:
        await run_storage(ctx.log_manager.delete_topic, topic)
    except KafkaError as exc:
        return _result(topic, topic_id, error_code_of(exc), str(exc))
    log.info("deleted topic %s (id %s) for client %s", topic, topic_id, ctx.client_id)
    if getattr(ctx.broker, "groups", None) is not None:   # groups: tombstone its committed offsets
        ctx.broker.groups.on_topic_deleted(topic)
    guard = getattr(ctx.broker, "tombstone_guard", None)
    if guard is not None:   # a re-created topic starts with no stale or first-seen groups
        guard.forget_topic(topic)
    return _result(topic, topic_id)


async def handle(ctx, request) -> DeleteTopicsResponse:
    version = ctx.api_version
    wanted, results = _requested(request, version)
    if not ctx.config["delete.topic.enable"]:
        code = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
        results += [_result(name, tid, code, "Topic deletion is disabled.") for name, tid in wanted]
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
    topics = ctx.log_manager.topics
    for entry in _resolve(ctx, wanted, topics):
        if isinstance(entry, tuple):
            topic, _name, _tid = entry
            entry = await _delete(ctx, topic, topics[topic].topic_id)
        results.append(entry)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
