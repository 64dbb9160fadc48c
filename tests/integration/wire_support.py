"""Raw Kafka requests over TCP, written and read by the schema classes Kompakt itself uses.

`Wire(port)` is one connection; `call(request, version)` frames a request object (a
kafka-python class from `kompakt.protocol.registry`, or ours for schemas kafka-python lacks),
sends it, and decodes the answer with the matching response class at the same version, checking
what a client would trip over: the correlation id, and that the body is consumed exactly (no
bytes missing, none left over); `pipeline([(request, version), ...])` sends several at once,
back to back, and reads their answers in order. A closed connection fails the test with the API named.
`error_codes(response)` lists every error code anywhere in a response (top level, per topic,
per partition, ...), for "no unexpected error" checks. `req(key, **fields)`, `sub(key, *names)`
and `field(key, *names)` build request objects and their nested structs. `plain_login` does
SASL/PLAIN on a SASL_PLAINTEXT listener (SaslHandshake v1, SaslAuthenticate v2).
`create_topics(wire, {name: configs})` creates topics (CreateTopics v5) and checks they were;
`list_offset(wire, topic, timestamp)` is ListOffsets v5 of partition 0: (offset, timestamp), and
`end_offset` its latest offset; `produce(wire, topic, records, version, acks)` sends one batch to
partition 0 and returns that partition's answer. `heartbeat_request(group, member, epoch, topics)`
is a KIP-848 ConsumerGroupHeartbeat (join at epoch 0, heartbeat, leave at -1) and
`update_features_request(updates, version)` an UpdateFeatures of (feature, level, upgrade type).
"""
from __future__ import annotations

import itertools
import socket
import struct

from kompakt.protocol import codec, registry


class Wire:
    def __init__(self, port: int | None, timeout: float = 30.0, host: str = "127.0.0.1", sock=None):
        """A new connection to `port`, or `sock` already connected (e.g. a TLS socket)."""
        self.sock = sock if sock is not None else socket.create_connection((host, port), timeout=timeout)
        self.ids = itertools.count(1)

    def call(self, request, version: int, client_id: str = "wire-test"):
        return self.pipeline([(request, version)], client_id)[0]

    def pipeline(self, calls, client_id: str = "wire-test") -> list:
        """Send every (request, version) of `calls` in one write, back to back without waiting
        for an answer, then read the answers in order."""
        return self.answers(self.send(calls, client_id))

    def send(self, calls, client_id: str = "wire-test") -> list:
        """Send every (request, version) of `calls` in one write; what `answers` reads them by."""
        sent, out = [], bytearray()
        for request, version in calls:
            api = registry.API[request.API_KEY]
            request.API_VERSION = version
            correlation_id = next(self.ids)
            request.with_header(correlation_id=correlation_id, client_id=client_id)
            out += request.encode(header=True, framed=True)
            sent.append((api, version, correlation_id))
        self.sock.sendall(out)
        return sent

    def answers(self, sent) -> list:
        """The answers to `sent` (from `send`; leave out requests that get none, acks=0), in order."""
        answers = []
        for api, version, correlation_id in sent:
            head = self._read(4, api.name, version)
            (size,) = struct.unpack(">i", head)
            body = self._read(size, api.name, version)
            answered_id, response, end = codec.decode_response(api.key, version, body)
            assert answered_id == correlation_id, f"{api.name} v{version}: correlation id"
            assert end == len(body), f"{api.name} v{version}: answer is {len(body)} bytes, the schema reads {end}"
            answers.append(response)
        return answers

    def plain_login(self, user: str, password: str) -> None:
        handshake = self.call(req(17, mechanism="PLAIN"), 1)
        assert handshake.error_code == 0, handshake
        answer = self.call(req(36, auth_bytes=f"\0{user}\0{password}".encode()), 2)
        assert answer.error_code == 0, answer

    def _read(self, n: int, name: str, version: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, f"broker closed the connection on {name} v{version}"
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


def error_codes(obj) -> list[int]:
    """Every `*error_code` field's value in a decoded response, depth first."""
    out: list[int] = []
    struct_ = getattr(obj, "_struct", None)
    if struct_ is None:
        return out
    for name in struct_.fields:
        value = getattr(obj, name, None)
        if name.endswith("error_code") and isinstance(value, int):
            out.append(value)
        elif isinstance(value, list):
            for item in value:
                out.extend(error_codes(item))
        elif hasattr(value, "_struct"):
            out.extend(error_codes(value))
    return out


def req(api_key: int, **fields):
    return registry.API[api_key].request(**fields)


def sub(api_key: int, *path: str):
    """A nested struct class of an API's request, e.g. sub(0, "TopicProduceData")."""
    cls = registry.API[api_key].request
    for name in path:
        cls = getattr(cls, name)
    return cls


def field(api_key: int, *path: str):
    """The data class of a (nested) request field, e.g. field(24, "v3_and_below_topics")."""
    cls = registry.API[api_key].request
    for name in path:
        cls = cls._struct.fields[name].data_class
    return cls


def create_topics(wire: Wire, topics: dict[str, dict[str, str]], partitions: int = 1) -> None:
    """Create each topic with its configs (CreateTopics v5); every one must succeed."""
    T = registry.API[19].request.CreatableTopic
    C = T.CreatableTopicConfig
    answer = wire.call(req(19, topics=[
        T(name=name, num_partitions=partitions, replication_factor=1, assignments=[],
          configs=[C(name=k, value=v) for k, v in configs.items()])
        for name, configs in topics.items()], timeout_ms=10000, validate_only=False), 5)
    assert [t.error_code for t in answer.topics] == [0] * len(topics), answer


def list_offset(wire: Wire, topic: str, timestamp: int) -> tuple[int, int]:
    """ListOffsets v5 of partition 0 at `timestamp` (-1 latest, -2 earliest): (offset, timestamp)."""
    T = registry.API[2].request.ListOffsetsTopic
    answer = wire.call(req(2, replica_id=-1, isolation_level=0, topics=[
        T(name=topic, partitions=[T.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])]), 5)
    p = answer.topics[0].partitions[0]
    return p.offset, p.timestamp


def end_offset(wire: Wire, topic: str) -> int:
    return list_offset(wire, topic, -1)[0]


def produce(wire: Wire, topic: str, records: bytes, version: int = 9, acks: int = -1):
    """Produce `records` (one batch's bytes) to partition 0; the partition's answer."""
    P = registry.API[0].request.TopicProduceData
    answer = wire.call(req(0, transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])]), version)
    [t] = answer.responses
    [p] = t.partition_responses
    return p


def heartbeat_request(group: str, member: str, epoch: int, topics=("two",), **fields):
    """ConsumerGroupHeartbeat (68): at epoch 0 a member joining with `topics` and an empty
    assignment; otherwise a heartbeat or (epoch -1) a leave, which send no assignment; `fields`
    override any field (topics=None sends no subscription)."""
    body = dict(group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
                rebalance_timeout_ms=30000, subscribed_topic_names=list(topics) if topics is not None else None,
                subscribed_topic_regex=None, server_assignor=None, topic_partitions=[] if epoch == 0 else None)
    body.update(fields)
    return req(68, **body)


def update_features_request(updates, version: int, validate_only: bool = False, timeout_ms: int = 30000):
    """UpdateFeatures (57) of (feature, max version level, upgrade type) triples; v0 has no
    validate_only and reads allow_downgrade (set for any type but UPGRADE, 1)."""
    key = sub(57, "FeatureUpdateKey")
    body = dict(timeout_ms=timeout_ms, feature_updates=[
        key(feature=name, max_version_level=level, allow_downgrade=kind != 1, upgrade_type=kind)
        for name, level, kind in updates])
    if version >= 1:
        body["validate_only"] = validate_only
    return req(57, **body)
