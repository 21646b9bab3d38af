"""Exercise 03.1, the timing loop as a function ``steady_s(fn, *args, repeats=5)``: the notebook's
solution passes its check, the attendee's copy (solution stripped) is "not answered yet", and the
loops a learner would write wrong are "not quite": no wait for the results, the compile timed, a
mean, one run, the first result not waited for. The check runs them on stand-ins for a fresh
``jax.jit`` (``exercises.right_timing_loop``), so no program is compiled."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from sdaccel.course import exercises as ex

NB03 = Path(__file__).resolve().parents[2] / "notebooks" / "03_tpu_performance.ipynb"


def namespace() -> dict:
    return {"jax": jax, "time": time, "statistics": statistics}


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def loop(*, warm_up=True, wait=True, wait_first=True, time_first=False, mean=False, one_run=False):
    """A timing loop with one of a learner's mistakes."""

    def steady_s(fn, *args, repeats=5):
        times = []
        if warm_up:
            start = time.perf_counter()
            first = fn(*args)
            if wait_first:
                jax.block_until_ready(first)
            if time_first:
                times.append(time.perf_counter() - start)
        for _ in range(1 if one_run else repeats):
            start = time.perf_counter()
            result = fn(*args)
            if wait:
                jax.block_until_ready(result)
            times.append(time.perf_counter() - start)
        return statistics.mean(times) if mean else statistics.median(times)

    return steady_s


def test_exercise_03_1_solution_passes_and_the_stub_is_not_answered(capsys):
    solution, stub, check = ex.exercise_cells(NB03, "03.1")
    ns = run(solution, namespace(), "03.1 solution")
    run(check, ns, "03.1 check")
    assert "Exercise 03.1: right" in capsys.readouterr().out

    with pytest.raises(ex.ExerciseNotDone, match="03.1: not answered yet"):
        run(check, run(stub, namespace()))


def test_exercise_03_1_wrong_loops_fail():
    _, _, check = ex.exercise_cells(NB03, "03.1")
    wrong = {
        "no block_until_ready: the dispatch is timed": loop(wait=False),
        "no untimed first call: the compile is timed": loop(warm_up=False),
        "the first call timed with the others": loop(time_first=True),
        "the first result not waited for": loop(wait_first=False),
        "the mean, not the median": loop(mean=True),
        "one timed run, whatever repeats says": loop(one_run=True),
        "a number, not a function": 0.05,
        "a function of fn alone": lambda fn, repeats=5: 0.05,
    }
    for name, answer in wrong.items():
        ns = {**namespace(), "steady_s": answer}
        with pytest.raises(ex.ExerciseNotDone, match="03.1: not quite"):
            run(check, ns, name)
            pytest.fail(f"a wrong answer passed: {name}")


def test_exercise_03_1_right_loops_pass():
    """Other right ways: NumPy's median, the array's own block_until_ready method."""

    def method_and_numpy(fn, *args, repeats=5):
        fn(*args).block_until_ready()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(*args).block_until_ready()
            times.append(time.perf_counter() - start)
        return np.median(times)

    assert ex.right_timing_loop(loop())
    assert ex.right_timing_loop(method_and_numpy)
