"""Training a tiny autoencoder: the data (the checkpoint's training images, their latents and the
VAE's decodes of them: :func:`training_data`) and the loop that fits the decoder to those decodes
and the encoder to the posterior means (:func:`train`)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from sdaccel.core.checkpoint import read_json
from sdaccel.tools.toys.taesd_config import TaesdConfig
from sdaccel.tools.toys.train import TrainConfig, encode_images, pixel_weights, warmup_cosine
from sdaccel.toy import dataset


def decode_with_vae(vae, latents, batch: int = 256):
    """The VAE's images (NCHW, [-1, 1]) of diffusion latents (scaled, as a pipeline has them)."""
    import torch

    scaling = vae.config.scaling_factor
    with torch.no_grad():
        return torch.cat(
            [vae.decode(latents[i : i + batch] / scaling).sample for i in range(0, len(latents), batch)]
        ).clamp(-1, 1)


def training_data(folder: Path, vae, config: TaesdConfig) -> dict:
    """The checkpoint's training images (as :mod:`sdaccel.tools.toys.train` drew them), one latent per
    image (a seeded draw of the VAE's posterior, scaled), the VAE's decode of it, the scaled
    posterior mean (the encoder's target) and the per-pixel loss weights."""
    import torch

    log_file = folder / "training_log.json"
    trained = read_json(log_file)["config"] if log_file.is_file() else {}
    base = TrainConfig()
    n = trained.get("train_images", base.train_images)
    n = min(n, config.train_images) if config.train_images > 0 else n
    size = trained.get("image_size", base.image_size)
    images, _ = dataset.make_dataset(n, trained.get("seed", base.seed), size, split="train")
    mean, std = encode_images(vae, images)
    noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(config.seed))
    scaling = vae.config.scaling_factor
    latents = (mean + std * noise) * scaling
    return {
        "latents": latents,
        "targets": decode_with_vae(vae, latents),
        "images": torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1,  # the VAE's input range
        "means": mean * scaling,
        "weights": pixel_weights(images, config.shape_weight, config.edge_weight),
        "size": size,
    }


def train(model, data: dict, config: TaesdConfig, log: dict, progress: bool = True) -> list[float]:
    """Train ``model`` (an ``AutoencoderTiny``) on ``data``: its decoder to the VAE's decodes
    (weighted squared + absolute error), its encoder to the scaled posterior means (squared
    error), one optimizer for both. Fills ``log`` and returns the decoder's losses."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = warmup_cosine(optimizer, config.warmup_steps, config.steps)
    rng = np.random.default_rng(config.seed)
    deadline = time.perf_counter() + 60 * config.minutes
    decoder_losses, encoder_losses = [], []
    model.train()
    bar = tqdm(total=config.steps, desc="taesd", disable=not progress, mininterval=10)
    for _ in range(config.steps):
        if time.perf_counter() > deadline:
            break
        idx = torch.from_numpy(rng.integers(0, len(data["latents"]), config.batch))
        error = model.decoder(data["latents"][idx]) - data["targets"][idx]
        weights = data["weights"][idx]
        decoder_loss = ((error**2 + error.abs()) * weights).mean() / weights.mean()
        encoder_loss = torch.nn.functional.mse_loss(model.encoder(data["images"][idx]), data["means"][idx])
        optimizer.zero_grad(set_to_none=True)
        (decoder_loss + encoder_loss).backward()
        optimizer.step()
        schedule.step()
        decoder_losses.append(decoder_loss.item())
        encoder_losses.append(encoder_loss.item())
        bar.update()
        if len(decoder_losses) % 100 == 0:
            bar.set_postfix(decoder=f"{np.mean(decoder_losses[-100:]):.4f}")
    bar.close()
    model.eval()
    log["steps_done"] = len(decoder_losses)
    log["stopped_by_time"] = len(decoder_losses) < config.steps
    log["decoder_loss"] = [float(f"{x:.4g}") for x in decoder_losses]
    log["encoder_loss"] = [float(f"{x:.4g}") for x in encoder_losses]
    return decoder_losses


def decoder_parameters(model) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if name.startswith("decoder."))
