"""DeleteTopics (key 20): golden bytes (v6 by topic id) and name/id/duplicate rules."""
import uuid

from kafka.protocol.admin.topics import DeleteTopicsRequest

from admin_harness import Harness, cs, framed, h, s16

DT = DeleteTopicsRequest.DeleteTopicState


async def delete(h, version=6, names=(), states=()):
    request = DeleteTopicsRequest(topic_names=list(names), topics=list(states), timeout_ms=30000)
    return (await h.call(request, version)).responses


async def test_golden_v6_delete_by_id(h):
    topic_id = h.create("t1", 2).topic_id
    request = (
        bytes.fromhex("0014 0006 00000005") + s16("test") + b"\x00"   # header v2: DeleteTopics v6, corr 5
        + b"\x02"                                  # topics: compact array of 1
        + cs(None)                                 #   name: null
        + topic_id.bytes                           #   topic_id
        + b"\x00"                                  #   tagged fields
        + bytes.fromhex("00007530")                # timeout_ms 30000
        + b"\x00"                                  # tagged fields
    )
    expected = framed(
        bytes.fromhex("00000005") + b"\x00"        # correlation id, header tagged fields
        + bytes.fromhex("00000000")                # throttle_time_ms
        + b"\x02"                                  # responses: 1
        + cs("t1")                                 #   name (resolved from the id)
        + topic_id.bytes                           #   topic_id
        + bytes.fromhex("0000")                    #   error_code NONE
        + cs(None)                                 #   error_message null
        + b"\x00"                                  #   tagged fields
        + b"\x00"                                  # tagged fields
    )
    assert await h.send(request) == expected
    assert "t1" not in h.lm.topics


async def test_by_name_and_unknowns(h):
    h.create("keep")
    h.create("gone")
    results = await delete(h, version=5, names=["gone", "never"])
    codes = {r.name: (r.error_code, r.error_message) for r in results}
    assert codes["gone"] == (0, None)
    assert codes["never"][0] == 3
    assert set(h.lm.topics) == {"keep"}
    unknown = uuid.uuid4()
    (result,) = await delete(h, states=[DT(name=None, topic_id=unknown)])
    assert (result.error_code, result.topic_id) == (100, unknown)


async def test_malformed_entries(h):
    t = h.create("x").topic_id
    results = await delete(h, states=[DT(name="x", topic_id=t), DT(name=None, topic_id=uuid.UUID(int=0))])
    assert sorted(r.error_code for r in results) == [42, 42]
    results = await delete(h, names=["x", "x"], version=5)
    assert [(r.name, r.error_code, r.error_message) for r in results] == [("x", 42, "Duplicate topic name.")]
    assert "x" in h.lm.topics
    # a name and the id of the same topic in one request: Kafka deletes neither and answers once
    results = await delete(h, states=[DT(name="x", topic_id=uuid.UUID(int=0)), DT(name=None, topic_id=t)])
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [("x", t, 42)]
    assert results[0].error_message == "The provided topic name maps to an ID that was already supplied."
    assert "x" in h.lm.topics


async def test_deletion_disabled(tmp_path):
    h = Harness(tmp_path, **{"delete.topic.enable": "false"})
    try:
        h.create("x")
        (result,) = await delete(h, version=5, names=["x"])
        assert result.error_code == 73
        (result,) = await delete(h, version=2, names=["x"])
        assert result.error_code == 42
        assert "x" in h.lm.topics
    finally:
        h.close()


async def test_internal_topic_is_not_deleted(h):
    h.create("__consumer_offsets", 2)
    (result,) = await delete(h, version=5, names=["__consumer_offsets"])
    assert result.error_code == 42 and "group coordinator" in result.error_message
    assert "__consumer_offsets" in h.lm.topics


async def test_authorization_rules_hide_what_the_principal_may_not_describe(h):
    """Kafka's ControllerApis.deleteTopics: a name the principal may not DESCRIBE is
    TOPIC_AUTHORIZATION_FAILED whether the topic exists or not; a describable missing one is
    UNKNOWN_TOPIC_OR_PARTITION; DESCRIBE without DELETE is TOPIC_AUTHORIZATION_FAILED; by id, the
    name comes back only when describable; DELETE on the cluster allows every topic."""
    from kompakt.broker.security.acl import AclBinding, Op, PatternType, PermissionType, Res
    from kompakt.broker.security.authorizer import Authorizer

    def allow(rtype, name, op):
        return AclBinding(rtype, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, PermissionType.ALLOW)

    ids = {name: h.create(name).topic_id for name in ("mine", "seen", "hidden", "seen-by-id", "hidden-by-id")}
    h.broker.authorizer = az = Authorizer()
    az.create([allow(Res.TOPIC, "mine", Op.DELETE), allow(Res.TOPIC, "seen", Op.DESCRIBE),
               allow(Res.TOPIC, "seen-by-id", Op.DESCRIBE), allow(Res.TOPIC, "ghost-seen", Op.DESCRIBE)])
    results = await delete(h, states=[DT(name="mine"), DT(name="seen"), DT(name="hidden"), DT(name="ghost-seen"),
                                      DT(name="ghost"), DT(name=None, topic_id=ids["seen-by-id"]),
                                      DT(name=None, topic_id=ids["hidden-by-id"])])
    got = [(r.name, r.topic_id, r.error_code) for r in results]
    zero = None                                       # the zero uuid, as kafka-python decodes it
    assert got == [("mine", ids["mine"], 0), ("seen", zero, 29), ("hidden", zero, 29), ("ghost-seen", zero, 3),
                   ("ghost", zero, 29), ("seen-by-id", ids["seen-by-id"], 29), (None, ids["hidden-by-id"], 29)]
    assert results[1].error_message == "Topic authorization failed."
    assert set(h.lm.topics) == {"seen", "hidden", "seen-by-id", "hidden-by-id"}
    az.create([allow(Res.CLUSTER, "kafka-cluster", Op.DELETE)])
    results = await delete(h, version=5, names=["hidden", "ghost"])
    assert [(r.name, r.error_code) for r in results] == [("hidden", 0), ("ghost", 3)]
