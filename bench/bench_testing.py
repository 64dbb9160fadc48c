"""How fast kompakt.testing gives a test a broker: from asking to the first Metadata answer.

    python bench/bench_testing.py [--runs 5]

Three figures, medians of --runs:
  * cold in-process: a fresh Python process imports kompakt.testing, starts an in-process broker
    and gets a Metadata answer over TCP (what the first `kompakt_broker` of a session costs,
    imports included);
  * warm in-process: the next brokers of the same process (what each further function-scoped
    `kompakt_broker` costs);
  * subprocess: `start_broker(mode="subprocess")` (a `kompakt serve` process per broker).
Each broker gets a fresh temporary log dir; stop time is reported beside. Results to stdout;
copy them into bench/RESULTS.md with the date and the machine.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Metadata v1 with no topics: size, api key 3, version 1, correlation id 1, client id "b", topics []
METADATA_V1 = struct.pack(">ihhihsi", 2 + 2 + 4 + 2 + 1 + 4, 3, 1, 1, 1, b"b", 0)


def first_metadata(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(METADATA_V1)
        head = s.recv(8)
        assert len(head) == 8 and struct.unpack(">ii", head)[1] == 1, head


COLD = """
import sys, time, tempfile
t0 = time.perf_counter()
from kompakt.testing import start_broker
sys.path.insert(0, {bench!r})
from bench_testing import first_metadata
b = start_broker(tempfile.mkdtemp(prefix="kompakt-bench-testing-"))
first_metadata(b.port)
t1 = time.perf_counter()
b.stop()
print(t1 - t0, time.perf_counter() - t1)
"""


def cold(runs: int) -> tuple[list[float], list[float]]:
    starts, stops = [], []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", COLD.format(bench=str(ROOT / "bench"))], env=env,
                             capture_output=True, text=True, timeout=120, check=True).stdout.split()
        starts.append(float(out[-2]))
        stops.append(float(out[-1]))
    return starts, stops


def warm(runs: int, mode: str) -> tuple[list[float], list[float]]:
    from kompakt.testing import start_broker
    start_broker(tempfile.mkdtemp(prefix="kompakt-bench-testing-")).stop()   # imports, first compile
    starts, stops = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        b = start_broker(tempfile.mkdtemp(prefix="kompakt-bench-testing-"), mode=mode)
        first_metadata(b.port)
        t1 = time.perf_counter()
        b.stop()
        starts.append(t1 - t0)
        stops.append(time.perf_counter() - t1)
    return starts, stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    rows = [("in-process, cold (fresh Python, imports included)", *cold(args.runs)),
            ("in-process, warm (next broker in the same process)", *warm(args.runs, "inprocess")),
            ("subprocess (`kompakt serve`)", *warm(args.runs, "subprocess"))]
    print(f"start to first Metadata answer, median of {args.runs} (min-max); stop")
    for name, starts, stops in rows:
        print(f"  {name:52s} {statistics.median(starts) * 1000:7.0f} ms ({min(starts) * 1000:.0f}-"
              f"{max(starts) * 1000:.0f})   stop {statistics.median(stops) * 1000:5.0f} ms")


if __name__ == "__main__":
    main()
