"""ConsumerGroupDescribe (API key 69), versions 0-1: KIP-848 consumer-protocol groups.

Behaviour: per group, its state (Empty, Assigning, Reconciling, Stable), group epoch,
assignment epoch, server assignor and members - each with its epoch, client, subscription
(topic names, regex), current assignment and target assignment (topic id, name, partitions).
Every group answers UNSUPPORTED_VERSION (before any authorization, as Kafka's KafkaApis) when
`consumer` is not in group.coordinator.rebalance.protocols or the finalized group.version is 0.
A classic or unknown group answers GROUP_ID_NOT_FOUND (with Kafka's message); an empty group id
INVALID_GROUP_ID; COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets loads at start. Authorization as Kafka's handleConsumerGroupDescribe: DESCRIBE on the group
(else GROUP_AUTHORIZATION_FAILED for it), and DESCRIBE on every topic its members subscribe or
are assigned (else TOPIC_AUTHORIZATION_FAILED for the group); `include_authorized_operations`
fills the group's operations bit field.

Version notes: v1 (Kafka 4.0) adds each member's type: 1 for a consumer-protocol member (the
only kind Kompakt's consumer groups have).
"""
from __future__ import annotations

from kompakt.broker.features.levels import GROUP_VERSION
from kompakt.broker.groups.consumer.heartbeat import consumer_protocol_enabled
from kompakt.broker.security.acl import Op, Res
from kompakt.protocol.errors import ErrorCode
from kompakt.protocol.schemas.messages import ConsumerGroupDescribeResponse as Response

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

Described = Response.DescribedGroup
Member = Described.Member
Assignment = Member.Assignment
TopicPartitions = Assignment.TopicPartitions
NOT_ASKED = -2147483648


def _failed(group_id, code, message=None):
    return Described(error_code=code, error_message=message, group_id=group_id, group_state="",
                     group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                     authorized_operations=NOT_ASKED)


def _assignment(parts):
    return Assignment(topic_partitions=[TopicPartitions(topic_id=tid, topic_name=name, partitions=p)
                                        for tid, name, p in parts])


def _topics(d) -> set[str]:
    out = set()
    for m in d.members:
        out.update(m.subscribed_topic_names)
        out.update(name for _, name, _ in m.assignment)
        out.update(name for _, name, _ in m.target_assignment)
    return out


async def handle(ctx, request):
    v = ctx.api_version
    # checked before any ACL, as Kafka does
    if not consumer_protocol_enabled(ctx.config, ctx.broker.features.level(GROUP_VERSION)):
        return Response(version=v, throttle_time_ms=0, groups=[
            _failed(group_id, ErrorCode.UNSUPPORTED_VERSION) for group_id in request.group_ids])
    out = []
    wanted = []
    for group_id in request.group_ids:
        if not group_id:
            out.append(_failed(group_id, ErrorCode.INVALID_GROUP_ID))
        elif not ctx.authorize(Op.DESCRIBE, Res.GROUP, group_id):
            out.append(_failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        elif ctx.groups.loading:                    # __consumer_offsets still loading (retriable)
            out.append(_failed(group_id, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
        else:
            out.append(None)
            wanted.append(group_id)
    described = iter(ctx.groups.consumer_group_describe(wanted))
    for i, slot in enumerate(out):
        if slot is not None:
            continue
        d = next(described)
        if d.error:
            out[i] = _failed(d.group_id, d.error, d.message)
            continue
        denied = [t for t in sorted(_topics(d)) if not ctx.authorize(Op.DESCRIBE, Res.TOPIC, t)]
        if denied:
            out[i] = _failed(d.group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             f"The group has subscribed topics that are not authorized: {denied}.")
            continue
        ops = NOT_ASKED
        if request.include_authorized_operations:
            ops = sum(1 << op for op in ctx.authorized_operations(Res.GROUP, d.group_id))
        out[i] = Described(
            error_code=0, error_message=None, group_id=d.group_id, group_state=d.state,
            group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch, assignor_name=d.assignor,
            members=[Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                            subscribed_topic_names=m.subscribed_topic_names,
                            subscribed_topic_regex=m.subscribed_topic_regex,
                            assignment=_assignment(m.assignment),
                            target_assignment=_assignment(m.target_assignment),
                            member_type=m.member_type)
                     for m in d.members],
            authorized_operations=ops)
    return Response(version=v, throttle_time_ms=0, groups=out)
