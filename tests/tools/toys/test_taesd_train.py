"""A tiny autoencoder's training data: the checkpoint's own images, one latent each, and the VAE's
decodes of them (the loop itself: test_distill_taesd.py's short run)."""

from pathlib import Path

from sdaccel.core.checkpoint import read_config
from sdaccel.tools.toys.taesd_config import TaesdConfig, tiny_config
from sdaccel.tools.toys.taesd_train import decoder_parameters, training_data

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "checkpoints" / "tiny-shapes-sdxl"


def test_the_data_pairs_each_latent_with_the_vaes_decode_and_the_decoder_is_counted_alone():
    from diffusers import AutoencoderKL, AutoencoderTiny

    vae = AutoencoderKL.from_pretrained(BASE / "vae").eval().requires_grad_(False)
    config = TaesdConfig(train_images=8)
    data = training_data(BASE, vae, config)
    size = data["size"]
    scale = 2 ** (len(vae.config.block_out_channels) - 1)
    assert data["latents"].shape == (8, vae.config.latent_channels, size // scale, size // scale)
    assert data["targets"].shape == data["images"].shape == (8, 3, size, size)
    assert data["targets"].min() >= -1 and data["targets"].max() <= 1
    assert data["means"].shape == data["latents"].shape and len(data["weights"]) == 8

    model = AutoencoderTiny(**tiny_config(read_config(BASE, "vae"), config))
    decoder = sum(p.numel() for p in model.decoder.parameters())
    assert decoder_parameters(model) == decoder < sum(p.numel() for p in model.parameters())
