"""The wall/CPU timer of the CPU benchmarks (``sdaccel.tools.measure.timing``; the timings themselves
run in children, exercised by the benchmarks)."""

from __future__ import annotations

from sdaccel.tools.measure import timing as B


def test_time_wall_and_cpu_times_after_the_untimed_calls():
    calls = []
    times, cpu_times = B.time_wall_and_cpu(lambda: calls.append(1), iters=3, warmup=2)
    assert len(calls) == 5 and len(times) == len(cpu_times) == 3
    assert all(t >= 0 for t in times + cpu_times)
    B.time_wall_and_cpu(lambda: calls.append(1), iters=1, warmup=0)
    assert len(calls) == 6
