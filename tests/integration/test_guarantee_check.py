"""The live compaction-guarantee check end to end: a broker whose cleaner is deliberately broken
through its test seam (TEST_KOMPAKT_CLEANER_BREAK=drop_last_batch: a clean loses the newest batch
it wrote) refuses the swap, counts the violation, logs it loudly and marks the partition
uncleanable; consumers still read every record that was produced."""
from __future__ import annotations

import json
import os
import re
import urllib.request

from compaction_support import admin_get, check_against_model, create_topic, produce, read_partition

CONFIG = {"log.cleaner.backoff.ms": "600000", "kompakt.cleaner.guarantee.check.ratio": "1.0",
          "log.cleaner.dedupe.buffer.size": str(24 * 100_000)}


def test_a_broken_clean_is_refused_before_the_swap(start_broker, monkeypatch):
    monkeypatch.setenv("TEST_KOMPAKT_CLEANER_BREAK", "drop_last_batch")
    b = start_broker(config=CONFIG)
    create_topic(b.bootstrap, "ledger", {"cleanup.policy": "compact", "internal.segment.bytes": "3000"})
    produced = produce(b.bootstrap, "ledger", [(b"k%d" % (i % 20), b"value-%d" % i) for i in range(300)],
                       batch_size=1500)
    before = sorted(n for n in os.listdir(f"{b.log_dir}/ledger-0") if n.endswith(".log"))
    req = urllib.request.Request(f"{b.metrics_url}/v1/partitions/ledger/0/compact?wait=60", method="POST")
    with urllib.request.urlopen(req, timeout=90) as r:
        body = json.loads(r.read())
    stats = body["stats"]
    assert stats["cleaned"] is False and "compaction guarantee violated" in stats["reason"]
    kinds = {v["kind"] for v in stats["guarantee"]["violations"]}
    assert "latest" in kinds
    # nothing was swapped in: same segments, every record still there
    after = sorted(n for n in os.listdir(f"{b.log_dir}/ledger-0") if n.endswith(".log"))
    assert after == before
    got = read_partition(b.bootstrap, "ledger")
    check_against_model(produced, got)
    assert len(got) == len(produced)
    view = admin_get(b, "/v1/partitions/ledger/0")["cleaner"]
    assert view["uncleanable"] and "compaction guarantee violated" in view["uncleanable_reason"]
    assert view["last_guarantee_check"]["ok"] is False
    metrics = urllib.request.urlopen(f"{b.metrics_url}/metrics", timeout=10).read().decode()
    m = re.search(r'^kompakt_compaction_guarantee_violations_total\{topic="ledger"\} (\S+)$', metrics, re.M)
    assert m and float(m.group(1)) >= 1
    assert re.search(r"^kompakt_compaction_guarantee_checks_total (\S+)$", metrics, re.M)
    assert re.search(r'^kompakt_cleaner_partition_uncleanable\{[^}]*topic="ledger"[^}]*\} 1\.0$', metrics, re.M)
    assert re.search(r"ERROR.*COMPACTION GUARANTEE VIOLATED in the clean of ledger-0", b.log_text())
