"""Time one model compiled in several float precisions, fairly: the measuring half of
:mod:`sdaccel.cpu.precision` (which decides between the candidates, records and caches the choice).

1. **Compile** the model once per candidate ``INFERENCE_PRECISION_HINT``: all at once when they fit
   in memory (:func:`compiled_at_once`), otherwise one at a time.
2. **Warm up**, then **time in interleaved rounds** (:func:`time_rounds`): every candidate once per
   round, in a rotating order, so that a change of load on the machine reaches them all alike; at
   least ``iters`` rounds, and more until each has run :data:`MIN_TIMED_S` seconds (a call of a
   millisecond is noisy), at most :data:`MAX_ROUNDS`.
3. **Record what ran** (:class:`Measurement`): the precision the plugin reports for the compiled
   model and the output precision of its heavy layers (:func:`runtime_precisions`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

#: Layer types of the runtime model whose precision says what the heavy arithmetic ran in.
HEAVY_LAYERS = ("Convolution", "Deconvolution", "FullyConnected", "MatMul", "ScaledAttn")
#: Timed rounds: at least ``iters``, then more until each candidate has run this many seconds...
MIN_TIMED_S = 0.3
#: ... or this many rounds have run (a 1 ms text encoder: 30 calls per candidate, not 3).
MAX_ROUNDS = 30
#: The candidates of a component are compiled at once (and timed interleaved) when twice their IR
#: weights per candidate fit in this fraction of the available memory; otherwise one at a time.
MEMORY_FRACTION = 0.5


def precision_name(value) -> str:
    """``ov.Type`` (or its string) -> ``"f32"`` / ``"bf16"`` / ``"f16"``."""
    name = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(name, name)


@dataclass
class Measurement:
    """One component compiled with one ``INFERENCE_PRECISION_HINT``."""

    requested: str
    reported: str  #: the compiled model's INFERENCE_PRECISION_HINT
    runtime: dict[str, int]  #: output precision -> number of heavy layers (HEAVY_LAYERS)
    times: list[float]  #: seconds of each timed call (wall clock: what a reader waits for)
    compile_s: float
    #: CPU seconds of this process (all threads) in each timed call: on a machine busy with other
    #: work the wall clock inflates with their load, the CPU time much less
    cpu_times: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times)

    @property
    def best_s(self) -> float:
        """The fastest call: the estimate of the cost (noise only adds time)."""
        return min(self.times)

    @property
    def honoured(self) -> bool:
        """The plugin runs what was asked (a CPU without bf16 reports f32 for a bf16 hint)."""
        return self.reported == self.requested


def runtime_precisions(compiled) -> dict[str, int]:
    """Output precision -> count, over the heavy layers (:data:`HEAVY_LAYERS`) of the runtime
    model: the precision the convolutions and matrix products computed in. (Their
    ``runtimePrecision`` is not used: for weights stored fp16 it names the f16 of the weights that
    the plugin decompresses on the fly, even where the arithmetic is f32.)"""
    counts: dict[str, int] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "layerType" not in info or info["layerType"].astype(str) not in HEAVY_LAYERS:
            continue
        precision = info["outputPrecisions"].astype(str) if "outputPrecisions" in info else "?"
        counts[precision] = counts.get(precision, 0) + 1
    return counts


def ir_weight_bytes(xml: Path) -> int:
    """The size of the weights file beside an IR's ``.xml`` (0 if it has none)."""
    weights = xml.with_suffix(".bin")
    return weights.stat().st_size if weights.is_file() else 0


def compiled_at_once(weight_bytes: int, count: int, available: int | None = None) -> bool:
    """Whether ``count`` candidates of a model whose IR weights take ``weight_bytes`` fit compiled at
    once (each taken as twice its IR: f16-stored weights run as f32) in :data:`MEMORY_FRACTION` of
    the ``available`` memory (default: what is available now)."""
    available = psutil.virtual_memory().available if available is None else available
    return 2 * weight_bytes * count <= MEMORY_FRACTION * available


def time_rounds(
    requests: dict[str, object], inputs: dict, iters: int, warmup: int, timer: Callable[[], float]
) -> dict[str, tuple[list[float], list[float]]]:
    """Each request's ``warmup`` untimed calls, then interleaved timed rounds: every request once per
    round, the order rotating by one each round; at least ``iters`` rounds, then more until each
    request has run :data:`MIN_TIMED_S` seconds or :data:`MAX_ROUNDS` rounds have run. Returns
    name -> (wall-clock seconds, CPU seconds of this process) of each timed call."""
    for request in requests.values():
        for _ in range(warmup):
            request.infer(inputs)
    names = list(requests)
    timed: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}

    def done(rounds: int) -> bool:
        long_enough = all(sum(timed[name][0]) >= MIN_TIMED_S for name in names)
        return rounds >= iters and (long_enough or rounds >= MAX_ROUNDS)

    rounds = 0
    while not done(rounds):
        shift = rounds % len(names)
        for name in names[shift:] + names[:shift]:
            tick, cpu = timer(), time.process_time()
            requests[name].infer(inputs)
            timed[name][0].append(timer() - tick)
            timed[name][1].append(time.process_time() - cpu)
        rounds += 1
    return timed


def measure(
    compile_model: Callable[[str], object],
    inputs: dict,
    candidates: tuple[str, ...],
    iters: int,
    warmup: int,
    timer: Callable[[], float] = time.perf_counter,
    together: bool = True,
    settled: Callable[[dict[str, Measurement]], bool] | None = None,
) -> dict[str, Measurement]:
    """Compile the model in each of ``candidates`` with ``compile_model(precision)`` and time them
    (:func:`time_rounds`): all compiled at once and interleaved when ``together``, otherwise one
    compiled model at a time (for a model too large to hold several times). With ``settled`` (a
    test of the measurements: does the decision stay where it would be without measuring?), an
    unsettled result of candidates timed together is timed for another ``iters`` rounds before it
    is returned, so that a change rests on twice the calls; one model at a time is timed once (its
    models are gone by then)."""

    def compiled(precision):
        tick = timer()
        model = compile_model(precision)
        return model, timer() - tick

    def measurement(precision, model, compile_s, times) -> Measurement:
        return Measurement(
            requested=precision,
            reported=precision_name(model.get_property("INFERENCE_PRECISION_HINT")),
            runtime=runtime_precisions(model),
            times=times[0],
            compile_s=compile_s,
            cpu_times=times[1],
        )

    if not together:
        measurements = {}
        for precision in candidates:
            model, compile_s = compiled(precision)
            timed = time_rounds({precision: model.create_infer_request()}, inputs, iters, warmup, timer)
            measurements[precision] = measurement(precision, model, compile_s, timed[precision])
            del model
        return measurements
    models = {p: compiled(p) for p in candidates}
    requests = {p: model.create_infer_request() for p, (model, _) in models.items()}
    timed = time_rounds(requests, inputs, iters, warmup, timer)
    measurements = {p: measurement(p, *models[p], timed[p]) for p in candidates}
    if settled is not None and not settled(measurements):
        for p, (times, cpu_times) in time_rounds(requests, inputs, iters, 0, timer).items():
            measurements[p].times.extend(times)
            measurements[p].cpu_times.extend(cpu_times)
    return measurements
