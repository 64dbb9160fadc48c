"""kcat (librdkafka's command-line client) against a real broker: metadata, produce, consume.

kcat is the Debian package `kcat` (scripts/test.sh installs it); without it these tests skip.
One broker serves the whole story (each broker start costs seconds of the suite's budget).
"""
import json
import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install kcat)")
TIMEOUT = 60
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def kcat(broker, *args, stdin=None) -> str:
    # fetch.wait.max.ms: report end-of-partition (-e) without waiting out a long poll
    proc = subprocess.run([KCAT, "-b", broker.bootstrap, "-X", "socket.timeout.ms=10000",
                           "-X", "fetch.wait.max.ms=10", *args],
                          input=stdin, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"kcat {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


def test_kcat_metadata_produce_consume(broker):
    # produce: 10 keyed records with two headers per codec, appended to partition 0 of one topic
    for n, codec in enumerate(CODECS):
        lines = "".join(f"key{i}:{codec} {i}\n" for i in range(10))
        kcat(broker, "-P", "-t", "kc", "-p", "0", "-K:", "-z", codec, "-H", f"codec={codec}", "-H", "n=1",
             stdin=lines)

    out = kcat(broker, "-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%k|%s|%o|%p|%h\n")
    rows = [line.split("|") for line in out.splitlines()]
    expected = [[f"key{i}", f"{codec} {i}", str(10 * n + i), "0", f"codec={codec},n=1"]
                for n, codec in enumerate(CODECS) for i in range(10)]
    assert rows == expected

    # from an offset in the middle
    out = kcat(broker, "-C", "-t", "kc", "-o", "45", "-e", "-f", "%o\n")
    assert out.split() == [str(i) for i in range(45, 50)]

    # metadata (-L): this broker leads the auto-created topic's only partition
    meta = json.loads(kcat(broker, "-L", "-J"))
    (node,) = meta["brokers"]
    assert node["name"] == f"127.0.0.1:{broker.port}"
    topics = {t["topic"]: t for t in meta["topics"]}
    (partition,) = topics["kc"]["partitions"]
    assert partition["leader"] == node["id"]
    assert partition["replicas"] == [{"id": node["id"]}] and partition["isrs"] == [{"id": node["id"]}]
    assert 'topic "kc" with 1 partitions' in kcat(broker, "-L", "-t", "kc")

    # an idempotent kcat producer (InitProducerId + sequence numbers)
    lines = "".join(f"k{i % 3}:{i}\n" for i in range(50))
    kcat(broker, "-P", "-t", "kc-idem", "-p", "0", "-K:", "-X", "enable.idempotence=true", stdin=lines)
    out = kcat(broker, "-C", "-t", "kc-idem", "-o", "beginning", "-e", "-f", "%s\n")
    assert out.split() == [str(i) for i in range(50)]
