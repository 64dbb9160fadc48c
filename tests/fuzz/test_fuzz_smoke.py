"""A short coverage-guided run (atheris) of every fuzz target in bench/fuzz_targets.py, and a replay of
every input the fuzzer ever found (tests/fuzz/regressions/<target>/<what it broke>).

The long run is `python bench/bench_fuzz.py` (1 M inputs, figures in bench/RESULTS.md), each target in
a process of its own. Here all targets share one atheris process (atheris takes the process over)
for a few thousand inputs from every target's seeds; a crash, a disagreement between the cleaner's
compiled and Python seams, or an input taking over 10 s fails the test with the fuzzer's report.
"""
from __future__ import annotations

import logging
import os
import signal
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import bench_fuzz  # noqa: E402
import fuzz_targets  # noqa: E402

from kompakt.cleaner import native  # noqa: E402

REGRESSIONS = os.path.join(os.path.dirname(__file__), "regressions")
SMOKE_RUNS = 6000                  # inputs of the smoke, over the six targets


def _needs(target: str) -> None:
    if target == "cleaner" and native.LIB is None:
        pytest.skip("no C compiler: the cleaner's compiled seam (compared with the Python one) is not built")


def regression_inputs():
    for target in sorted(os.listdir(REGRESSIONS)):
        for name in sorted(os.listdir(os.path.join(REGRESSIONS, target))):
            yield pytest.param(target, os.path.join(REGRESSIONS, target, name), id=f"{target}/{name}")


@pytest.mark.parametrize("target,path", list(regression_inputs()))
def test_inputs_the_fuzzer_found_are_handled(target, path):
    _needs(target)
    logging.disable(logging.CRITICAL)
    signal.alarm(10)                  # one of them used to loop for ever
    try:
        with open(path, "rb") as f:
            fuzz_targets.TARGETS[target](f.read())
    finally:
        signal.alarm(0)
        logging.disable(logging.NOTSET)


@pytest.mark.slow
def test_fuzz_smoke_of_every_target(tmp_path):
    """All six targets in one atheris process (the first byte of an input picks the target), from
    every target's seeds: one start-up instead of six."""
    result = bench_fuzz.fuzz("all", SMOKE_RUNS, str(tmp_path))
    assert result["exit"] == 0 and result["crashes"] == 0, result.get("log", result)
    assert result["inputs"] >= SMOKE_RUNS
