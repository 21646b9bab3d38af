"""Runtime levers of the OpenVINO CPU plugin, timed side by side on the same model and inputs.

Some speed levers change no arithmetic, only how the plugin schedules it: static or dynamic
shapes, the ``PERFORMANCE_HINT`` (``LATENCY``: one stream using every core; ``THROUGHPUT``:
several streams, one request each), ``INFERENCE_NUM_THREADS``, ``NUM_STREAMS``,
``ENABLE_CPU_PINNING``, and whether classifier-free guidance runs as one UNet call at batch 2 or
two calls at batch 1. Each is an :class:`Arm` of :func:`time_arms`, which times them *interleaved*
(round after round, every arm once per round), so that a change in the machine's load during the
measurement hits every arm alike instead of the one that happened to run last, and compares each
arm's output with the first arm's: these levers should leave it bit-identical or within float
rounding (``max_abs_diff``), unlike INT8 or DeepCache, whose cost is measured in images.

Two ways to interleave:

* ``keep_compiled=True`` compiles every arm once, warms each up, then times one call per arm per
  round: the fairest, but it holds every compiled model in memory at once (fine for small
  models; an SD 1.5 UNet compiled in f32 holds about 4 GiB of weights and activations);
* ``keep_compiled=False`` compiles, warms and times each arm afresh in every round, and frees it
  before the next: one model in memory at a time, at the cost of a compile per arm and round.

``python benchmarks/bench_openvino.py --levers runtime static guidance_split`` runs them on the
real SD 1.5 UNet, one child process per lever.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from sdaccel.core.timing import time_calls

#: Compile properties read back from each compiled arm: what the plugin really did.
REPORTED = ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING")


@dataclass
class Arm:
    """One way to run the same model.

    ``config``: compile properties (``{"PERFORMANCE_HINT": "THROUGHPUT"}``, ...). ``static``:
    reshape to the shapes of the calls before compiling. ``split``: run each input batch as that
    many calls on equal slices of the batch (``2``: guidance as two calls of batch 1), outputs
    concatenated. ``parallel``: also measure throughput, that many requests in flight at once
    (``AsyncInferQueue``), as seconds per call (wall time of the group over its size).
    """

    config: dict = field(default_factory=dict)
    static: bool = True
    split: int = 1
    parallel: int = 0


def _slices(inputs: dict[str, np.ndarray], split: int) -> list[dict[str, np.ndarray]]:
    """``inputs`` cut into ``split`` calls along the batch (the first dimension of the arrays
    whose first dimension is the sample's batch; ``timestep`` ``[1]`` goes to every call)."""
    if split == 1:
        return [inputs]
    batch = len(next(iter(inputs.values())))
    if batch % split:
        raise ValueError(f"split={split} does not divide the batch of {batch}.")
    size = batch // split
    return [
        {
            name: value[k * size : (k + 1) * size] if np.ndim(value) and len(value) == batch else value
            for name, value in inputs.items()
        }
        for k in range(split)
    ]


def _properties(compiled) -> dict:
    out = {}
    for key in (*REPORTED, "INFERENCE_PRECISION_HINT"):
        try:
            value = compiled.get_property(key)
        except RuntimeError:  # a property this plugin does not report
            continue
        out[key] = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
    return out


def _compile(core, xml, arm: Arm, calls: list[dict], precision: str | None):
    model = core.read_model(str(xml))
    if arm.static:
        model.reshape({name: list(np.shape(value)) for name, value in calls[0].items()})
    config = {"PERFORMANCE_HINT": "LATENCY"} | dict(arm.config)
    if precision is not None:
        config.setdefault("INFERENCE_PRECISION_HINT", precision)
    tick = time.perf_counter()
    compiled = core.compile_model(model, "CPU", config)
    return compiled, time.perf_counter() - tick


def _run_unit(request, calls: list[dict]) -> np.ndarray:
    outs = []
    for call in calls:
        request.infer(call)
        outs.append(np.array(request.get_output_tensor(0).data, copy=True))
    return np.concatenate(outs) if len(outs) > 1 else outs[0]


def _throughput(compiled, calls: list[dict], jobs: int) -> float:
    """Seconds per unit with ``jobs`` units in flight at once (one request per stream)."""
    import openvino as ov

    queue = ov.AsyncInferQueue(compiled, jobs)
    for _ in range(jobs):  # warm every request once
        for call in calls:
            queue.start_async(call)
    queue.wait_all()
    tick = time.perf_counter()
    for _ in range(jobs):
        for call in calls:
            queue.start_async(call)
    queue.wait_all()
    return (time.perf_counter() - tick) / jobs


def time_arms(
    xml,
    inputs: dict[str, np.ndarray],
    arms: dict[str, Arm],
    rounds: int = 3,
    warmup: int = 1,
    precision: str | None = None,
    keep_compiled: bool = True,
    core=None,
) -> dict:
    """Time every arm on ``inputs`` (one UNet call's inputs), interleaved over ``rounds``.

    ``precision``: the ``INFERENCE_PRECISION_HINT`` of every arm unless its config sets one
    (``None``: the plugin's default). Returns, per arm: ``times`` and ``cpu_times`` (seconds per
    unit: one call, or ``split`` calls), their medians ``s_per_call`` / ``cpu_s_per_call``,
    ``speedup`` over the first arm (median over median), ``compile_s``, the properties the plugin
    reports (:data:`REPORTED`), ``max_abs_diff`` of its output from the first arm's and, with
    ``parallel``, ``s_per_call_parallel``.
    """
    import openvino as ov

    # 1. Check the request; each arm's calls (its inputs, split into units)
    if not arms:
        raise ValueError("time_arms needs at least one arm.")
    if rounds < 1 or warmup < 0:
        raise ValueError(f"rounds must be >= 1 and warmup >= 0, got rounds={rounds}, warmup={warmup}.")
    core = core or ov.Core()
    calls = {name: _slices(inputs, arm.split) for name, arm in arms.items()}
    rows = {name: {"times": [], "cpu_times": [], "compile_s": []} for name in arms}
    outputs: dict[str, np.ndarray] = {}
    held: dict[str, tuple] = {}

    def ready(name: str):
        """A compiled arm and its request, warmed up (compiled afresh unless held)."""
        if name in held:
            return held[name]
        compiled, seconds = _compile(core, xml, arms[name], calls[name], precision)
        rows[name]["compile_s"].append(seconds)
        rows[name].setdefault("reported", _properties(compiled))
        request = compiled.create_infer_request()
        for _ in range(warmup):
            _run_unit(request, calls[name])
        if keep_compiled:
            held[name] = (compiled, request)
        return compiled, request

    # 2. Compile every arm first (when they are kept), then time them interleaved, round after round
    if keep_compiled:
        for name in arms:
            ready(name)
    for _ in range(rounds):
        for name, arm in arms.items():
            compiled, request = ready(name)
            timed = time_calls(
                _run_unit, request, calls[name], repeats=1, warmup=lambda: None, keep_results=True
            )
            out = timed.results[0]
            rows[name]["times"] += timed.runs_s
            rows[name]["cpu_times"] += timed.cpu_s
            outputs.setdefault(name, out)
            if arm.parallel and "s_per_call_parallel" not in rows[name]:
                rows[name]["parallel"] = arm.parallel
                rows[name]["s_per_call_parallel"] = _throughput(compiled, calls[name], arm.parallel)
            if not keep_compiled:
                del compiled, request
                gc.collect()

    # 3. Medians, speedups and output differences against the first arm
    first = summarize_arms(rows, outputs, arms)
    return {
        "reference": first,
        "rounds": rounds,
        "warmup": warmup,
        "keep_compiled": keep_compiled,
        "arms": rows,
    }


def summarize_arms(rows: dict[str, dict], outputs: dict[str, np.ndarray], arms: dict[str, Arm]) -> str:
    """Add to each arm's row of :func:`time_arms` its medians, its speedups over the first arm, how
    far its output is from the first arm's, and its settings; return the first arm's name."""
    first = next(iter(arms))
    for name, row in rows.items():
        row["s_per_call"] = statistics.median(row["times"])
        row["cpu_s_per_call"] = statistics.median(row["cpu_times"])
        row["speedup"] = rows[first]["s_per_call"] / row["s_per_call"] if name != first else 1.0
        row["cpu_speedup"] = rows[first]["cpu_s_per_call"] / row["cpu_s_per_call"] if name != first else 1.0
        diff = np.abs(outputs[name].astype(np.float64) - outputs[first].astype(np.float64))
        row["max_abs_diff"] = float(diff.max())
        row["output_abs_max"] = float(np.abs(outputs[first]).max())
        row["config"] = {k: str(v) for k, v in arms[name].config.items()}
        row.update(static=arms[name].static, split=arms[name].split)
    return first


def runtime_arms(cores: int) -> dict[str, Arm]:
    """The default (``LATENCY``) against each runtime property, on a CPU with ``cores`` cores."""
    arms = {
        "default (LATENCY)": Arm(),
        "THROUGHPUT": Arm({"PERFORMANCE_HINT": "THROUGHPUT"}, parallel=2),
        "INFERENCE_NUM_THREADS=1": Arm({"INFERENCE_NUM_THREADS": 1}),
        "NUM_STREAMS=2": Arm({"NUM_STREAMS": 2}, parallel=2),
        "ENABLE_CPU_PINNING=False": Arm({"ENABLE_CPU_PINNING": False}),
        "ENABLE_CPU_PINNING=True": Arm({"ENABLE_CPU_PINNING": True}),
    }
    if cores > 2:
        arms[f"INFERENCE_NUM_THREADS={cores // 2}"] = Arm({"INFERENCE_NUM_THREADS": cores // 2})
    return arms


#: Static against dynamic shapes of the same IR and precision.
STATIC_ARMS = {"static": Arm(static=True), "dynamic": Arm(static=False)}
#: Guidance as one UNet call at batch 2 against two calls at batch 1 (both static).
GUIDANCE_ARMS = {"batch 2 (one call)": Arm(split=1), "2 x batch 1": Arm(split=2)}
