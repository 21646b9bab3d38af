"""A tiny autoencoder's settings and inputs: the arguments follow the VAE, and bad settings name
their flag (refused before a run: test_distill_taesd.py)."""

from pathlib import Path

import pytest

from sdaccel.tools.toys.taesd_config import TaesdConfig, check_destination, tiny_config

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "checkpoints" / "tiny-shapes-sdxl"


def test_tiny_config_follows_the_vae_and_is_a_taesd_every_loader_takes():
    from sdaccel.core.checkpoint import check_tiny_vae_compatible, read_config
    from sdaccel.tpu.models.taesd import TinyVAEConfig

    vae = read_config(BASE, "vae")
    arguments = tiny_config(vae, TaesdConfig(width=8, decoder_blocks=2, encoder_blocks=1))
    assert arguments["decoder_block_out_channels"] == (8, 8, 8)  # one level per VAE level
    assert arguments["num_decoder_blocks"] == (2, 2, 2) and arguments["num_encoder_blocks"] == (1, 1, 1)
    assert arguments["latent_channels"] == vae["latent_channels"] and arguments["scaling_factor"] == 1.0
    config = TinyVAEConfig.from_dict({"_class_name": "AutoencoderTiny", **arguments})
    assert config.scale_factor == 2 ** (len(vae["block_out_channels"]) - 1)
    check_tiny_vae_compatible(arguments, BASE)


def test_a_bad_value_names_its_flag_and_an_existing_folder_needs_overwrite(tmp_path):
    TaesdConfig().check()
    with pytest.raises(ValueError, match="--batch must be >= 1"):
        TaesdConfig(batch=0).check()
    assert check_destination(tmp_path / "new", overwrite=False) == tmp_path / "new"
    with pytest.raises(FileExistsError, match="--overwrite"):
        check_destination(tmp_path, overwrite=False)
    assert check_destination(tmp_path, overwrite=True) == tmp_path
