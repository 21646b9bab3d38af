"""Measuring a jitted JAX program honestly: compile vs run time, FLOPs, utilisation and cost.

JAX dispatches work asynchronously and compiles on the first call, so a naive ``time.time()``
around a call measures neither the compile nor the run. The rules this module follows:

- **The first call compiles** (tracing, lowering to StableHLO, XLA optimisation); for SDXL on a
  TPU that is minutes. :func:`aot_compile` does it ahead of time with
  ``jax.jit(f).lower(*args).compile()`` and times lowering and compiling separately;
  :class:`AOTCache` keeps one such executable per input signature (the one compile cache of the
  JAX pipelines).
- **Steady state** is the median of several calls, each ended by ``jax.block_until_ready``
  (:func:`time_calls`); otherwise the clock stops when the work is *queued*, not done.
- **The persistent compilation cache** (:func:`enable_compilation_cache`) stores compiled
  executables on disk, keyed by the program, the devices and the compiler flags, so that the next
  *process* skips the compile (``sdaccel.tpu.serving.cache_probe`` runs a fresh process to show it).
- **FLOPs** come from XLA's own ``compiled.cost_analysis()`` (:func:`xla_flops`), with two
  caveats: for a program split over devices it counts one device's share, and the body of a
  ``while`` loop (``fori_loop``, ``scan``) is counted once, not once per step. :func:`utilisation`
  compares the achieved FLOP/s with the chip's peak from :data:`PEAK_BF16_FLOPS`.
- **Cost** per image and per 1,000 images follows from throughput and an hourly price
  (:func:`cost_per_image`).
- **Attention kernels** (:func:`time_attention`): XLA's, cuDNN's on GPUs, and the Pallas splash
  kernel on TPUs (``sdaccel.tpu.models.attention``), on one attention problem.

Sweeps over batch sizes and devices, resolution buckets and the cache probe drive the sharded
pipeline, so they live above it, in :mod:`sdaccel.tpu.serving`.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.compilation_cache import compilation_cache

from sdaccel.tpu.models.attention import AttentionImpl, attention

# ----------------------------------------------------------------------------------------------
# Chips
# ----------------------------------------------------------------------------------------------

#: Dense bf16 peak FLOP/s per device, by a piece of ``jax.Device.device_kind`` (matched
#: case-insensitively, longest first). Datasheet figures; edit or extend for your hardware.
#: A TPU v5e reports itself as "TPU v5 lite", a v6e as "TPU v6 lite".
PEAK_BF16_FLOPS: dict[str, float | None] = {
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v4": 275e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "H100": 989e12,
    "H200": 989e12,
    "cpu": None,  # no meaningful bf16 peak: utilisation is not reported on CPU
}


def peak_flops(device: jax.Device | None = None) -> float | None:
    """Peak bf16 FLOP/s of ``device`` (default: the first device), or ``None`` when unknown."""
    kind = (device or jax.devices()[0]).device_kind.lower()
    for name in sorted(PEAK_BF16_FLOPS, key=len, reverse=True):
        if name.lower() in kind:
            return PEAK_BF16_FLOPS[name]
    return None


def device_summary() -> dict:
    """Platform, device kind and count, process count, and the peak used for utilisation."""
    device = jax.devices()[0]
    return {
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
        "peak_bf16_flops_per_device": peak_flops(device),
    }


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


@dataclass
class Timing:
    """``first_s``: the first call (compile + run). ``run_s``: the median of ``runs_s``, the
    following calls. ``compile_s`` is their difference, the usual estimate of the compile cost."""

    first_s: float
    run_s: float
    runs_s: list[float] = field(default_factory=list)

    @property
    def compile_s(self) -> float:
        return max(self.first_s - self.run_s, 0.0)

    def as_dict(self) -> dict:
        return {**asdict(self), "compile_s": self.compile_s}


def block(x):
    """Wait for every array in ``x`` (any pytree) to be computed; return ``x``."""
    return jax.block_until_ready(x)


def time_calls(fn: Callable, *args, repeats: int = 5, **kwargs) -> Timing:
    """Call ``fn`` once (compiling it if it is a fresh ``jax.jit``), then ``repeats`` more times;
    each call waits for its result."""
    start = time.perf_counter()
    block(fn(*args, **kwargs))
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn(*args, **kwargs))
        runs.append(time.perf_counter() - start)
    return Timing(first, statistics.median(runs) if runs else first, runs)


@dataclass
class Compiled:
    """An ahead-of-time compiled executable and what it cost to make."""

    executable: Any
    lower_s: float
    compile_s: float
    flops: float | None  # per device, loop bodies once: see xla_flops

    def __call__(self, *args):
        return self.executable(*args)


def aot_compile(fn: Callable, *args, **jit_kwargs) -> Compiled:
    """``jax.jit(fn, **jit_kwargs).lower(*args).compile()``, timed in its two stages.

    ``fn`` may already be a ``jax.jit`` function (its own shardings are kept). ``args`` may be
    arrays or ``jax.ShapeDtypeStruct`` (with ``sharding=``): nothing runs, only shapes matter.
    The executable then accepts exactly those shapes, dtypes and shardings, and never recompiles.
    """
    jitted = fn if hasattr(fn, "lower") and not jit_kwargs else jax.jit(fn, **jit_kwargs)
    start = time.perf_counter()
    lowered = jitted.lower(*args)
    lowered_at = time.perf_counter()
    executable = lowered.compile()
    done = time.perf_counter()
    return Compiled(executable, lowered_at - start, done - lowered_at, xla_flops(executable))


def _dtype(x) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    return jnp.dtype(dtype) if dtype is not None else jnp.result_type(x)


class AOTCache:
    """``jax.jit(fn, **jit_kwargs)``, compiled ahead of time (:func:`aot_compile`) once per input
    signature: the tree structure and every leaf's shape, dtype and sharding. The one compile cache
    of :class:`sdaccel.tpu.pipeline.JaxPipeline` and :class:`sdaccel.tpu.sharded_pipeline.ShardedPipeline`.

    ``compile_s`` adds up the seconds spent lowering and compiling (read it before and after a
    call to see what the call compiled). ``mesh``: compile under ``jax.set_mesh(mesh)``.
    """

    def __init__(self, fn: Callable, *, mesh=None, **jit_kwargs):
        self.jitted = jax.jit(fn, **jit_kwargs)
        self.mesh = mesh
        self.executables: dict[tuple, Compiled] = {}
        self.compile_s = 0.0

    @staticmethod
    def signature(args) -> tuple:
        leaves, treedef = jax.tree.flatten(args)
        return treedef, tuple((tuple(np.shape(x)), _dtype(x), getattr(x, "sharding", None)) for x in leaves)

    def compile(self, *args) -> Compiled:
        """The executable for these arguments (arrays or ``jax.ShapeDtypeStruct``), compiled on
        first use."""
        key = self.signature(args)
        if key not in self.executables:
            with jax.set_mesh(self.mesh) if self.mesh is not None else nullcontext():
                compiled = aot_compile(self.jitted, *args)
            self.compile_s += compiled.lower_s + compiled.compile_s
            self.executables[key] = compiled
        return self.executables[key]

    def __call__(self, *args):
        return self.compile(*args)(*args)

    def __len__(self) -> int:
        return len(self.executables)

    def clear(self) -> None:
        """Drop every executable (and the device memory they hold)."""
        self.executables.clear()


def xla_flops(executable) -> float | None:
    """FLOPs of one call as XLA's cost model counts them, or ``None`` where the backend has no
    cost model. Per device for a partitioned program; a loop body counts once."""
    try:
        analysis = executable.cost_analysis()
    except NotImplementedError:
        return None
    if isinstance(analysis, list | tuple):  # older jax: one dict per program
        analysis = analysis[0] if analysis else {}
    flops = (analysis or {}).get("flops")
    return float(flops) if flops is not None and flops >= 0 else None


def utilisation(flops: float | None, seconds: float, peak: float | None, devices: int = 1) -> float | None:
    """Achieved / peak: ``flops`` done by ``devices`` devices together in ``seconds``, against
    ``devices * peak``. ``None`` when the FLOPs or the peak are unknown (CPU)."""
    if not flops or peak is None or seconds <= 0:
        return None
    return flops / seconds / (peak * devices)


def cost_per_image(images_per_s: float, price_per_hour: float) -> dict:
    """Dollars per image and per 1,000 images for a machine that costs ``price_per_hour`` (all
    its chips together) and makes ``images_per_s`` when kept busy."""
    per_image = price_per_hour / 3600.0 / images_per_s
    return {"per_image": per_image, "per_1000_images": 1000.0 * per_image, "price_per_hour": price_per_hour}


# ----------------------------------------------------------------------------------------------
# The persistent compilation cache
# ----------------------------------------------------------------------------------------------


def enable_compilation_cache(
    path: str | os.PathLike, min_compile_time_s: float = 0.0, min_entry_size_bytes: int = -1
):
    """Store every compiled executable under ``path`` and look there before compiling.

    JAX's defaults only store programs that took at least 1 s to compile; ``0`` stores all (so
    a small demo is cached too; for SDXL every program is far above any threshold).
    ``min_entry_size_bytes=-1`` disables the size floor. Call it before the first compile, or
    it is picked up on the next (the cache is re-initialised here).
    """
    Path(path).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_s))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
    compilation_cache.reset_cache()


@dataclass
class CacheEvents:
    hits: int = 0
    misses: int = 0


@contextmanager
def count_cache_events():
    """Count persistent-cache hits and misses inside the ``with`` block (``jax.monitoring`` events)."""
    events = CacheEvents()

    def listener(event: str, **_):
        if event == "/jax/compilation_cache/cache_hits":
            events.hits += 1
        elif event == "/jax/compilation_cache/cache_misses":
            events.misses += 1

    jax.monitoring.register_event_listener(listener)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_listener(listener)


def probe_program(size: int = 256, depth: int = 8):
    """The small stand-in program of the probe: ``depth`` dense layers (each a separate op, so the
    compiler has some work) and a ``ShapeDtypeStruct`` to compile it for."""

    def fn(x):
        for i in range(depth):
            w = jnp.cos(jnp.arange(size * size, dtype=x.dtype).reshape(size, size) * (i + 1) / size**2)
            x = jnp.tanh(x @ w)
        return x.sum()

    return fn, jax.ShapeDtypeStruct((size, size), jnp.float32)


# ----------------------------------------------------------------------------------------------
# Attention kernels
# ----------------------------------------------------------------------------------------------


def attention_implementations(platform: str | None = None) -> list[str]:
    """The choices of ``sdaccel.tpu.models.attention.use`` that run natively on ``platform``: ``"xla"``
    everywhere, ``"cudnn"`` on NVIDIA GPUs, the Pallas ``"splash"`` kernel on TPUs."""
    platform = platform or jax.default_backend()
    return ["xla", *({"gpu": ["cudnn"], "tpu": ["splash"]}.get(platform, []))]


def time_attention(
    batch: int,
    q_len: int,
    kv_len: int,
    heads: int,
    head_dim: int,
    dtype=jnp.bfloat16,
    repeats: int = 5,
    implementations: list[str] | None = None,
    interpret: bool = False,
) -> dict[str, dict]:
    """Time each attention implementation (:func:`attention_implementations`, or those named) on one
    (batch, len, heads, head_dim) problem with the models' own ``attention`` function, and its
    largest difference from the first. Splash attention runs its kernel only for lengths that its
    128-token blocks divide (XLA otherwise); ``interpret=True`` runs the kernel in the Pallas
    interpreter (any backend, very slow): only for checking it."""
    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(keys[0], (batch, q_len, heads, head_dim), dtype)
    k, v = (jax.random.normal(kk, (batch, kv_len, heads, head_dim), dtype) for kk in keys[1:])
    reference = None
    out = {}
    for name in implementations or attention_implementations():
        impl = AttentionImpl(name, interpret=interpret)
        fn = jax.jit(lambda q, k, v, impl=impl: attention(q, k, v, impl=impl))
        timing = time_calls(fn, q, k, v, repeats=repeats)
        result = fn(q, k, v).astype(jnp.float32)
        reference = result if reference is None else reference
        out[name] = {**timing.as_dict(), "max_abs_diff": float(jnp.abs(result - reference).max())}
    return out
