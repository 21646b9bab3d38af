"""sdaccel.core.timing: the one call timer. A fake clock makes every number exact: the first call
is timed on its own, the timed calls give their median, ``wait`` is part of every call, a warm-up
replaces the first call, and results are kept only when asked."""

from __future__ import annotations

import time

import pytest

from sdaccel.core.timing import Timing, cost_per_image, median, time_calls


class FakeClocks:
    """A wall clock and a CPU clock that only move when a fake call spends time: ``spend(wall, cpu)``.
    Every duration is a power-of-two fraction, so every difference below is exact."""

    def __init__(self):
        self.wall = 0.0
        self.cpu = 0.0

    def clock(self) -> float:
        return self.wall

    def cpu_clock(self) -> float:
        return self.cpu

    def spend(self, wall: float, cpu: float = 0.0) -> None:
        self.wall += wall
        self.cpu += cpu


def timed_function(clocks: FakeClocks, walls, cpus=None):
    """A function whose ``k``-th call takes ``walls[k]`` seconds (and ``cpus[k]`` CPU seconds) and
    returns ``k``; ``calls`` counts its calls."""
    cpus = cpus or [0.0] * len(walls)
    calls = []

    def fn():
        k = len(calls)
        calls.append(k)
        clocks.spend(walls[k], cpus[k])
        return k

    fn.calls = calls
    return fn


def time_fake(clocks: FakeClocks, fn, **kwargs) -> Timing:
    return time_calls(fn, clock=clocks.clock, cpu_clock=clocks.cpu_clock, **kwargs)


def test_the_first_call_is_timed_apart_from_the_median_of_the_others():
    clocks = FakeClocks()
    fn = timed_function(clocks, [8.0, 1.0, 3.0, 2.0])
    timing = time_fake(clocks, fn, repeats=3)
    assert fn.calls == [0, 1, 2, 3]
    assert timing.first_s == 8.0 and timing.runs_s == [1.0, 3.0, 2.0]
    assert timing.run_s == 2.0 and timing.compile_s == 6.0


def test_the_median_of_an_even_number_of_runs_is_the_mean_of_the_middle_two():
    clocks = FakeClocks()
    timing = time_fake(clocks, timed_function(clocks, [4.0, 1.0, 10.0, 2.0, 3.0]), repeats=4)
    assert timing.runs_s == [1.0, 10.0, 2.0, 3.0] and timing.run_s == 2.5


def test_compile_s_is_never_negative():
    clocks = FakeClocks()
    timing = time_fake(clocks, timed_function(clocks, [0.5, 1.0, 1.0]), repeats=2)
    assert timing.first_s == 0.5 and timing.run_s == 1.0 and timing.compile_s == 0.0


def test_cpu_seconds_of_each_timed_call_and_their_median():
    clocks = FakeClocks()
    fn = timed_function(clocks, [5.0, 1.0, 1.0, 1.0], cpus=[9.0, 2.0, 0.5, 4.0])
    timing = time_fake(clocks, fn, repeats=3)
    assert timing.cpu_s == [2.0, 0.5, 4.0]  # the first call's CPU time is not among them
    assert timing.cpu_run_s == 2.0


def test_cpu_seconds_on_the_real_clocks_are_non_negative():
    timing = time_calls(sum, range(10_000), repeats=3)
    assert len(timing.runs_s) == len(timing.cpu_s) == 3
    assert all(s >= 0 for s in timing.cpu_s) and all(s >= 0 for s in timing.runs_s)
    assert timing.first_s >= 0 and timing.cpu_run_s >= 0


def test_wait_is_applied_to_every_result_and_timed_with_its_call():
    clocks = FakeClocks()
    waited = []

    def wait(result):
        waited.append(result)
        clocks.spend(0.25)  # as jax.block_until_ready waits for the device
        return ("ready", result)

    timing = time_fake(
        clocks, timed_function(clocks, [2.0, 1.0, 1.0]), repeats=2, wait=wait, keep_results=True
    )
    assert waited == [0, 1, 2]  # the first call's result too
    assert timing.first_s == 2.25 and timing.runs_s == [1.25, 1.25]
    assert timing.results == [("ready", 1), ("ready", 2)]  # what wait returned


def test_a_warmup_replaces_the_first_call():
    clocks = FakeClocks()
    fn = timed_function(clocks, [1.0, 3.0])
    waited = []

    def warmup():
        clocks.spend(16.0)
        return "warm"

    timing = time_fake(clocks, fn, repeats=2, warmup=warmup, wait=lambda r: waited.append(r) or r)
    assert fn.calls == [0, 1]  # fn itself runs only the timed calls
    assert waited == ["warm", 0, 1]  # the warm-up's result is waited for too
    assert timing.first_s == 16.0 and timing.runs_s == [1.0, 3.0] and timing.run_s == 2.0


def test_results_are_kept_only_when_asked():
    clocks = FakeClocks()
    kept = time_fake(clocks, timed_function(clocks, [1.0] * 3), repeats=2, keep_results=True)
    assert kept.results == [1, 2]  # the timed calls' results, not the first call's
    clocks = FakeClocks()
    assert time_fake(clocks, timed_function(clocks, [1.0] * 3), repeats=2).results == []
    assert "results" not in repr(kept)


def test_arguments_reach_the_function():
    seen = []
    time_calls(lambda *args, **kwargs: seen.append((args, kwargs)), 1, 2, repeats=1, scale=3)
    assert seen == [((1, 2), {"scale": 3})] * 2


def test_zero_repeats_times_the_first_call_only():
    clocks = FakeClocks()
    fn = timed_function(clocks, [3.0])
    timing = time_fake(clocks, fn, repeats=0, keep_results=True)
    assert fn.calls == [0]
    assert timing.first_s == 3.0 and timing.run_s == 3.0 and timing.compile_s == 0.0
    assert timing.runs_s == [] and timing.cpu_s == [] and timing.cpu_run_s is None and timing.results == []


def test_negative_repeats_raise_before_any_call():
    calls = []
    with pytest.raises(ValueError, match=r"^repeats must be 0 or more, got -1\.$"):
        time_calls(lambda: calls.append(1), repeats=-1)
    assert calls == []


def test_as_dict_has_the_numbers_and_compile_s_but_not_the_results():
    clocks = FakeClocks()
    fn = timed_function(clocks, [4.0, 1.0, 2.0], cpus=[0.0, 0.5, 0.25])
    out = time_fake(clocks, fn, repeats=2, keep_results=True).as_dict()
    assert out == {"first_s": 4.0, "run_s": 1.5, "runs_s": [1.0, 2.0], "cpu_s": [0.5, 0.25], "compile_s": 2.5}


def test_the_real_clock_measures_a_sleep():
    timing = time_calls(time.sleep, 0.02, repeats=2)
    assert all(s >= 0.02 for s in timing.runs_s) and timing.first_s >= 0.02


def test_median_of_values_none_and_nothing():
    assert median([3.0, 1.0, 2.0]) == 2.0 and median(iter([1.0, 2.0])) == 1.5
    assert median([]) is None and median([1.0, None]) is None


def test_cost_per_image():
    cost = cost_per_image(images_per_s=1.0, price_per_hour=3.6)
    assert cost["per_image"] == pytest.approx(0.001) and cost["per_1000_images"] == pytest.approx(1.0)
