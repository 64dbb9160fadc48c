"""A power cut at every step of the storage's multi-file operations, and Kafka's promises after it.

Each flow runs in a child process with the page-cache model on (TEST_KOMPAKT_POWER_JOURNAL) and
TEST_KOMPAKT_CRASH_AT=file_op:n, for n = 1, 2, ... until the flow finishes without reaching the
n-th file operation: so the cut falls before every sync, rename and unlink the flow makes. After
each cut the journal is applied (power_cut.restore) and a LogManager starts on what is left.
What a flow acknowledges (prints "ack ...") was promised durable; the checks hold it to that.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from kompakt.config.broker_config import BrokerConfig
from kompakt.storage import TopicPartition, power_cut
from kompakt.storage.log_manager import LogManager

MAX_STEPS = 80

# The child: imports once, then forks one process per cut (a fork costs milliseconds, an
# interpreter start a second): each fork arms the seams for its run and runs the flow.
ZYGOTE = textwrap.dedent("""
    import json, os, sys
    from kompakt.config.broker_config import BrokerConfig
    from kompakt.protocol import records as R
    from kompakt.storage import TopicPartition, faults, files, power_cut
    from kompakt.storage.log_manager import LogManager
    flow = compile(open(sys.argv[1]).read(), "flow", "exec")
    for line in sys.stdin:
        n, d, journal = line.split()
        pid = os.fork()
        if pid == 0:
            os.environ[power_cut.JOURNAL_ENV] = journal
            faults._crash, faults._crash_hits = ("file_op", int(n)), 0
            files._power = power_cut.Recorder(journal)
            m = LogManager(BrokerConfig({"log.dirs": d, "log.segment.bytes": "400",
                                         "log.index.size.max.bytes": "4096", "log.initial.task.delay.ms": "0"}))
            m.startup()
            def ack(**kw):
                print("ack", json.dumps(kw), flush=True)
            def append(topic, i, pid=-1, seq=-1):
                lg = m.get_log(TopicPartition(topic, 0))
                info = lg.append_as_leader(R.build_batch([(b"k%d" % i, b"value-%d" % i)], producer_id=pid,
                                                         producer_epoch=0 if pid >= 0 else -1, base_sequence=seq))
                lg.flush()                              # synced before it is acknowledged
                return lg, info
            exec(flow)
            print("done", flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("exit", os.waitstatus_to_exitcode(status), flush=True)
""")

FLOWS = {
    # appends that roll segments (a producer snapshot at each roll), each synced then acknowledged
    "append_roll": """
        for i in range(12):
            lg, info = append("t", i, pid=7, seq=i)
            ack(offset=lg.log_end_offset - 1, key="k%d" % i)
        m.checkpoint_recovery_offsets()
        m.checkpoint_log_start_offsets()
    """,
    # retention: the oldest segments go; once acknowledged the log start never moves back
    "delete_segments": """
        lg = m.get_log(TopicPartition("t", 0))
        segs = lg.segments[:2]
        lg.delete_segments(segs, "test")
        ack(log_start=lg.log_start_offset)
        m.checkpoint_log_start_offsets()
        m.run_due_segment_deletions(1 << 62)
    """,
    "create_topic": """
        m.create_topic("new", 3, {"cleanup.policy": "compact"})
        ack(created="new")
        append("new", 0)
        ack(offset=0, topic="new")
    """,
    # a JSON state file (ACLs, SCRAM, dynamic configs, quotas, group configs: store_file.write_json)
    # rewritten twice: after a cut it is the old or the new one, never torn, never older than acked
    "state_file": """
        from kompakt.broker.metadata.store_file import write_json
        for v in (1, 2):
            write_json(d + "/kompakt-acls.json", {"version": v, "acls": ["a"] * v})
            ack(version=v)
    """,
    # deleted topics stay deleted; "fresh" dies in the run that made it (its partition.metadata
    # never synced: start-up must not adopt its dirs back as a topic)
    "delete_topic": """
        m.create_topic("fresh", 2, {"cleanup.policy": "compact"})
        append("fresh", 0)
        m.delete_topic("fresh")
        ack(deleted="fresh")
        m.delete_topic("t")
        ack(deleted="t")
        m.delete_logs(1 << 62)
    """,
}


def setup_log_dir(d):
    """A log dir with topic t (3 segments of keyed records), shut down cleanly."""
    m = LogManager(BrokerConfig({"log.dirs": d, "log.segment.bytes": "400", "log.index.size.max.bytes": "4096",
                                 "log.initial.task.delay.ms": "0"}))
    m.startup()
    m.create_topic("t", 1)
    from kompakt.protocol import records as R
    lg = m.get_log(TopicPartition("t", 0))
    for i in range(10):
        lg.append_as_leader(R.build_batch([(b"base%d" % i, b"x" * 60)]))
    m.shutdown()


class Flow:
    """One zygote per flow; `cut_at(n)` runs the flow on a fresh copy of the template, cut before
    its n-th file operation (the page-cache model applied), and returns (dir, acks, finished)."""

    def __init__(self, tmp_path, flow, template):
        self.tmp_path, self.flow, self.template = tmp_path, flow, template
        (tmp_path / "flow.py").write_text(textwrap.dedent(FLOWS[flow]))
        (tmp_path / "zygote.py").write_text(ZYGOTE)
        self.proc = subprocess.Popen([sys.executable, str(tmp_path / "zygote.py"), str(tmp_path / "flow.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def cut_at(self, n):
        d = str(self.tmp_path / f"{n}" / "logs")
        shutil.copytree(self.template, d)
        journal = str(self.tmp_path / f"{n}" / "journal")
        power_cut.begin(journal, [d])
        self.proc.stdin.write(f"{n} {d} {journal}\n")
        self.proc.stdin.flush()
        lines = []
        while True:
            line = self.proc.stdout.readline()
            assert line, "the zygote died"
            if line.startswith("exit "):
                break
            lines.append(line)
        code = int(line.split()[1])
        acks = [json.loads(x[4:]) for x in lines if x.startswith("ack ")]
        done = "done\n" in lines
        assert (done and code == 0) or code == -9, (n, code, lines)
        if not done:
            power_cut.restore(journal)
        return d, acks, done

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


def restart(d):
    m = LogManager(BrokerConfig({"log.dirs": d, "log.segment.bytes": "400", "log.index.size.max.bytes": "4096",
                                 "log.initial.task.delay.ms": "0"}))
    m.startup()        # no manual step: must start on whatever the cut left
    return m


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("template") / "logs")
    setup_log_dir(d)
    return d


@pytest.fixture
def scratch(tmp_path):
    """Where the flows run: tmpfs when there is one (the model decides what a cut keeps, so real
    fsyncs only cost time: about 100 runs of a few dozen syncs each)."""
    shm = "/dev/shm"
    if not (os.path.isdir(shm) and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    import tempfile
    from pathlib import Path
    d = Path(tempfile.mkdtemp(prefix="kompakt-power-", dir=shm))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def check_common(m):
    """Promises every cut keeps: one segment list without holes, readable state files."""
    for tp, lg in m.all_logs().items():
        segs = lg.segments
        assert segs and segs[0].base_offset <= lg.log_start_offset <= lg.log_end_offset, (tp, segs)
        for a, b in zip(segs, segs[1:]):
            assert a.base_offset < b.base_offset
        assert lg.topic_id is not None


def key_at(lg, offset):
    from kompakt.protocol import records as R
    data = bytes(lg.read(offset, 1 << 16).records)
    for pos, hdr in R.iter_batches(data):
        for i, rec in enumerate(R.decode_records(data, pos, hdr)):
            if hdr.base_offset + rec.offset_delta == offset:
                return rec.key
    return None


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_a_cut_at_every_step(scratch, template, flow):
    seen_acks = 0
    runner = Flow(scratch, flow, template)
    for n in range(1, MAX_STEPS + 1):
        d, acks, done = runner.cut_at(n)
        m = restart(d)
        try:
            check_common(m)
            t = m.get_log(TopicPartition("t", 0))
            if flow == "append_roll":
                assert t is not None
                for a in acks:                               # nothing acknowledged is lost ...
                    assert t.log_end_offset > a["offset"], (n, a, t.log_end_offset)
                    assert key_at(t, a["offset"]) == a["key"].encode(), (n, a)
                # ... and offsets are never reused for different records: the next append goes on
                nxt = t.log_end_offset
                from kompakt.protocol import records as R
                t.append_as_leader(R.build_batch([(b"after", b"cut")]))
                assert key_at(t, nxt) == b"after"
            elif flow == "delete_segments":
                for a in acks:
                    assert t.log_start_offset >= a["log_start"], (n, a, t.log_start_offset)
            elif flow == "create_topic":
                new = [tp for tp in m.all_logs() if tp.topic == "new"]
                assert len(new) in (0, 3), (n, new)                # all partitions or none
                if acks:
                    assert "new" in m.topics and m.topics["new"].configs == {"cleanup.policy": "compact"}
                if len(acks) > 1:
                    assert m.get_log(TopicPartition("new", 0)).log_end_offset == 1
            elif flow == "state_file":
                from kompakt.broker.metadata.store_file import read_json
                body = read_json(os.path.join(d, "kompakt-acls.json"))   # raises on a torn file
                if acks:
                    assert body is not None and body["version"] >= acks[-1]["version"], (n, body)
                if body is not None:
                    assert body["acls"] == ["a"] * body["version"]
            elif flow == "delete_topic":
                for a in acks:
                    gone = a["deleted"]
                    assert gone not in m.topics, (n, a, m.repairs)
                    assert not [tp for tp in m.all_logs() if tp.topic == gone], (n, a)
                if "t" in m.topics:
                    assert t.log_end_offset == 10             # not deleted: whole
                if "fresh" in m.topics:                       # not deleted: as created, not adopted
                    assert m.topics["fresh"].configs == {"cleanup.policy": "compact"}, (n, m.repairs)
        finally:
            m.shutdown()
        seen_acks = max(seen_acks, len(acks))
        shutil.rmtree(os.path.dirname(d))
        if done:
            break
    else:
        pytest.fail(f"{flow} did not finish within {MAX_STEPS} file operations")
    runner.close()
    assert n > 2 and seen_acks > 0, (n, seen_acks)
