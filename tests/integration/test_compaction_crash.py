"""Crash safety of compaction: SIGKILL the broker at each step of the swap, and while a worker is
mid-clean; after restart nothing is lost or duplicated and cleaning resumes.

The swap steps are named in kompakt/cleaner/log_cleaner.py (env TEST_KOMPAKT_CRASH_AT makes
the broker kill itself there); the renames inside Log.replace_segments are recovered by the storage
loader and covered by its own tests.
"""
from __future__ import annotations

import json
import os
import urllib.request

import pytest

from compaction_support import admin_get, check_against_model, create_topic, produce, read_partition
from kompakt.testing.poll import wait_until

SLOW_START = {"log.cleaner.backoff.ms": "3600000", "log.cleaner.dedupe.buffer.size": str(24 * 100_000)}
FAST = {"log.cleaner.backoff.ms": "100", "log.cleaner.dedupe.buffer.size": str(24 * 100_000)}
TOPIC_CONFIG = {"cleanup.policy": "compact", "internal.segment.bytes": "3000", "min.cleanable.dirty.ratio": "0.01"}


def compact_now(b, topic):
    req = urllib.request.Request(f"{b.metrics_url}/v1/partitions/{topic}/0/compact?wait=0", method="POST", data=b"")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except OSError:
        return None   # the broker may already be dead


def wait_dead(b, timeout_s=120):
    wait_until(lambda: b.proc.poll() is not None, "the broker to kill itself", timeout=timeout_s)


def checkpoint_of(log_dir, topic):
    path = os.path.join(log_dir, "cleaner-offset-checkpoint")
    try:
        lines = open(path).read().split("\n")[2:]
    except FileNotFoundError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return None


def restart_and_check(b, produced, monkeypatch, look_first=False):
    monkeypatch.delenv("TEST_KOMPAKT_CRASH_AT", raising=False)
    d = os.path.join(b.log_dir, "crash-0")
    if look_first:
        # start once without a cleaner: the loader alone must have removed the partial output
        b.config["log.cleaner.enable"] = "false"
        b.start()
        assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap"))]
        check_against_model(produced, read_partition(b.bootstrap, "crash"))
        b.stop()
        del b.config["log.cleaner.enable"]
    b.config.update(FAST)
    b.start()
    got = read_partition(b.bootstrap, "crash")
    check_against_model(produced, got)
    # cleaning resumes and reaches the active segment
    active_base = max(int(n[:20]) for n in os.listdir(d) if n.endswith(".log"))
    wait_until(lambda: (checkpoint_of(b.log_dir, "crash") or 0) >= active_base, "cleaning to resume")
    got = read_partition(b.bootstrap, "crash")
    check_against_model(produced, got)
    keys = [k for o, k, _ in got if o < active_base]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("point", ["before_swap", "after_first_group", "before_checkpoint", "after_checkpoint"])
def test_sigkill_at_each_swap_step(start_broker, monkeypatch, point):
    monkeypatch.setenv("TEST_KOMPAKT_CRASH_AT", point)
    b = start_broker(config=SLOW_START)
    create_topic(b.bootstrap, "crash", TOPIC_CONFIG)
    produced = produce(b.bootstrap, "crash", [(b"k%d" % (i % 40), b"value-%d" % i) for i in range(400)],
                       batch_size=1500)
    compact_now(b, "crash")
    wait_dead(b)
    assert f"test hook TEST_KOMPAKT_CRASH_AT={point}" in b.log_text()
    cp = checkpoint_of(b.log_dir, "crash")
    if point == "after_checkpoint":
        assert cp is not None and cp > 0
    else:
        assert cp is None
    restart_and_check(b, produced, monkeypatch)


def test_sigkill_while_a_worker_is_mid_clean(start_broker, monkeypatch):
    b = start_broker(config=dict(SLOW_START, **{"log.cleaner.io.max.bytes.per.second": "40000"}))
    create_topic(b.bootstrap, "crash", TOPIC_CONFIG)
    produced = produce(b.bootstrap, "crash", [(b"k%d" % (i % 40), b"v" * 200 + b"%d" % i) for i in range(400)],
                       batch_size=1500)
    started = compact_now(b, "crash")
    assert started is not None, "compact-now did not answer"
    d = os.path.join(b.log_dir, "crash-0")
    seen = {}

    def worker_cleaning():
        st = seen["status"] = admin_get(b, "/v1/cleaner")
        seen["files"] = sorted(os.listdir(d))
        busy = [w for w in st.get("workers", []) if w.get("cleaning") and w.get("pid")]
        return busy and any(n.endswith(".cleaned") for n in seen["files"]) and busy[0]["pid"]
    try:
        worker_pid = wait_until(worker_cleaning, "a worker writing .cleaned output")
    except AssertionError as exc:   # say what the cleaner was doing instead (this failed once under load)
        raise AssertionError(f"{exc}; compact-now answered {started}; last cleaner status {seen.get('status')}; "
                             f"files {seen.get('files')}; broker log tail:\n{b.log_text()[-3000:]}") from None
    b.kill()

    def gone():
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            return True
        return False
    wait_until(gone, "the orphaned worker to die with its broker", timeout=30)
    assert [n for n in os.listdir(d) if n.endswith(".cleaned")]     # the partial output it left
    restart_and_check(b, produced, monkeypatch, look_first=True)
