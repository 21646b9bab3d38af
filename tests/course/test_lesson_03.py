"""Notebook 03's timing loop, written out in its part 3, is the loop that ``compilation.time_calls``
runs for the rest of the notebook: on a stand-in for a compiled JAX program whose results arrive
later (on a clock of its own), both make the same calls, wait for the same results and return the
same first time, timed runs and median."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np

from sdaccel.course import exercises as ex
from sdaccel.tpu import compilation

NB03 = Path(__file__).resolve().parents[2] / "notebooks" / "03_tpu_performance.ipynb"
RUNS_S = [5.0, 1.0, 3.0, 2.0]  # the first call, then three timed calls: their median is 2.0


class Device:
    """A clock that moves only while a result is waited for: each call returns at once, and its
    result is ready ``RUNS_S[i]`` seconds after the previous one."""

    def __init__(self):
        self.now, self.free_at, self.calls, self.waited = 0.0, 0.0, 0, 0

    def clock(self) -> float:
        return self.now

    def program(self, *args):
        assert args == ("args",), "the program is called with its arguments"
        self.free_at = max(self.now, self.free_at) + RUNS_S[self.calls]
        self.calls += 1
        return Pending(self, self.free_at)


class Pending:
    def __init__(self, device: Device, ready_at: float):
        self.device, self.ready_at = device, ready_at

    def block_until_ready(self):
        self.device.now = max(self.device.now, self.ready_at)
        self.device.waited += 1
        return self

    def __array__(self, dtype=None, copy=None):
        return np.zeros((2, 4, 4, 3), dtype or np.float32)


class Recorder(dict):
    def save_image(self, name, image):
        self[name] = image


def run_lesson_cell(device: Device, repeats: int) -> dict:
    ns = {
        "time": SimpleNamespace(perf_counter=device.clock),
        "jax": jax,
        "statistics": __import__("statistics"),
        "np": np,
        "compiled": device.program,
        "args": ("args",),
        "REPEATS": repeats,
        "BATCH": 2,
        "results": Recorder(),
        "image_grid": lambda images: images,
        "to_pil": lambda images: images,
    }
    exec(compile(ex.code_cell(NB03, "runs_s.append("), "03 timing loop", "exec"), ns)
    return ns


def test_the_timing_loop_cell_is_what_time_calls_runs():
    cell, helper = Device(), Device()
    ns = run_lesson_cell(cell, repeats=3)
    timing = compilation.time_calls(helper.program, "args", repeats=3, clock=helper.clock)

    assert (ns["first_s"], ns["runs_s"], ns["run_s"]) == (timing.first_s, timing.runs_s, timing.run_s)
    assert (ns["first_s"], ns["runs_s"], ns["run_s"]) == (5.0, [1.0, 3.0, 2.0], 2.0)
    assert cell.calls == helper.calls == 4 and cell.waited == helper.waited == 4
    assert ns["results"]["run_s"] == 2.0 and ns["results"]["images_per_s"] == 1.0


def test_the_stand_in_tells_an_unwaited_call():
    device = Device()
    start = device.clock()
    device.program("args")  # not waited for: the clock has not moved
    assert device.clock() - start == 0.0
