"""How well a distilled LCM-LoRA draws, through diffusers' own pipeline (also the check that
diffusers reads the adapter file): held-out adherence of the base model and of the adapter at a
few steps, its Markdown table and a grid of samples.

:func:`sdaccel.tools.toys.distill.run` calls :func:`evaluate` after training; the rows go into
``distill_log.json`` and the model card (:mod:`sdaccel.tools.toys.model_card`).
"""

from __future__ import annotations

from pathlib import Path

from sdaccel.core.checkpoint import read_config
from sdaccel.core.tables import markdown_table
from sdaccel.tools.toys.distill_config import DistillConfig
from sdaccel.toy import dataset
from sdaccel.toy.comparison import paired_latents, uint8_images


def diffusers_images(pipe, prompts, latents, steps: int, guidance_scale: float, batch: int = 32):
    """uint8 images from a diffusers pipeline, from the given initial noise (NCHW, unscaled)."""
    import torch

    images = []
    for start in range(0, len(prompts), batch):
        with torch.no_grad():
            out = pipe(
                prompts[start : start + batch],
                num_inference_steps=steps,
                guidance_scale=guidance_scale,
                latents=torch.from_numpy(latents[start : start + batch]),
                output_type="np",
            ).images
        images += uint8_images(out)
    return images


def adherence_row(sampler: str, lora: bool, steps: int, guidance_scale: float, images, prompts) -> dict:
    """One row of the evaluation: how the images were made, and their adherence."""
    return {
        "sampler": sampler,
        "lora": lora,
        "steps": steps,
        "guidance_scale": guidance_scale,
        **dataset.adherence(images, prompts),
    }


def evaluate(checkpoint: Path, adapter: Path, config: DistillConfig, log: dict) -> dict:
    """Held-out adherence through diffusers: the base model (its scheduler, ``base_steps``,
    ``base_guidance_scale``) and, after ``load_lora_weights`` and ``LCMScheduler``, the adapter at
    each of ``eval_steps``. Returns the images by row name."""
    import torch
    from diffusers import DiffusionPipeline, LCMScheduler

    # 1. The held-out prompts and their initial noise
    size = read_config(checkpoint, "unet")["sample_size"] * 2 ** (
        len(read_config(checkpoint, "vae")["block_out_channels"]) - 1
    )
    prompts = dataset.heldout_prompts(config.eval_prompts, seed=0)
    latents = paired_latents(checkpoint, len(prompts), size, seed=0)

    # 2. The base model with its own sampler: at base_steps, and at 4 steps
    pipe = DiffusionPipeline.from_pretrained(checkpoint, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    base_sampler = type(pipe.scheduler).__name__
    rows, images = [], {}
    base = f"base {config.base_steps} steps"
    images[base] = diffusers_images(pipe, prompts, latents, config.base_steps, config.base_guidance_scale)
    rows.append(
        adherence_row(
            base_sampler, False, config.base_steps, config.base_guidance_scale, images[base], prompts
        )
    )
    base_4 = diffusers_images(pipe, prompts, latents, 4, config.base_guidance_scale)
    rows.append(adherence_row(base_sampler, False, 4, config.base_guidance_scale, base_4, prompts))

    # 3. The adapter with the LCM sampler, at each of eval_steps
    pipe.load_lora_weights(adapter)
    pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config)
    for steps in config.eval_steps:
        name = f"lcm {steps} steps"
        images[name] = diffusers_images(pipe, prompts, latents, steps, config.lcm_guidance_scale)
        rows.append(
            adherence_row("LCMScheduler", True, steps, config.lcm_guidance_scale, images[name], prompts)
        )

    # 4. The rows into the log
    log["adherence"] = {
        "pipeline": "diffusers fp32",
        "prompts": len(prompts),
        "split": "heldout",
        "rows": rows,
    }
    return {"images": images, "prompts": prompts}


def adherence_table(rows: list[dict]) -> str:
    """The rows of :func:`evaluate` as a Markdown table (the score in bold)."""
    header = ["sampler", "LoRA", "steps", "guidance", "score (colour + shape)", *dataset.ATTRIBUTES]
    cells = [
        [
            r["sampler"],
            "LCM-LoRA" if r["lora"] else "-",
            r["steps"],
            f"{r['guidance_scale']:g}",
            f"**{r['score']:.3f}**",
            *(f"{r[k]:.3f}" for k in dataset.ATTRIBUTES),
        ]
        for r in rows
    ]
    return markdown_table(header, cells)


def plot_samples(path: Path, result: dict, n: int = 8, rows: list[str] | None = None) -> None:
    """A grid: one column per held-out prompt, one row per entry of ``result["images"]`` named in
    ``rows`` (by default the samplers: LCM 1/2/4/8, then base 20). The tiny autoencoder's command
    draws its decoders' rows with it too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = min(n, len(result["prompts"]))
    names = rows or [k for k in result["images"] if k.startswith("lcm")] + [
        k for k in result["images"] if k.startswith("base")
    ]
    fig, axes = plt.subplots(len(names), n, figsize=(1.6 * n, 1.8 * len(names)), squeeze=False)
    for r, name in enumerate(names):
        for c in range(n):
            ax = axes[r, c]
            ax.imshow(result["images"][name][c])
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, fontsize=8)
            if r == 0:
                prompt = result["prompts"][c]
                ax.set_title(prompt.replace(" on ", "\non ").replace(", ", "\n"), fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
