"""Compiling a JAX function ahead of time: once per input signature, timed, with XLA's FLOP count.

``jax.jit(f)`` compiles on its first call, inside it; :func:`aot_compile` does it up front with
``jax.jit(f).lower(*args).compile()`` and times lowering and compiling separately, on arrays or
on ``jax.ShapeDtypeStruct`` (nothing runs). :class:`AOTCache` keeps one such executable per input
signature: it is the one compile cache of :class:`sdaccel.tpu.pipeline.JaxPipeline` and
:class:`sdaccel.tpu.sharded_pipeline.ShardedPipeline`, and compiles for the CPU with
:data:`CPU_COMPILER_OPTIONS`, without which a bfloat16 model holds a float32 copy of every weight
while it runs (see there). :func:`xla_flops` reads XLA's FLOP count of a compiled program (see its
caveats).

This module sits below the pipelines; measuring them (timers, utilisation, the persistent
compilation cache and its probe) is :mod:`sdaccel.tpu.compilation`, above them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: XLA options for programs compiled for the CPU (:func:`platform_compiler_options`).
#:
#: XLA's CPU backend computes the dots and convolutions of a bfloat16 (or float16) model in float32:
#: it converts each weight to float32 before its use. With its default, concurrency-optimised
#: scheduler every one of those converts runs first, at the start of the program, and inside a
#: sampling loop they are loop-invariant and hoisted before it; either way a float32 copy of all
#: the weights is alive at once, twice their bfloat16 bytes on top of them (SDXL's UNet: 10.3 GB
#: more; one 256x256 step peaked at 18 GiB). The memory-optimised scheduler converts each weight
#: just before its use, and without the loop-invariant code motion pass the converts stay in the
#: loop, so one weight's float32 copy is alive at a time. A 512x512 SDXL step in bfloat16: XLA's
#: temporaries 9.7 -> 0.6 GiB, the process's peak above 16.5 GiB -> 10.1 GiB, and it compiles in
#: half the time (``benchmarks/results/jax_memory_sdxl.md``). The images are bit for bit the same;
#: what the pass would hoist (the cross-attention keys and values of the text) is computed at every
#: step, a small part of one.
CPU_COMPILER_OPTIONS: dict[str, str] = {
    "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
    "xla_disable_hlo_passes": "while-loop-invariant-code-motion",
}


def platform_compiler_options(platform: str) -> dict[str, str] | None:
    """The XLA options :class:`AOTCache` compiles with for ``platform`` (``"cpu"``, ``"tpu"``...):
    :data:`CPU_COMPILER_OPTIONS` for the CPU, none elsewhere."""
    return dict(CPU_COMPILER_OPTIONS) if platform == "cpu" and CPU_COMPILER_OPTIONS else None


@dataclass
class Compiled:
    """An ahead-of-time compiled executable and what it cost to make."""

    executable: Any
    lower_s: float
    compile_s: float
    flops: float | None  # per device, loop bodies once: see xla_flops

    def __call__(self, *args):
        return self.executable(*args)


def aot_compile(fn: Callable, *args, compiler_options: dict | None = None, **jit_kwargs) -> Compiled:
    """``jax.jit(fn, **jit_kwargs).lower(*args).compile(compiler_options)``, timed in its two stages.

    ``fn`` may already be a ``jax.jit`` function (its own shardings are kept). ``args`` may be
    arrays or ``jax.ShapeDtypeStruct`` (with ``sharding=``): nothing runs, only shapes matter.
    The executable then accepts exactly those shapes, dtypes and shardings, and never recompiles.
    ``compiler_options``: XLA options for this compile (see :data:`CPU_COMPILER_OPTIONS`).
    """
    jitted = fn if hasattr(fn, "lower") and not jit_kwargs else jax.jit(fn, **jit_kwargs)
    start = time.perf_counter()
    lowered = jitted.lower(*args)
    lowered_at = time.perf_counter()
    executable = lowered.compile(compiler_options) if compiler_options else lowered.compile()
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
    ``compiler_options``: XLA options for every compile; by default those of the platform it
    compiles for, the mesh's or the default backend's (:func:`platform_compiler_options`: on the
    CPU, :data:`CPU_COMPILER_OPTIONS`); ``{}`` for XLA's defaults.
    """

    def __init__(self, fn: Callable, *, mesh=None, compiler_options: dict | None = None, **jit_kwargs):
        self.jitted = jax.jit(fn, **jit_kwargs)
        self.mesh = mesh
        if compiler_options is None:
            platform = mesh.devices.flat[0].platform if mesh is not None else jax.default_backend()
            compiler_options = platform_compiler_options(platform)
        self.compiler_options = dict(compiler_options or {})
        self.executables: dict[tuple, Compiled] = {}
        self.compile_s = 0.0

    @staticmethod
    def signature(args) -> tuple:
        leaves, treedef = jax.tree.flatten(args)
        return treedef, tuple((tuple(np.shape(x)), _dtype(x), getattr(x, "sharding", None)) for x in leaves)

    def compile(self, *args) -> Compiled:
        """The executable for these arguments (arrays or ``jax.ShapeDtypeStruct``), compiled on
        first use. The matmul precision in force (``jax.default_matmul_precision``) is part of the
        key, as it is of ``jax.jit``'s own cache: it is read when the program is traced, so a
        program compiled under another precision is not this one."""
        key = (self.signature(args), jax.config.jax_default_matmul_precision)
        if key not in self.executables:
            with jax.set_mesh(self.mesh) if self.mesh is not None else nullcontext():
                compiled = aot_compile(self.jitted, *args, compiler_options=self.compiler_options)
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
