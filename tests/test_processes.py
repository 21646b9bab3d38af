"""sdaccel.processes: a function run in a spawned child process, its peak memory measured, and a
child above its memory limit stopped."""

from __future__ import annotations

import time

import numpy as np

from sdaccel.processes import ChildRun, run_with_memory_limit


def _allocate(megabytes: int, hold_s: float = 0.0) -> int:
    block = np.ones(megabytes * 2**20, dtype=np.uint8)
    time.sleep(hold_s)
    return int(block.sum() // 2**20)


def _fail() -> None:
    raise ValueError("bad input")


def test_run_with_memory_limit_measures_the_child_peak():
    # this (pytest) process holds far more than the children: their peak must not include it
    baseline = run_with_memory_limit(_allocate, 0)
    run = run_with_memory_limit(_allocate, 300, hold_s=0.5)  # held long enough to be polled
    assert baseline.ok and run.ok and run.result == 300
    assert 0.28 <= run.peak_rss_gb - baseline.peak_rss_gb < 0.4
    assert 0.28 <= run.peak_anon_gb - baseline.peak_anon_gb < 0.4


def test_run_with_memory_limit_kills_a_child_above_the_limit():
    run = run_with_memory_limit(_allocate, 800, hold_s=5.0, limit_gb=0.5)
    assert isinstance(run, ChildRun)
    assert not run.ok and run.result is None
    assert "killed" in run.error and run.peak_rss_gb > 0.5


def test_an_exception_in_the_child_is_reported_not_raised():
    run = run_with_memory_limit(_fail)
    assert not run.ok and run.result is None and run.error == "ValueError: bad input"
