"""What the CPU benchmarks measure beside the UNet of :mod:`sdaccel.cpu.random_unet`: the parts of a
text-to-image export (:data:`PIPELINE_PARTS`), the float variants and the VAE decoder recipes, a
model's short name (:func:`label`), the VAE decoder's config and inputs (:func:`vae_config`,
:func:`vae_latents`), and synthetic UNet calibration data (:func:`synthetic_calibration`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from sdaccel.cpu.calibration import CalibrationSet
from sdaccel.cpu.random_unet import MODELS, component_config, unet_inputs

#: The components of a text-to-image export, per reference architecture.
PIPELINE_PARTS = {
    "sd15": ("text_encoder", "unet", "vae_decoder"),
    "sdxl": ("text_encoder", "text_encoder_2", "unet", "vae_decoder"),
}

#: The VAE decoder recipes of lever ``vae_int8`` (``sdaccel.cpu.quantize_vae``).
VAE_VARIANTS = ("int8_weights", "hybrid", "full_int8")

FLOAT_VARIANTS = {"ov_f32": "f32", "ov_bf16": "bf16"}


def label(model: str) -> str:
    """A short name for results and folders: the key, a folder's name, or the hub id."""
    if model in MODELS or not Path(model).is_dir():
        return model
    return Path(model).name


def vae_config(model: str) -> dict:
    return component_config(model, "vae")


def vae_latents(model: str, latent: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` decoder inputs ``[count, C, latent, latent]``: unit Gaussian diffusion latents,
    unscaled as the pipeline unscales them (``/ scaling_factor``)."""
    cfg = vae_config(model)
    rng = np.random.default_rng(seed)
    shape = (count, cfg.get("latent_channels", 4), latent, latent)
    return (rng.standard_normal(shape, dtype=np.float32) / cfg.get("scaling_factor", 0.18215)).astype(
        np.float32
    )


def synthetic_calibration(
    folder: str, model: str, batch: int, latent: int, count: int, extra: dict | None = None
):
    """``count`` UNet inputs spread over the timestep range, written as a CalibrationSet."""
    timesteps = np.linspace(999, 1, count).round().astype(int)
    samples = []
    for i, t in enumerate(timesteps):
        sample = unet_inputs(model, batch, latent, timestep=int(t), seed=100 + i)
        rng = np.random.default_rng(200 + i)
        sample.update(
            {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in (extra or {}).items()}
        )
        samples.append(sample)
    shutil.rmtree(folder, ignore_errors=True)
    return CalibrationSet.save(samples, folder)
