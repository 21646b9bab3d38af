"""What every pipeline of a comparison shares: the same initial noise in (:func:`paired_latents`)
and the same uint8 images out (:func:`uint8_images`), so that two rows of a table differ by the
pipeline alone.

Used by :mod:`sdaccel.toy.adherence`, :mod:`sdaccel.toy.adherence_steps` and
:mod:`sdaccel.tools.toys.distill_eval`; light to import (torch only when noise is drawn).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import read_config
from sdaccel.cpu.export import vae_scale_factor_of


def paired_latents(folder: str | Path, n: int, size: int, seed: int = 0) -> np.ndarray:
    """(n, C, size/f, size/f) float32 noise, image ``i`` drawn by ``torch.randn`` from ``seed + i``
    (f: the VAE's downsampling factor, read from its config)."""
    import torch

    side = size // vae_scale_factor_of(folder, "vae")
    shape = (read_config(folder, "unet")["in_channels"], side, side)
    return np.stack(
        [torch.randn(shape, generator=torch.Generator().manual_seed(seed + i)).numpy() for i in range(n)]
    )


def uint8_images(arrays) -> list[np.ndarray]:
    """Float images in [0, 1] (a pipeline's output, (N, H, W, 3)) -> a list of uint8 images,
    rounded to the nearest level and clipped to [0, 255]."""
    return [np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8) for a in np.asarray(arrays, np.float32)]
