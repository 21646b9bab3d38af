"""``sdaccel.cpu.tiny_vae``: a tiny autoencoder (TAESD) is checked against the export before
anything is loaded or written (its conversion and images are in tests/tpu/models/test_taesd.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from sdaccel.core.checkpoint import CheckpointError
from sdaccel.cpu.tiny_vae import check_tiny_vae, with_tiny_decoder


@pytest.fixture
def export(tiny_sd15, tmp_path):
    """The configs of an export of the tiny SD 1.5 checkpoint (no model is ever loaded)."""
    folder = tmp_path / "export"
    (folder / "vae_decoder").mkdir(parents=True)
    shutil.copy2(tiny_sd15 / "vae" / "config.json", folder / "vae_decoder" / "config.json")
    shutil.copy2(tiny_sd15 / "model_index.json", folder / "model_index.json")
    return folder


def _tiny(folder, **config):
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"_class_name": "AutoencoderTiny", **config}))
    save_file({"w": np.zeros(2, np.float32)}, str(folder / "diffusion_pytorch_model.safetensors"))
    return folder


def test_the_export_and_the_tiny_autoencoder_are_checked_first(export, tmp_path):
    with pytest.raises(CheckpointError, match="is not an OpenVINO export"):
        check_tiny_vae(tmp_path / "nothing", export)
    with pytest.raises(CheckpointError, match="No config.json"):
        check_tiny_vae(export, tmp_path)
    (tmp_path / "kl").mkdir()
    (tmp_path / "kl" / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL"}))
    with pytest.raises(CheckpointError, match="not an AutoencoderTiny"):
        check_tiny_vae(export, tmp_path / "kl")


def test_a_tiny_autoencoder_for_other_latents_is_refused(export, tiny_sd15, tmp_path):
    own = json.loads((tiny_sd15 / "vae" / "config.json").read_text())
    levels = len(own["block_out_channels"])
    channels = own.get("latent_channels", 4)
    fits = _tiny(tmp_path / "fits", latent_channels=channels, num_decoder_blocks=[1] * levels)
    assert check_tiny_vae(export, fits)["_class_name"] == "AutoencoderTiny"
    other = _tiny(tmp_path / "other", latent_channels=channels + 1, num_decoder_blocks=[1] * levels)
    with pytest.raises(CheckpointError, match="made for another model"):
        check_tiny_vae(export, other)


def test_the_folder_with_a_tiny_decoder_is_another_folder(export):
    with pytest.raises(ValueError, match="dst must be another folder"):
        with_tiny_decoder(export, export, dst=export)
