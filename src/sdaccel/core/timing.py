"""Timing calls, the one way every measurement of the package does it: a first call (which may
compile or warm caches), then ``repeats`` timed calls, their median, and the CPU seconds of this
process during each, so that a ratio measured on a shared machine can be checked by CPU time;
and what a throughput costs at an hourly price (:func:`cost_per_image`), on either track.

Each front-end says how to wait for its result (``wait``): JAX returns before the device has
finished, so its timers pass ``jax.block_until_ready``; OpenVINO and PyTorch return finished
results.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field


@dataclass
class Timing:
    """``first_s``: the first call (compile + run). ``run_s``: the median of ``runs_s``, the
    following calls; ``cpu_s``: the CPU seconds of this process (every thread) during each of
    them. ``compile_s`` is ``first_s - run_s``, the usual estimate of the compile cost."""

    first_s: float
    run_s: float
    runs_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    results: list = field(default_factory=list, repr=False)

    @property
    def compile_s(self) -> float:
        return max(self.first_s - self.run_s, 0.0)

    @property
    def cpu_run_s(self) -> float | None:
        """The median CPU seconds of the timed calls."""
        return statistics.median(self.cpu_s) if self.cpu_s else None

    def as_dict(self) -> dict:
        out = asdict(self)
        out.pop("results")
        return {**out, "compile_s": self.compile_s}


def median(values) -> float | None:
    """The median of ``values``, or ``None`` when there is none or one of them is ``None``."""
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return statistics.median(values)


def time_calls(
    fn: Callable,
    *args,
    repeats: int = 5,
    wait: Callable = lambda result: result,
    warmup: Callable | None = None,
    keep_results: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
    **kwargs,
) -> Timing:
    """Call ``fn(*args, **kwargs)`` once (or ``warmup()`` instead, when given), then ``repeats``
    more times, each waited for with ``wait(result)``. ``keep_results`` keeps the timed calls'
    results (in ``Timing.results``) for the caller to read their own timings."""
    if repeats < 0:
        raise ValueError(f"repeats must be 0 or more, got {repeats}.")
    start = clock()
    wait(warmup() if warmup is not None else fn(*args, **kwargs))
    first = clock() - start
    runs, cpu, results = [], [], []
    for _ in range(repeats):
        start, cpu_start = clock(), cpu_clock()
        result = wait(fn(*args, **kwargs))
        runs.append(clock() - start)
        cpu.append(cpu_clock() - cpu_start)
        if keep_results:
            results.append(result)
    return Timing(first, statistics.median(runs) if runs else first, runs, cpu, results)


def cost_per_image(images_per_s: float, price_per_hour: float) -> dict:
    """Dollars per image and per 1,000 images for a machine that costs ``price_per_hour`` (all
    its chips together) and makes ``images_per_s`` when kept busy."""
    per_image = price_per_hour / 3600.0 / images_per_s
    return {"per_image": per_image, "per_1000_images": 1000.0 * per_image, "price_per_hour": price_per_hour}
