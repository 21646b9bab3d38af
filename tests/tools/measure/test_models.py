"""The models the CPU benchmarks name (``sdaccel.tools.measure.models`` beside ``sdaccel.cpu.random_unet``):
checkpoints, labels, the VAE decoder's inputs."""

from __future__ import annotations

from sdaccel.cpu import random_unet as R
from sdaccel.tools.measure import models as B


def test_models_and_labels(tiny_sd15):
    assert R.checkpoint_folder("sd15") is None and B.label("sd15") == "sd15"
    assert R.checkpoint_folder(str(tiny_sd15)) == tiny_sd15 and B.label(str(tiny_sd15)) == tiny_sd15.name
    assert R.unet_config(str(tiny_sd15))["sample_size"] == R.unet_config(str(tiny_sd15))["sample_size"]
    assert B.vae_latents("sd15", 8, 3).shape == (3, 4, 8, 8)
