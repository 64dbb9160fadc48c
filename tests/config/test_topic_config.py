"""Topic configuration: Kafka's defaults, broker synonyms, validation messages, DescribeConfigs rows."""
import pytest

from kompakt.config.broker_config import BrokerConfig
from kompakt.config.topic_config import (
    SOURCE_DEFAULT_CONFIG, SOURCE_DYNAMIC_TOPIC_CONFIG, SOURCE_STATIC_BROKER_CONFIG, TOPIC_KEYS,
    LogConfig, describe, validate_topic_configs)
from kompakt.protocol.errors import ErrorCode, InvalidConfigError


def test_kafka_defaults():
    c = LogConfig.default()
    assert c.segment_bytes == 1 << 30
    assert c.segment_ms == 7 * 24 * 3600 * 1000
    assert c.retention_ms == 604_800_000 and c.retention_bytes == -1
    assert c.cleanup_policy == frozenset({"delete"}) and c.delete and not c.compact
    assert c.delete_retention_ms == 86_400_000 and c.file_delete_delay_ms == 60_000
    assert c.min_cleanable_dirty_ratio == 0.5 and c.min_compaction_lag_ms == 0
    assert c.max_compaction_lag_ms == 2**63 - 1
    assert c.max_message_bytes == 1_048_588 and c.index_interval_bytes == 4096
    assert c.segment_index_bytes == 10_485_760 and c.message_timestamp_type == "CreateTime"
    assert c.flush_messages == 2**63 - 1 and c.flush_ms == 2**63 - 1
    assert c.compression_type == "producer" and c.preallocate is False


def test_every_issue_key_is_in_the_table():
    for key in ["cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level",
                "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
                "flush.ms", "index.interval.bytes", "max.compaction.lag.ms", "max.message.bytes",
                "message.timestamp.type", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
                "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
                "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes",
                "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable",
                "message.downconversion.enable", "local.retention.ms", "local.retention.bytes",
                "remote.storage.enable"]:
        assert key in TOPIC_KEYS, key


def test_broker_synonyms_fill_defaults_with_unit_conversion():
    broker = BrokerConfig({"log.retention.hours": "2", "log.roll.hours": "1", "log.segment.bytes": "2000",
                           "log.cleaner.min.cleanable.ratio": "0.25", "message.max.bytes": "5000",
                           "log.segment.delete.delay.ms": "7", "log.cleaner.delete.retention.ms": "9",
                           "log.cleanup.policy": "compact,delete"})
    c = LogConfig.from_overrides({}, broker)
    assert c.retention_ms == 2 * 3_600_000
    assert c.segment_ms == 3_600_000
    assert c.segment_bytes == 2000  # broker value below 1 MiB is used as given
    assert c.min_cleanable_dirty_ratio == 0.25 and c.max_message_bytes == 5000
    assert c.file_delete_delay_ms == 7 and c.delete_retention_ms == 9
    assert c.compact and c.delete


def test_ms_synonym_wins_over_hours_and_minutes():
    broker = BrokerConfig({"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "4"})
    assert LogConfig.from_overrides({}, broker).retention_ms == 4
    broker = BrokerConfig({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert LogConfig.from_overrides({}, broker).retention_ms == 180_000
    assert LogConfig.from_overrides({}, BrokerConfig({"log.retention.hours": "-1"})).retention_ms == -1


def test_topic_override_wins_over_broker():
    broker = BrokerConfig({"log.retention.ms": "100"})
    c = LogConfig.from_overrides({"retention.ms": "5", "cleanup.policy": "compact"}, broker)
    assert c.retention_ms == 5 and c.compact and not c.delete
    assert c.overrides == {"retention.ms": "5", "cleanup.policy": "compact"}


def test_segment_bytes_minimum_and_internal_escape_hatch():
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({"segment.bytes": "1000"})
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert "segment.bytes" in str(info.value) and "1000" in str(info.value) and "1048576" in str(info.value)
    c = LogConfig.from_overrides({"internal.segment.bytes": "1000"})
    assert c.segment_bytes == 1000 and c.segment_bytes_config == 1 << 30


@pytest.mark.parametrize("key,value,needle", [
    ("cleanup.policy", "shred", "compact, delete"),
    ("min.cleanable.dirty.ratio", "1.5", "no more than 1"),
    ("retention.ms", "-2", "at least -1"),
    ("max.compaction.lag.ms", "0", "at least 1"),
    ("segment.ms", "abc", "64-bit integer"),
    ("retention.ms", "86_400_000", "64-bit integer"),    # Python's int() takes these; Java's
    ("segment.bytes", "\u0661\u0660\u0660", "32-bit integer"),  # parseInt/parseLong do not
    ("max.message.bytes", str(2**31), "32-bit integer"),
    ("preallocate", "yes", "true or false"),
    ("message.timestamp.type", "Whenever", "CreateTime"),
    ("compression.type", "brotli", "zstd"),
    ("compression.gzip.level", "0", "or -1"),
])
def test_invalid_values_name_key_value_and_range(key, value, needle):
    with pytest.raises(InvalidConfigError) as info:
        validate_topic_configs({key: value})
    msg = str(info.value)
    assert key in msg and value in msg and needle in msg
    assert info.value.key == key


def test_unknown_and_null_and_conflicting():
    with pytest.raises(InvalidConfigError, match="Unknown topic config name: retention.days"):
        validate_topic_configs({"retention.days": "1"})
    with pytest.raises(InvalidConfigError, match="Null value"):
        validate_topic_configs({"retention.ms": None})
    with pytest.raises(InvalidConfigError, match="min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_valid_values_parse():
    parsed = validate_topic_configs({"cleanup.policy": "compact, delete", "compression.gzip.level": "-1",
                                     "min.cleanable.dirty.ratio": "0", "retention.bytes": "-5",
                                     "unclean.leader.election.enable": "TRUE"})
    assert parsed["cleanup.policy"] == ["compact", "delete"]
    assert parsed["compression.gzip.level"] == -1 and parsed["retention.bytes"] == -5
    assert parsed["unclean.leader.election.enable"] is True
    assert LogConfig.from_overrides({"cleanup.policy": ""}).cleanup_policy == frozenset()


def test_max_segment_ms_and_jitter():
    c = LogConfig.from_overrides({"cleanup.policy": "compact", "max.compaction.lag.ms": "10", "segment.ms": "100"})
    assert c.max_segment_ms() == 10
    c = LogConfig.from_overrides({"segment.jitter.ms": "50", "segment.ms": "20"})
    for _ in range(50):
        assert 0 <= c.random_segment_jitter() < 20
    assert LogConfig.default().random_segment_jitter() == 0


def test_describe_sources_and_synonyms():
    broker = BrokerConfig({"log.retention.hours": "1"})
    rows = {r.name: r for r in describe({"cleanup.policy": "compact"}, broker)}
    assert "internal.segment.bytes" not in rows
    cp = rows["cleanup.policy"]
    assert cp.value == "compact" and cp.source == SOURCE_DYNAMIC_TOPIC_CONFIG
    assert [s.source for s in cp.synonyms] == [SOURCE_DYNAMIC_TOPIC_CONFIG, SOURCE_DEFAULT_CONFIG]
    rm = rows["retention.ms"]
    assert rm.value == "3600000" and rm.source == SOURCE_STATIC_BROKER_CONFIG
    assert ("log.retention.hours", "1", SOURCE_STATIC_BROKER_CONFIG) in [(s.name, s.value, s.source) for s in rm.synonyms]
    ratio = rows["min.cleanable.dirty.ratio"]
    assert ratio.value == "0.5" and ratio.source == SOURCE_DEFAULT_CONFIG and ratio.is_default
    only = describe({}, None, ["segment.bytes", "nope"])
    assert [r.name for r in only] == ["segment.bytes"] and only[0].value == "1073741824"


def test_every_broker_synonym_is_a_broker_key_or_deliberately_ignored():
    from kompakt.config.broker_config import BROKER_KEYS, _ignored
    for key in TOPIC_KEYS.values():
        for synonym, _factor in key.synonyms:
            assert synonym in BROKER_KEYS or _ignored(synonym), (key.name, synonym)


def test_compression_level_synonyms_reach_topics():
    broker = BrokerConfig({"compression.zstd.level": "9", "compression.type": "zstd"})
    c = LogConfig.from_overrides({}, broker)
    assert c.compression_zstd_level == 9 and c.compression_type == "zstd"


from hypothesis import given, strategies as st  # noqa: E402

from kompakt.config.topic_config import format_value  # noqa: E402


@given(st.data())
def test_every_valid_value_survives_describe_formatting(data):
    """format_value (what DescribeConfigs shows) parses back to the same value for every key."""
    key = data.draw(st.sampled_from(sorted(TOPIC_KEYS.values(), key=lambda k: k.name)))
    if key.choices:
        value = data.draw(st.lists(st.sampled_from(key.choices), min_size=1, max_size=2, unique=True)) \
            if key.type == "list" else data.draw(st.sampled_from(key.choices))
    elif key.type == "bool":
        value = data.draw(st.booleans())
    elif key.type == "double":
        value = data.draw(st.floats(min_value=key.min, max_value=key.max, allow_nan=False))
    elif key.name == "kompakt.tombstone.retention.groups":
        value = data.draw(st.one_of(st.just(["*"]), st.lists(st.sampled_from(["billing", "audit", "g-1"]),
                                                              max_size=3, unique=True)))
    elif key.type == "list":   # the throttled-replica lists: '*' alone, or partition:broker pairs
        value = data.draw(st.one_of(st.just(["*"]), st.lists(st.sampled_from(["0:1", "1:1", "2:1"]), max_size=2)))
    else:
        lo = int(key.min) if key.min is not None else -(2**31 if key.type == "int" else 2**63)
        hi = int(key.max) if key.max is not None else (2**31 - 1 if key.type == "int" else 2**63 - 1)
        value = data.draw(st.integers(lo, hi))
    text = format_value(key, value)
    assert key.parse(text) == value
    assert validate_topic_configs({key.name: text})[key.name] == value
