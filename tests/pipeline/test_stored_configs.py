"""The offline tools load a topic's stored configs as the broker does (LogConfig.from_stored): a
value today's rules refuse as a set (min.compaction.lag.ms above the topic's own
max.compaction.lag.ms, cleanup.policy with an item twice, both accepted by older versions) is
taken as stored, never a failed tool. `kompakt pipeline compact`, `kompakt compact-adopt` and
`kompakt pipeline whatif` over a real log dir written by the broker's LogManager."""
from __future__ import annotations

import json
import os

import pytest

from kompakt import cli
from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import records as R
from kompakt.storage.topic_store import TopicStore
from tests.cleaner.conftest import Clock

STORED = {"cleanup.policy": "compact,compact", "min.compaction.lag.ms": "500", "max.compaction.lag.ms": "100",
          "internal.segment.bytes": "500"}


def _log_dir_with_stored_configs(d: str) -> None:
    from kompakt.storage.log_manager import LogManager

    clock = Clock()
    m = LogManager(BrokerConfig.load(overrides=[f"log.dirs={d}", "log.cleaner.backoff.ms=60000"], environ={}),
                   time=clock)
    m.startup()
    m.create_topic("x", 1, {"cleanup.policy": "compact", "internal.segment.bytes": "500"})
    lg = m.get_log(("x", 0))
    for i in range(30):
        lg.append(R.build_batch([(b"k%d" % (i % 3), b"v%d" % i, [], clock.ms)], base_offset=lg.log_end_offset))
    m.shutdown()
    store = TopicStore(d)
    topics, deleted = store.load_strict()
    topics["x"].configs = dict(STORED)          # as an older version stored them
    store.save(topics, deleted)


def test_whatif_settings_take_stored_configs_as_stored():
    """The admin API's whatif and the CLI's check before Spark share settings_pair."""
    from kompakt.pipeline.jobs.whatif import settings_pair

    current, proposed = settings_pair(dict(STORED), {"min.cleanable.dirty.ratio": "0.01"})
    assert (current.config.min_compaction_lag_ms, current.config.max_compaction_lag_ms) == (500, 100)
    assert current.config.cleanup_policy == {"compact"}
    assert proposed.config.min_cleanable_dirty_ratio == 0.01
    with pytest.raises(ValueError, match="min.cleanable.dirty.ratio"):
        settings_pair(dict(STORED), {"min.cleanable.dirty.ratio": "2"})   # a new value: today's rules


@pytest.mark.spark
def test_offline_tools_load_stored_configs_as_the_broker_does(spark, tmp_path, capsys):
    d, staging = str(tmp_path / "d"), str(tmp_path / "s")
    _log_dir_with_stored_configs(d)
    assert cli.main(["pipeline", "compact", d, "--topic", "x", "--partition", "0", "--output", staging]) == 0
    assert cli.main(["compact-adopt", d, staging, "--json"]) == 0
    adopted = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert adopted["records"] == 3
    report = str(tmp_path / "whatif.json")
    assert cli.main(["pipeline", "whatif", d, "--topic", "x", "--set", "min.cleanable.dirty.ratio=0.01",
                     "--output", report]) == 0
    with open(report) as f:
        assert [r["partition"] for r in json.load(f)] == [0]
    assert os.path.exists(os.path.join(d, "x-0"))
