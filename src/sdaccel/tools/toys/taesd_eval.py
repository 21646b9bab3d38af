"""The evaluation of a tiny autoencoder against the VAE it learned: the same latents through both
decoders (held-out data-set images through the VAE's encoder, held-out prompts through diffusers'
pipeline), PSNR, SSIM and adherence per row, and the decode time of each (:func:`evaluate`)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from sdaccel.core.tables import markdown_table
from sdaccel.cpu.quality import compare_images
from sdaccel.tools.toys.taesd_config import TaesdConfig
from sdaccel.tools.toys.taesd_train import decode_with_vae
from sdaccel.tools.toys.train import encode_images
from sdaccel.toy import dataset
from sdaccel.toy.adherence_steps import image_size
from sdaccel.toy.comparison import paired_latents, uint8_images


def uint8(images) -> list[np.ndarray]:
    """NCHW images in [-1, 1] -> uint8 HWC images, as the pipelines post-process them."""

    return uint8_images((images / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy())


def compare_decoders(name: str, latents, prompts: list[str], vae, model) -> tuple[dict, dict]:
    """One evaluation row: PSNR and SSIM of the tiny autoencoder's images of ``latents`` (diffusion
    latents) against the VAE's, and the adherence of each to ``prompts``; and the images."""
    import torch

    reference = uint8(decode_with_vae(vae, latents))
    with torch.no_grad():
        ours = uint8(model.decode(latents).sample)
    pair = compare_images(reference, ours)
    vae_adherence, tiny_adherence = dataset.adherence(reference, prompts), dataset.adherence(ours, prompts)
    row = {
        "latents": name,
        "images": len(prompts),
        "psnr_mean": round(pair["psnr_mean"], 2),
        "ssim_mean": round(pair["ssim_mean"], 4),
        **{f"vae_{k}": vae_adherence[k] for k in ("score", "colour", "shape")},
        **{f"taesd_{k}": tiny_adherence[k] for k in ("score", "colour", "shape")},
    }
    return row, {"VAE": reference, "TAESD": ours}


def pipeline_latents(checkpoint: Path, prompts: list[str], steps: int, guidance: float, lora=None):
    """The final (diffusion) latents of diffusers' pipeline for ``prompts``, from the paired noise
    of :func:`sdaccel.toy.comparison.paired_latents`: the checkpoint's own sampler, or with
    ``lora`` the LCM-LoRA and ``LCMScheduler``."""
    import torch
    from diffusers import DiffusionPipeline, LCMScheduler

    noise = paired_latents(checkpoint, len(prompts), image_size(checkpoint), seed=0)
    pipe = DiffusionPipeline.from_pretrained(checkpoint, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    if lora is not None:
        pipe.load_lora_weights(lora)
        pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config)
    with torch.no_grad():
        return pipe(
            prompts,
            num_inference_steps=steps,
            guidance_scale=guidance,
            latents=torch.from_numpy(noise),
            output_type="latent",
        ).images


def decode_ms(decode, latents, repeats: int = 5) -> float:
    """Median milliseconds per image of ``decode(latents)`` (PyTorch, this process's threads)."""
    import torch

    times = []
    with torch.no_grad():
        decode(latents)
        for _ in range(repeats):
            start = time.perf_counter()
            decode(latents)
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times) / len(latents)


def evaluate(checkpoint: Path, vae, model, config: TaesdConfig, lora: Path | None, log: dict) -> dict:
    """Fill ``log["evaluation"]``: a row per kind of latents (held-out data-set images through the
    VAE's encoder; held-out prompts through the base sampler, and through the LCM-LoRA when
    ``lora`` is given), and the decode time of both decoders. Returns the images of the last row."""

    n = config.eval_prompts
    images, captions = dataset.make_dataset(n, config.seed + 1, int(log["data"]["size"]), split="heldout")
    mean, _ = encode_images(vae, images)
    rows = []
    row, shown = compare_decoders("data set", mean * vae.config.scaling_factor, captions, vae, model)
    rows.append({**row, "steps": None, "guidance_scale": None})
    prompts = dataset.heldout_prompts(n, seed=0)
    runs = [("base sampler", config.base_steps, config.base_guidance_scale, None)]
    if lora is not None:
        runs.append(("LCM-LoRA", config.lcm_steps, config.lcm_guidance_scale, lora))
    for name, steps, guidance, adapter in runs:
        latents = pipeline_latents(checkpoint, prompts, steps, guidance, adapter)
        row, shown = compare_decoders(name, latents, prompts, vae, model)
        rows.append({**row, "steps": steps, "guidance_scale": guidance})
    batch = mean * vae.config.scaling_factor
    log["evaluation"] = {
        "rows": rows,
        "decode_ms_per_image": {
            "VAE": round(decode_ms(lambda z: vae.decode(z / vae.config.scaling_factor).sample, batch), 3),
            "TAESD": round(decode_ms(lambda z: model.decode(z).sample, batch), 3),
            "images": len(batch),
        },
    }
    return {"images": shown, "prompts": prompts if len(rows) > 1 else captions}


def evaluation_table(rows: list[dict]) -> str:
    """The evaluation rows as a Markdown table."""
    header = ["latents", "steps", "guidance", "images", "PSNR dB", "SSIM", "adherence VAE", "adherence TAESD"]
    cells = [
        [
            r["latents"],
            "-" if r["steps"] is None else r["steps"],
            "-" if r["guidance_scale"] is None else f"{r['guidance_scale']:g}",
            r["images"],
            f"**{r['psnr_mean']:.2f}**",
            f"{r['ssim_mean']:.3f}",
            f"{r['vae_score']:.3f}",
            f"**{r['taesd_score']:.3f}**",
        ]
        for r in rows
    ]
    return markdown_table(header, cells)
