"""Client quotas: Kafka's sampled rate and throttle time (figures worked by hand from
SampledStat/Rate/QuotaUtils), the eight-level quota resolution with shared sensors, the admin
rules and messages of AlterClientQuotas / DescribeClientQuotas, and persistence through a real
state file."""
import types

import pytest

from kompakt.broker.quotas import entities as E
from kompakt.broker.quotas.manager import ClientQuotas, QuotaType
from kompakt.broker.quotas.rate import Rate
from kompakt.broker.metadata.state_files import CLIENT_QUOTAS_FILE, StateFile
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol.errors import ErrorCode as EC


def test_rate_counts_a_young_sensor_over_samples_minus_one_windows():
    r = Rate(1000, 11)
    r.record(10_000, now_ms=0)
    # elapsed 0 ms: the window is taken as (11 - 1) full windows = 10 s, so 1000 B/s
    assert r.window_size(0) == 10_000 and r.measure(0) == 1000.0
    assert r.throttle_ms(1000.0, 0) == 0
    # over a 500 B/s quota: (1000 - 500) / 500 * 10000 ms
    assert r.throttle_ms(500.0, 0) == 10_000


def test_rate_windows_advance_recycle_and_expire():
    r = Rate(1000, 2)                         # 2 samples of 1 s (+1 overlapping slot)
    r.record(100, 0)
    r.record(100, 500)                        # same window
    r.record(100, 1000)                       # a new window starts
    assert len(r.samples) == 2 and r.measure(1000) == 300 / 1.0   # elapsed 1000 ms = 1 full window
    r.record(100, 2500)                       # third slot
    r.record(100, 3600)                       # recycles the oldest slot
    assert len(r.samples) == 3
    # 2 samples * 1 s after their last event, samples are obsolete: the rate decays to nothing
    assert r.measure(10_000) == 0.0
    r.record(-100, 10_000)                    # an unrecord may go below zero for a moment
    assert r.measure(10_000) < 0


def limits(**entries):
    return {E.entity_key(pairs): bound for pairs, bound in entries.values()}


def test_resolution_order_and_shared_sensors():
    q = QuotaType(E.PRODUCER_BYTE_RATE, 1000, 11)
    u, c = ("user", "alice"), ("client-id", "app")
    du, dc = ("user", None), ("client-id", None)
    q.set_limits({E.entity_key(k): v for k, v in [
        ((u, c), 1.0), ((u, dc), 2.0), ((u,), 3.0), ((du, c), 4.0), ((du, dc), 5.0), ((du,), 6.0),
        ((c,), 7.0), ((dc,), 8.0)]})
    assert q.resolve("alice", "app") == (("alice", "app"), 1.0)
    assert q.resolve("alice", "other") == (("alice", "other"), 2.0)   # user + default client id
    assert q.resolve("bob", "app") == (("bob", "app"), 4.0)           # default user + client id
    assert q.resolve("bob", "other") == (("bob", "other"), 5.0)
    q.set_limits({E.entity_key(k): v for k, v in [((u,), 3.0), ((c,), 7.0), ((dc,), 8.0)]})
    # a user quota: every client id of alice shares one sensor
    assert q.resolve("alice", "x") == (("alice", ""), 3.0) and q.resolve("alice", "y") == (("alice", ""), 3.0)
    # no user quota for bob: the client-id quotas, shared by every user of that id
    assert q.resolve("bob", "app") == (("", "app"), 7.0) and q.resolve("carol", "app") == (("", "app"), 7.0)
    assert q.resolve("bob", "zzz") == (("", "zzz"), 8.0)
    q.set_limits({})
    assert q.resolve("bob", "zzz") == (("", "zzz"), None) and not q.enabled


def test_record_throttles_and_unrecord_takes_back():
    q = QuotaType(E.CONSUMER_BYTE_RATE, 1000, 2)
    q.set_limits({((E.CLIENT_ID, "app"),): 1000.0})
    assert q.record("User:ANONYMOUS", "app", 500, 0) == 0            # 500 B over a 1 s window
    assert q.record("User:ANONYMOUS", "app", 1500, 0) == 1000        # 2000 B/s: (2000-1000)/1000 * 1000 ms
    q.unrecord("User:ANONYMOUS", "app", 1500, 0)
    assert q.record("User:ANONYMOUS", "app", 0, 0) == 0
    assert q.record("User:ANONYMOUS", "other", 10**9, 0) == 0         # no quota for that client id
    assert q.max_value_in_window("User:ANONYMOUS", "app") == 1000     # bound * (2 - 1) windows * 1 s
    # a client no quota covers has no cap (None, not an infinite float a fetch cannot make an int of)
    assert q.max_value_in_window("User:ANONYMOUS", "other") is None


def test_throttle_time_reads_the_current_throttle_without_recording():
    """What a fetch asks before it parks (handlers/fetch.py): is the client over its quota now?"""
    q = QuotaType(E.CONSUMER_BYTE_RATE, 1000, 2)
    q.set_limits({((E.CLIENT_ID, "app"),): 1000.0})
    assert q.throttle_time("User:ANONYMOUS", "app", 0) == 0              # no sensor yet
    q.record("User:ANONYMOUS", "app", 2000, 0)
    assert q.throttle_time("User:ANONYMOUS", "app", 0) == 1000           # (2000-1000)/1000 * 1000 ms
    assert q.throttle_time("User:ANONYMOUS", "app", 0) == 1000           # asking records nothing
    assert q.throttle_time("User:ANONYMOUS", "other", 0) == 0            # no quota for that client id


def test_a_nan_quota_is_refused():
    with pytest.raises(E.QuotaError, match="must be greater than 0"):
        E.validate_value(E.USER_CLIENT_KEYS, E.CONSUMER_BYTE_RATE, float("nan"))


@pytest.fixture
def quotas(tmp_path):
    cfg = BrokerConfig({"log.dirs": str(tmp_path)})
    q = ClientQuotas(cfg, StateFile(str(tmp_path), CLIENT_QUOTAS_FILE))
    q.load()
    return q


def ops(*items):
    return [(k, v, v is None) for k, v in items]


async def test_alter_rules_and_messages(quotas):
    results = await quotas.alter([
        ([("user", "alice")], ops(("producer_byte_rate", 1024.0), ("request_percentage", 50.5))),
        ([], ops(("producer_byte_rate", 1.0))),
        ([("user", "a"), ("user", "b")], ops(("producer_byte_rate", 1.0))),
        ([("group", "g")], ops(("producer_byte_rate", 1.0))),
        ([("client-id", "")], ops(("producer_byte_rate", 1.0))),
        ([("ip", "127.0.0.1"), ("user", "x")], ops(("connection_creation_rate", 1.0))),
        ([("client-id", "c")], ops(("connection_creation_rate", 1.0))),
        ([("client-id", "c2")], ops(("consumer_byte_rate", 0.0))),
        ([("client-id", "d")], ops(("consumer_byte_rate", 1.5))),
        ([("client-id", "e")], ops(("consumer_byte_rate", 5.0), ("consumer_byte_rate", 6.0))),
        ([("ip", None)], ops(("connection_creation_rate", 10.0))),
    ], validate_only=False)
    assert results == [
        (0, None),
        (EC.INVALID_REQUEST, "Invalid empty client quota entity"),
        (EC.INVALID_REQUEST, "Invalid client quota entity, duplicate entity entry user"),
        (EC.INVALID_REQUEST, "Unhandled client quota entity type: group"),
        (EC.INVALID_REQUEST, "Empty client-id not supported"),
        (EC.INVALID_REQUEST, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
        (EC.INVALID_REQUEST, "Invalid configuration key connection_creation_rate"),
        (EC.INVALID_REQUEST, "Quota consumer_byte_rate must be greater than 0"),
        (EC.INVALID_REQUEST, "consumer_byte_rate cannot be a fractional value."),
        (EC.INVALID_REQUEST, "Duplicate quota key consumer_byte_rate not updating quota for this entity "
                             "ClientQuotaEntity(entries={client-id=e})"),
        (0, None),
    ]
    assert quotas.produce.enabled and not quotas.fetch.enabled
    # a duplicated entity fails in every copy; validate_only changes nothing
    results = await quotas.alter([([("user", "bob")], ops(("producer_byte_rate", 1.0))),
                                  ([("user", "bob")], ops(("producer_byte_rate", 2.0)))], validate_only=False)
    assert [code for code, _ in results] == [EC.INVALID_REQUEST] * 2
    assert await quotas.alter([([("user", "zed")], ops(("consumer_byte_rate", 9.0)))], True) == [(0, None)]
    assert not quotas.fetch.enabled
    # removing the last key removes the entity
    await quotas.alter([([("ip", None)], ops(("connection_creation_rate", None)))], False)
    assert E.entity_key([("ip", None)]) not in quotas.entities


def component(entity_type, match_type, match=None):
    return types.SimpleNamespace(entity_type=entity_type, match_type=match_type, match=match)


async def test_describe_filters_and_persistence(quotas, tmp_path):
    await quotas.alter([
        ([("user", "alice")], ops(("producer_byte_rate", 100.0))),
        ([("user", "alice"), ("client-id", "app")], ops(("consumer_byte_rate", 200.0))),
        ([("user", None)], ops(("producer_byte_rate", 300.0))),
        ([("client-id", None)], ops(("consumer_byte_rate", 400.0))),
    ], validate_only=False)

    def names(found):
        return [tuple(n for _, n in entity) for entity, _ in found]

    assert names(quotas.describe([component("user", E.MATCH_EXACT, "alice")], False)) == [("app", "alice"), ("alice",)]
    assert names(quotas.describe([component("user", E.MATCH_EXACT, "alice")], True)) == [("alice",)]
    assert names(quotas.describe([component("user", E.MATCH_DEFAULT)], False)) == [(None,)]
    assert names(quotas.describe([component("client-id", E.MATCH_SPECIFIED)], False)) == [(None,), ("app", "alice")]
    assert len(quotas.describe([], False)) == 4 and quotas.describe([], True) == []
    for components, code, message in [
        ([component("", E.MATCH_EXACT, "x")], EC.INVALID_REQUEST, "Invalid empty entity type."),
        ([component("user", E.MATCH_DEFAULT), component("user", E.MATCH_SPECIFIED)], EC.INVALID_REQUEST,
         "Entity type user cannot appear more than once in the filter."),
        ([component("group", E.MATCH_EXACT, "g")], EC.UNSUPPORTED_VERSION, "Unsupported entity type group"),
        ([component("user", E.MATCH_EXACT)], EC.INVALID_REQUEST,
         "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ([component("user", 7)], EC.INVALID_REQUEST, "Unknown match type 7"),
    ]:
        with pytest.raises(E.QuotaError) as info:
            quotas.describe(components, False)
        assert (info.value.code, info.value.message) == (code, message)
    # a new manager on the same dir has them all, enforced
    again = ClientQuotas(BrokerConfig({"log.dirs": str(tmp_path)}), StateFile(str(tmp_path), CLIENT_QUOTAS_FILE))
    again.load()
    assert again.entities == quotas.entities
    assert again.produce.resolve("bob", "x") == (("bob", ""), 300.0)
    assert again.fetch.resolve("alice", "app") == (("alice", "app"), 200.0)


def test_per_client_state_stays_bounded():
    """Clients that make up a client id per connection must not grow the quota state without end:
    idle sensors go after an hour and the resolution cache is emptied at each sweep."""
    from kompakt.broker.quotas.manager import SENSOR_EXPIRATION_MS, SWEEP_INTERVAL_MS
    q = QuotaType(E.PRODUCER_BYTE_RATE, 1000, 11)
    q.set_limits({((E.CLIENT_ID, "app"),): 1000.0})
    q.record("User:ANONYMOUS", "app", 10, 0)             # the first record sweeps (nothing yet)
    for i in range(2000):
        q.record("User:ANONYMOUS", f"client-{i}", 10, 1)
    assert len(q._resolved) >= 2000 and len(q.sensors) >= 2000
    q.record("User:ANONYMOUS", "app", 10, SWEEP_INTERVAL_MS + 1)
    assert len(q._resolved) <= 1
    q.record("User:ANONYMOUS", "app", 10, SENSOR_EXPIRATION_MS + 2 * SWEEP_INTERVAL_MS)
    assert list(q.sensors) == [("", "app")]
