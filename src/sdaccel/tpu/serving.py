"""Tuning the sharded pipeline for serving: throughput sweeps and resolution buckets.

- **Throughput** over batch sizes and device counts (:func:`sweep`), skipping what the devices do
  not divide or what does not fit in memory, and saying so.
- **Resolution buckets** (:class:`Buckets`): every new input shape is a new program. Compile the
  few shapes you serve up front, into the pipeline's own compile cache, so the first request at
  each does not wait for XLA.

The persistent compilation cache, and the probe that shows it from a fresh process, are in
:mod:`sdaccel.tpu.compilation` (``compilation.cache_probe``). This module sits above both
:mod:`sdaccel.tpu.compilation` (generic measurement) and :mod:`sdaccel.tpu.sharded_pipeline`
(the pipeline it drives).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
from tqdm.auto import tqdm

from sdaccel.tpu.compilation import time_calls
from sdaccel.tpu.sharded_pipeline import ShardedPipeline
from sdaccel.tpu.sharding import make_mesh

# ----------------------------------------------------------------------------------------------
# Sweeps
# ----------------------------------------------------------------------------------------------


def sweep(
    make_call: Callable[[Any, int], Callable[[], Any]],
    batch_sizes: Sequence[int],
    device_counts: Sequence[int],
    repeats: int = 3,
    progress: bool = True,
) -> list[dict]:
    """Throughput over batch sizes and device counts.

    ``make_call(mesh, batch)`` returns a no-argument function that makes ``batch`` images on
    ``mesh`` (a ``"data"`` mesh of the first ``n`` devices). Combinations whose batch the devices
    do not divide, or whose program runs out of device memory, are skipped and listed with
    ``skipped`` set (the reason). Each row holds ``devices``,
    ``batch``, ``compile_s``, ``run_s``, ``images_per_s`` and ``images_per_s_per_device``.
    """
    combos = [(n, b) for n in device_counts for b in batch_sizes]
    if progress:
        combos = tqdm(combos, desc="sweep", unit="config", leave=False)
    rows = []
    for n, batch in combos:
        if batch % n:
            rows.append(
                {"devices": n, "batch": batch, "skipped": f"{n} devices do not divide a batch of {batch}"}
            )
            continue
        try:
            call = make_call(make_mesh(n, devices=jax.devices()[:n]), batch)
            timing = time_calls(call, repeats=repeats)
        except jax.errors.JaxRuntimeError as err:  # the largest batches may not fit: note it, go on
            if "RESOURCE_EXHAUSTED" not in str(err):
                raise
            rows.append(
                {"devices": n, "batch": batch, "skipped": f"out of memory: {str(err).splitlines()[0][:200]}"}
            )
            continue
        rows.append(
            {
                "devices": n,
                "batch": batch,
                "compile_s": timing.compile_s,
                "run_s": timing.run_s,
                "images_per_s": batch / timing.run_s,
                "images_per_s_per_device": batch / timing.run_s / n,
            }
        )
    return rows


# ----------------------------------------------------------------------------------------------
# Resolution buckets
# ----------------------------------------------------------------------------------------------

#: The (height, width) pairs SDXL was trained on around one megapixel (a subset of its aspect buckets).
SDXL_BUCKETS: tuple[tuple[int, int], ...] = (
    (1024, 1024),
    (1152, 896),
    (896, 1152),
    (1216, 832),
    (832, 1216),
    (1344, 768),
    (768, 1344),
)


def nearest_bucket(
    height: int, width: int, buckets: Iterable[tuple[int, int]] = SDXL_BUCKETS
) -> tuple[int, int]:
    """The bucket whose aspect ratio is closest to ``height / width`` (ties: the closer area)."""
    return min(buckets, key=lambda b: (abs(b[0] / b[1] - height / width), abs(b[0] * b[1] - height * width)))


class Buckets:
    """A few (height, width) shapes whose programs are compiled into ``pipe``'s own compile cache
    (``pipe.cache``) before the first request, for one batch size, step count and guidance scale.

    :meth:`warm` compiles; a request at a warmed size then runs without compiling. Round other
    sizes to a warmed one with :meth:`nearest`.
    """

    def __init__(
        self,
        pipe: ShardedPipeline,
        batch: int,
        steps: int | None = None,
        guidance_scale: float | None = None,
    ):
        self.pipe, self.batch = pipe, batch
        self.steps, self.guidance_scale = steps, guidance_scale
        self.sizes: list[tuple[int, int]] = []

    def warm(self, sizes: Iterable[tuple[int, int]], progress: bool = False) -> dict[tuple[int, int], float]:
        """Compile every size; return ``{(height, width): lower_s + compile_s}``."""
        sizes = [tuple(s) for s in sizes]
        seconds = {}
        for height, width in tqdm(
            sizes, desc="compile buckets", unit="shape", disable=not progress, leave=False
        ):
            compiled = self.pipe.warm(self.batch, height, width, self.steps, self.guidance_scale)
            seconds[(height, width)] = compiled.lower_s + compiled.compile_s
            if (height, width) not in self.sizes:
                self.sizes.append((height, width))
        return seconds

    def __contains__(self, size) -> bool:
        return tuple(size) in self.sizes

    def nearest(self, height: int, width: int) -> tuple[int, int]:
        """The warmed size closest in aspect ratio to ``height / width`` (ties: the closer area)."""
        if not self.sizes:
            raise ValueError("No size is warmed yet: call Buckets.warm([(height, width), ...]) first.")
        return nearest_bucket(height, width, self.sizes)
