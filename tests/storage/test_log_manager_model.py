"""LogManager topic lifecycle against a model, with clean restarts and crashes (hypothesis).

Operations: create, delete, grow, alter configs, append, clean restart, crash (no shutdown:
locks dropped, nothing flushed or checkpointed), and the delayed deletion of `-delete` dirs. After
every step the manager's topics, ids, configs, partition logs and the partition dirs on disk must
match the model exactly, and every appended record count must be there.
"""
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kompakt.config.broker_config import BrokerConfig
from kompakt.protocol import records as R
from kompakt.protocol.errors import KafkaError
from kompakt.storage.log_manager import LogManager, parse_partition_dir

NAMES = st.sampled_from(["a", "b.c", "d-e"])
CONFIGS = st.sampled_from([{}, {"cleanup.policy": "compact"}, {"retention.ms": "5000", "flush.messages": "1"}])


class LogManagerModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="lm-model-")
        self.dirs = [os.path.join(self.root, "d1"), os.path.join(self.root, "d2")]
        self.config = BrokerConfig({"log.dirs": ",".join(self.dirs), "log.index.size.max.bytes": "4096",
                                    "log.segment.delete.delay.ms": "0"})
        self.model: dict[str, dict] = {}  # name -> {"partitions", "configs", "id", "records": {p: n}}
        self.m = self._start()

    def _start(self) -> LogManager:
        m = LogManager(self.config)
        m.startup()
        m.delete_logs(m._now() + 1)  # delayed deletion of `-delete` dirs (delay 0)
        return m

    def teardown(self):
        try:
            self.m.shutdown()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @rule(name=NAMES, partitions=st.integers(1, 3), configs=CONFIGS)
    def create(self, name, partitions, configs):
        if name in self.model:
            try:
                self.m.create_topic(name, partitions, configs)
                raise AssertionError("created a topic twice")
            except KafkaError:
                return
        meta = self.m.create_topic(name, partitions, configs)
        self.model[name] = {"partitions": partitions, "configs": dict(configs), "id": meta.topic_id,
                            "records": {p: 0 for p in range(partitions)}}

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete(self, data):
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.m.delete_topic(name)
        del self.model[name]

    @precondition(lambda self: self.model)
    @rule(data=st.data(), more=st.integers(1, 2))
    def grow(self, data, more):
        name = data.draw(st.sampled_from(sorted(self.model)))
        entry = self.model[name]
        self.m.create_partitions(name, entry["partitions"] + more)
        for p in range(entry["partitions"], entry["partitions"] + more):
            entry["records"][p] = 0
        entry["partitions"] += more

    @precondition(lambda self: self.model)
    @rule(data=st.data(), configs=CONFIGS)
    def alter(self, data, configs):
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.m.alter_topic_config(name, configs)
        self.model[name]["configs"] = dict(configs)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), n=st.integers(1, 3))
    def append(self, data, n):
        name = data.draw(st.sampled_from(sorted(self.model)))
        p = data.draw(st.integers(0, self.model[name]["partitions"] - 1))
        for i in range(n):
            self.m.append_as_leader((name, p), R.build_batch([(b"k%d" % i, b"v")]))
        self.model[name]["records"][p] += n

    @rule()
    def clean_restart(self):
        self.m.shutdown()
        self.m = self._start()

    @rule()
    def crash_restart(self):
        self.m.crash()
        self.m = self._start()

    @invariant()
    def matches_the_model(self):
        topics = self.m.topics
        assert sorted(topics) == sorted(self.model)
        for name, entry in self.model.items():
            meta = topics[name]
            assert (meta.partitions, meta.configs, meta.topic_id) == \
                (entry["partitions"], entry["configs"], entry["id"])
            for p in range(entry["partitions"]):
                plog = self.m.get_log((name, p))
                assert plog is not None and plog.log_end_offset == entry["records"][p]
                assert plog.config.compact == (entry["configs"].get("cleanup.policy") == "compact")
        on_disk = set()
        for d in self.dirs:
            for entry in os.listdir(d):
                tp = parse_partition_dir(entry)
                if tp is not None and os.path.isdir(os.path.join(d, entry)):
                    assert tp not in on_disk, f"{tp} in two dirs"
                    on_disk.add(tp)
        assert on_disk == {(n, p) for n, e in self.model.items() for p in range(e["partitions"])}
        assert set(self.m.all_logs()) == on_disk


TestLogManagerModel = LogManagerModel.TestCase
TestLogManagerModel.settings = settings(max_examples=10, stateful_step_count=12, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
