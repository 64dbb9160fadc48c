"""BrokerConfig.load's layers: Kafka's code defaults, the properties file or the embedded one, env, overrides."""
import logging

import pytest

from kompakt.config.broker_config import BROKER_KEYS, EMBEDDED_PROPERTIES, BrokerConfig, ConfigError, read_properties

DELAY = "group.initial.rebalance.delay.ms"


def test_no_file_runs_on_kafkas_shipped_server_properties():
    # Kafka's code default parks a new group's first join 3 s; its shipped server.properties (and
    # the apache/kafka image) set 0, and that is what a broker started with no file must do.
    assert BROKER_KEYS[DELAY].default == 3000
    assert EMBEDDED_PROPERTIES[DELAY] == "0"
    assert BrokerConfig.load(environ={})[DELAY] == 0


def test_a_properties_file_replaces_the_embedded_layer(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\n")
    cfg = BrokerConfig.load(str(path), environ={})
    assert cfg["num.partitions"] == 3
    assert cfg[DELAY] == 3000          # Kafka's code default, as Kafka does for a key the file omits


def test_environment_and_overrides_sit_above_the_embedded_layer():
    assert BrokerConfig.load(environ={"KOMPAKT_GROUP_INITIAL_REBALANCE_DELAY_MS": "250"})[DELAY] == 250
    assert BrokerConfig.load(overrides=[f"{DELAY}=100"], environ={})[DELAY] == 100


def test_properties_separators_are_javas(tmp_path):
    # java.util.Properties ends a key at '=', ':' or whitespace: a file Kafka reads parses the same
    path = tmp_path / "server.properties"
    path.write_text("num.partitions 3\nlog.dirs:/data\nlog.cleaner.threads = 2\n"
                    "sasl.jaas.config=a required \\\n    user_alice=\"x=y\";\nstray line of text\n")
    props = read_properties(str(path))
    assert props == {"num.partitions": "3", "log.dirs": "/data", "log.cleaner.threads": "2",
                     "sasl.jaas.config": 'a required user_alice="x=y";', "stray": "line of text"}


def test_an_unknown_key_is_a_warning_without_its_value(caplog):
    caplog.set_level(logging.INFO, logger="kompakt.config.broker_config")
    cfg = BrokerConfig.load(overrides=["log.retention.hour=1", "controller.quorum.voters=secret-ish"], environ={})
    assert cfg.ignored == ["log.retention.hour", "controller.quorum.voters"]
    levels = {r.getMessage().split()[2]: r.levelno for r in caplog.records}
    assert levels == {"log.retention.hour": logging.WARNING, "controller.quorum.voters": logging.INFO}
    assert "secret-ish" not in caplog.text


def test_a_binary_or_latin1_properties_file(tmp_path):
    binary = tmp_path / "server.jks"
    binary.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(ConfigError, match=f"{binary} is not a properties file \\(it holds binary data\\)"):
        BrokerConfig.load(str(binary), environ={})
    # Latin-1 is what java.util.Properties reads from a stream: a comment with an e-acute is fine
    latin1 = tmp_path / "server.properties"
    latin1.write_bytes("# r\u00e9glages\r\nnum.partitions=3\r\n".encode("latin-1"))
    assert BrokerConfig.load(str(latin1), environ={})["num.partitions"] == 3


def test_a_bad_value_names_the_layer_that_set_it(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=three\n")
    with pytest.raises(ConfigError, match=f"num.partitions.* \\(set by {path}\\)$"):
        BrokerConfig.load(str(path), environ={})
    with pytest.raises(ConfigError, match="metrics.port.* \\(set by \\$KOMPAKT_METRICS_PORT\\)$"):
        BrokerConfig.load(environ={"KOMPAKT_METRICS_PORT": "abc"})
    with pytest.raises(ConfigError, match="metrics.port.* \\(set by --override\\)$"):
        BrokerConfig.load(overrides=["metrics.port=abc"], environ={"KOMPAKT_METRICS_PORT": "1"})


def test_the_projects_own_variables_are_not_config_keys(caplog):
    # `eval "$(scripts/container-base.sh)"` exports KOMPAKT_BASE_IMAGE into the operator's shell
    caplog.set_level(logging.INFO, logger="kompakt.config.broker_config")
    cfg = BrokerConfig.load(environ={"KOMPAKT_BASE_IMAGE": "localhost/kompakt-base:bookworm",
                                     "KOMPAKT_ADMIN_TOKEN": "t", "KOMPAKT_LOG_CLEANER_THREADS": "2"})
    assert cfg.ignored == [] and caplog.records == [] and cfg["log.cleaner.threads"] == 2
