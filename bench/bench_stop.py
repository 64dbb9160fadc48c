"""Clean stop at many partitions, alone: bench_scale.py's set-up, then SIGTERM, a few rounds.

    python bench/bench_stop.py [--partitions 10000] [--records 100000] [--rounds 3]

Each round: a fresh `kompakt serve` (bench_scale.Broker), one topic of P partitions, `--records`
records of 100 B spread round-robin over them by confluent-kafka (so every partition has unflushed
data and a producer snapshot to write), then SIGTERM. Prints the seconds from the signal to the
process's exit and the broker's own figure for LogManager.shutdown (its "shut down N logs cleanly
in X s" line), and the medians. bench_scale.py measures the same stop among much else; this one
takes a minute a round where that takes several, for comparing builds (run each, alternating).
Numbers go to bench/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ["KLOG"] = "INFO"            # bench_scale.Broker's log level: the shutdown line is INFO

from bench_scale import Broker, create_topic, produce_spread  # noqa: E402

SHUTDOWN_LINE = re.compile(r"shut down (\d+) logs cleanly in ([0-9.]+) s")


def one_round(partitions: int, records: int) -> tuple[float, float | None]:
    b = Broker()
    try:
        b.start()
        create_topic(b.bootstrap, "stop", partitions)
        produce_spread(b.bootstrap, "stop", partitions, records)
        time.sleep(1.0)                # the producer's last acknowledgements, then a quiet broker
        stop_s = b.stop()
        found = SHUTDOWN_LINE.findall(Path(b.dir, "broker.log").read_text())
        return stop_s, float(found[-1][1]) if found else None
    finally:
        b.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    stops, shutdowns = [], []
    for r in range(1, args.rounds + 1):
        stop_s, shutdown_s = one_round(args.partitions, args.records)
        stops.append(stop_s)
        if shutdown_s is not None:
            shutdowns.append(shutdown_s)
        print(f"round {r}: clean stop {stop_s:.2f} s (LogManager.shutdown "
              f"{'?' if shutdown_s is None else f'{shutdown_s:.2f}'} s), load average {os.getloadavg()[0]:.1f}",
              flush=True)
    print(f"{args.partitions} partitions: clean stop median {statistics.median(stops):.2f} s"
          + (f", LogManager.shutdown median {statistics.median(shutdowns):.2f} s" if shutdowns else ""))


if __name__ == "__main__":
    main()
