"""Coverage-guided fuzzing of every parser of untrusted input (atheris), for a set number of inputs.

    python bench/bench_fuzz.py [--inputs 1000000] [--targets frames,records,...] [--out DIR]

The targets are in bench/fuzz_targets.py (framing and every served API/version, record batches in
every codec and the produce validation, the cleaner's compiled and Python seams side by side,
__consumer_offsets records, checkpoint/topic-metadata/snapshot files, the loader over a partition
directory of fuzzed files). `--inputs` is shared among the targets by weight (the slow ones get
fewer); each target runs in a process of its own (atheris takes the process over) with Kompakt's
modules instrumented for coverage, starting from a few valid seeds, with libFuzzer's -timeout=10 s
per input (a hang is a finding) and -rss_limit_mb=2048. Prints per target: inputs, seconds, crashes;
a crash leaves its input in DIR/crashes/<target>/ (add it to tests/fuzz/regressions/<target>/ once
fixed). Exit status 1 if anything crashed.

`python bench/bench_fuzz.py --run-one TARGET --runs N --corpus DIR --artifacts DIR` is the worker.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WEIGHTS = {"frames": 0.3, "records": 0.25, "cleaner": 0.15, "offsets": 0.15, "files": 0.1, "loader": 0.05}


def run_one(target: str, runs: int, corpus: str, artifacts: str, max_len: int = 4096) -> None:
    import atheris
    sys.path.insert(0, HERE)
    logging.disable(logging.CRITICAL)        # the parsers log what they repair: not needed here
    with atheris.instrument_imports(include=["kompakt", "fuzz_targets"]):
        import fuzz_targets
    fn = fuzz_targets.TARGETS[target]
    os.makedirs(corpus, exist_ok=True)
    for i, seed in enumerate(fuzz_targets.seeds(target)):
        with open(os.path.join(corpus, f"seed-{i}"), "wb") as f:
            f.write(seed)
    atheris.Setup([sys.argv[0], f"-runs={runs}", f"-max_len={max_len}", "-timeout=10", "-rss_limit_mb=2048",
                   f"-artifact_prefix={artifacts.rstrip('/')}/", "-print_final_stats=1", corpus], fn)
    atheris.Fuzz()


def fuzz(target: str, runs: int, out: str, *, quiet: bool = True) -> dict:
    """Run one target for `runs` inputs in its own process; {inputs, seconds, crashes, log}."""
    corpus = os.path.join(out, "corpus", target)
    artifacts = os.path.join(out, "crashes", target)
    os.makedirs(artifacts, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run-one", target, "--runs", str(runs),
                           "--corpus", corpus, "--artifacts", artifacts],
                          env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    text = proc.stdout + proc.stderr
    done = re.findall(r"stat::number_of_executed_units:\s*(\d+)", text)
    crashes = sorted(os.listdir(artifacts))
    result = {"target": target, "inputs": int(done[-1]) if done else 0, "seconds": round(seconds, 1),
              "crashes": len(crashes), "exit": proc.returncode}
    if proc.returncode != 0 or crashes:
        result["log"] = text[-6000:]
        result["crash_files"] = [os.path.join(artifacts, c) for c in crashes]
    if not quiet:
        print(json.dumps({k: v for k, v in result.items() if k != "log"}), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=1_000_000, help="inputs in total, shared by weight")
    ap.add_argument("--targets", default=",".join(WEIGHTS))
    ap.add_argument("--out", help="corpus and crashes (default: a temp dir)")
    ap.add_argument("--run-one")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--corpus")
    ap.add_argument("--artifacts")
    args = ap.parse_args()
    if args.run_one:
        run_one(args.run_one, args.runs, args.corpus, args.artifacts)
        return
    out = args.out or tempfile.mkdtemp(prefix="kompakt-fuzz-")
    targets = args.targets.split(",")
    total = sum(WEIGHTS[t] for t in targets)
    results = []
    for t in targets:
        results.append(fuzz(t, max(1, int(args.inputs * WEIGHTS[t] / total)), out, quiet=False))
    summary = {"inputs": sum(r["inputs"] for r in results), "crashes": sum(r["crashes"] for r in results),
               "seconds": round(sum(r["seconds"] for r in results), 1), "out": out}
    print(json.dumps(summary))
    for r in results:
        if r.get("log"):
            print(f"--- {r['target']} (exit {r['exit']}) ---\n{r['log']}")
    sys.exit(1 if summary["crashes"] or any(r["exit"] for r in results) else 0)


if __name__ == "__main__":
    main()
