"""Distil a tiny autoencoder (TAESD's architecture, diffusers' ``AutoencoderTiny``) for a trained tiny
shapes checkpoint, on a CPU, in minutes.

    python -m sdaccel.tools.toys.distill_taesd checkpoints/tiny-shapes-sdxl checkpoints/tiny-shapes-sdxl-taesd \\
        --lora checkpoints/tiny-shapes-sdxl-lcm-lora

TAESD (``madebyollin/taesd``, ``madebyollin/taesdxl``) is a small convolutional decoder trained to
map a model's latents to the images its VAE decodes from them, with no normalisation or attention
(:mod:`sdaccel.tpu.models.taesd` draws it). This module makes one for a trained tiny shapes checkpoint
(:mod:`sdaccel.tools.toys.train`), so that notebook 07's smoke run decodes with a trained tiny autoencoder
that is smaller and faster than the toy's VAE decoder, as TAESD is than Stable Diffusion's:

* **latents**: the checkpoint's own training images (the number, seed and size in its
  ``training_log.json``), each through the VAE's encoder, one draw of the posterior per image
  (mean + std x noise, seeded), times the VAE's ``scaling_factor``: the *diffusion* latents, which
  a TAESD decodes as they are (its config says ``scaling_factor`` 1.0, and the pipelines divide by
  the scaling factor of the autoencoder they decode with);
* **decoder**: trained to reproduce the VAE's decode of each latent (clamped to [-1, 1]): the
  student learns the VAE, not the data set. Loss: squared plus absolute error per pixel, weighted
  up on the shape and more on its outline (:func:`sdaccel.tools.toys.train.pixel_weights`, as the VAE was
  trained), since the outline is what tells a circle from a square;
* **encoder**: trained too, to the VAE's posterior mean (scaled), with a squared error: the folder
  is a whole ``AutoencoderTiny``, whose ``encode`` gives the latents the checkpoint's VAE would;
* **size**: one width (``width``, 16) at every level, as many levels as the VAE (so the latents have
  the VAE's channels and size), ``decoder_blocks`` (3) blocks per decoder level and
  ``encoder_blocks`` (1) per encoder level after the first. TAESD keeps one block at its last,
  full-resolution level; the toy's 32x32 shapes keep three there, because their outlines are drawn
  at that level.

The folder written is the diffusers layout of any TAESD (``config.json`` and
``diffusion_pytorch_model.safetensors``), so every loader of one reads it:
``AutoencoderTiny.from_pretrained``, :func:`sdaccel.core.checkpoint.resolve_tiny_vae` and through it
``OVPipeline.from_pretrained(..., vae=folder)`` and ``JaxPipeline.from_pretrained(..., vae=folder)``.
Beside it: ``taesd_log.json`` (config, loss curves, times, CPU, evaluation), ``samples.png`` and a
``README.md``. The evaluation decodes the same latents with the VAE and with the tiny autoencoder:
held-out data-set images through the VAE's encoder, and held-out prompts through diffusers'
pipeline (the base sampler, and with ``--lora`` the LCM-LoRA at 4 steps), then PSNR and SSIM against
the VAE's images and the adherence of each. The run is seeded and runs on one torch thread by
default (:mod:`sdaccel.tools.toys.train` says why); ``--minutes`` caps the training loop.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import read_config, read_json
from sdaccel.core.env import cpu_model
from sdaccel.core.faults import fault_point
from sdaccel.core.staging import replace_json, replace_text, staged_folder
from sdaccel.core.tables import markdown_table
from sdaccel.tools.toys.distill_config import add_config_flags, config_from_args
from sdaccel.tools.toys.distill_eval import plot_samples
from sdaccel.toy import dataset

#: What the folder holds beside the weights and config diffusers writes.
LOG_NAME = "taesd_log.json"
WEIGHTS = "diffusion_pytorch_model.safetensors"


@dataclass
class TaesdConfig:
    """Every knob of a run (recorded in ``taesd_log.json``)."""

    seed: int = 0
    threads: int = 1
    minutes: float = 20.0  # wall-time cap of the training loop
    steps: int = 2500  # optimizer steps (the learning rate follows a cosine over them)
    batch: int = 32
    lr: float = 5e-3
    warmup_steps: int = 50
    width: int = 16  # channels at every level (TAESD: 64)
    decoder_blocks: int = 3  # blocks per decoder level
    encoder_blocks: int = 1  # blocks per encoder level after the first (which has one)
    shape_weight: float = 2.0  # loss weight added on the shape's pixels
    edge_weight: float = 6.0  # and on a one-pixel band either side of its outline
    train_images: int = 0  # 0: as many as the checkpoint was trained on; else n (same seed)
    # evaluation: held-out prompts and data-set images, decoded by both autoencoders
    eval_prompts: int = 64
    base_steps: int = 20
    base_guidance_scale: float = 6.0
    lcm_steps: int = 4
    lcm_guidance_scale: float = 1.0

    def check(self) -> None:
        """Raise, naming the fix, on a value that cannot work."""
        if not self.minutes > 0:
            raise ValueError(f"--minutes must be > 0, got {self.minutes}.")
        if self.train_images < 0:
            raise ValueError(f"--train-images must be >= 0 (0: all), got {self.train_images}.")
        for name in ("steps", "batch", "width", "decoder_blocks", "threads", "eval_prompts", "lcm_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        if self.encoder_blocks < 0:
            raise ValueError(f"--encoder-blocks must be >= 0, got {self.encoder_blocks}.")
        if not self.lr > 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}.")
        if self.shape_weight < 0 or self.edge_weight < 0:
            raise ValueError(
                f"--shape-weight and --edge-weight must be >= 0, got {self.shape_weight} and {self.edge_weight}."
            )


# --------------------------------------------------------------------------------------------
# 1. The inputs, checked before anything runs


def checkpoint_vae(folder: str | Path) -> dict:
    """The config of ``folder``'s VAE (an ``AutoencoderKL`` of at least two levels); a clear error
    for a folder that is no diffusers checkpoint, or whose VAE a tiny autoencoder cannot follow."""
    folder = Path(folder)
    if not (folder / "model_index.json").is_file():
        raise FileNotFoundError(
            f"{folder}: no model_index.json; pass a trained diffusers checkpoint folder "
            "(e.g. checkpoints/tiny-shapes-sdxl)."
        )
    if not (folder / "vae" / "config.json").is_file():
        raise FileNotFoundError(
            f"{folder} has no vae/config.json: a tiny autoencoder is distilled from its VAE."
        )
    vae = read_config(folder, "vae")
    if vae.get("_class_name") != "AutoencoderKL":
        raise ValueError(
            f"{folder}/vae is a {vae.get('_class_name')!r}; the tiny autoencoder learns an AutoencoderKL's decodes."
        )
    if len(vae["block_out_channels"]) < 2:
        raise ValueError(f"{folder}'s VAE has one level; a tiny autoencoder needs at least 2.")
    return vae


def check_destination(dst: str | Path, overwrite: bool) -> Path:
    """``dst`` as a path, unless it exists and ``overwrite`` is not set (then a clear error)."""
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists; pass --overwrite to replace it, or choose another folder.")
    return dst


def tiny_config(vae: dict, config: TaesdConfig) -> dict:
    """The ``AutoencoderTiny`` arguments for the VAE config ``vae``: its latent channels, one level
    per level of it (so the same image-to-latent scale), ``config.width`` channels everywhere;
    ``scaling_factor`` 1.0 (it decodes the diffusion latents as they are) and TAESD's
    ``latent_magnitude`` / ``latent_shift`` (used only to store latents in 8 bits)."""
    levels = len(vae["block_out_channels"])
    return {
        "in_channels": vae.get("in_channels", 3),
        "out_channels": vae.get("out_channels", 3),
        "latent_channels": vae.get("latent_channels", 4),
        "encoder_block_out_channels": (config.width,) * levels,
        "decoder_block_out_channels": (config.width,) * levels,
        "num_encoder_blocks": (1, *[config.encoder_blocks] * (levels - 1)),
        "num_decoder_blocks": (config.decoder_blocks,) * levels,
        "act_fn": "relu",
        "upsample_fn": "nearest",
        "upsampling_scaling_factor": 2,
        "latent_magnitude": 3,
        "latent_shift": 0.5,
        "force_upcast": False,
        "scaling_factor": 1.0,
    }


# --------------------------------------------------------------------------------------------
# 2. The training data: the checkpoint's training images, their latents and the VAE's decodes


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

    from sdaccel.tools.toys.train import TrainConfig, encode_images, pixel_weights

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


# --------------------------------------------------------------------------------------------
# 3. The training loop


def train(model, data: dict, config: TaesdConfig, log: dict, progress: bool = True) -> list[float]:
    """Train ``model`` (an ``AutoencoderTiny``) on ``data``: its decoder to the VAE's decodes
    (weighted squared + absolute error), its encoder to the scaled posterior means (squared
    error), one optimizer for both. Fills ``log`` and returns the decoder's losses."""
    import torch
    from tqdm.auto import tqdm

    from sdaccel.tools.toys.train import warmup_cosine

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


# --------------------------------------------------------------------------------------------
# 4. The evaluation: the same latents through both decoders


def uint8(images) -> list[np.ndarray]:
    """NCHW images in [-1, 1] -> uint8 HWC images, as the pipelines post-process them."""
    from sdaccel.toy.comparison import uint8_images

    return uint8_images((images / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy())


def compare_decoders(name: str, latents, prompts: list[str], vae, model) -> tuple[dict, dict]:
    """One evaluation row: PSNR and SSIM of the tiny autoencoder's images of ``latents`` (diffusion
    latents) against the VAE's, and the adherence of each to ``prompts``; and the images."""
    import torch

    from sdaccel.cpu.quality import compare_images

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

    from sdaccel.toy.adherence_steps import image_size
    from sdaccel.toy.comparison import paired_latents

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
    from sdaccel.tools.toys.train import encode_images

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


# --------------------------------------------------------------------------------------------
# 5. The model card

README = """# {name}

A **tiny autoencoder** for [`{base}`](../{base}/README.md), in TAESD's architecture (diffusers'
`AutoencoderTiny`): it decodes that model's latents to nearly the images its VAE decodes, with a
decoder of {decoder_params:,} parameters against the VAE decoder's {vae_params:,} ({ratio:.1f}x
smaller; TAESD's is about 40x smaller than Stable Diffusion's). It was distilled from that VAE on a
CPU in {minutes:.1f} minutes by `sdaccel.tools.toys.distill_taesd`{used_by}.

![held-out prompts: the VAE's decode above the tiny autoencoder's, from the same latents](samples.png)

*(held-out prompts, {last} latents: the VAE's decode above the tiny autoencoder's, from the same latents)*

## Against the VAE

The same latents decoded by both, {images} held-out images per row (combinations never seen in
training): PSNR and SSIM of the tiny autoencoder's images against the VAE's, and the prompt
adherence (`dataset.adherence`, colour and shape right) of each. diffusers {diffusers}, torch
{torch} CPU, fp32; the prompts' latents from diffusers' pipeline, image `i` from `torch.randn`
seeded with `i`:

{table}

Decode time in PyTorch on {cpu}, {threads}, {decode_images} latents at once: the VAE
{vae_ms:.2f} ms per image, the tiny autoencoder {tiny_ms:.2f} ms ({speed:.1f}x faster).{measured_in}

## How to use it

It decodes the *diffusion* latents as they are (`scaling_factor` 1.0 in its config, as every TAESD),
in place of the checkpoint's VAE:

```python
# diffusers
import torch
from diffusers import AutoencoderTiny, DiffusionPipeline
pipe = DiffusionPipeline.from_pretrained("{base_path}", dtype=torch.float32)
pipe.vae = AutoencoderTiny.from_pretrained("{path}")

# OpenVINO (this repository): the export's decoder replaced by this one
from sdaccel.cpu.export import export_pipeline
from sdaccel.cpu.pipeline import OVPipeline
export_pipeline("{base_path}", "build/ov-shapes")
pipe = OVPipeline.from_pretrained("build/ov-shapes", vae="{path}")

# JAX (this repository)
from sdaccel.tpu.pipeline import JaxPipeline
pipe = JaxPipeline.from_pretrained("{base_path}", vae="{path}")
```

## How it was made

```bash
{command}
```

{config_list}

Latents: the base model's {train_images} training images (`dataset.make_dataset`, as its
`training_log.json` says), through its VAE's encoder, one seeded draw of the posterior each, times
its `scaling_factor` {scaling}. The decoder learns the VAE's decode of each (clamped to [-1, 1]) with
the squared plus absolute error per pixel, weighted {shape_weight:g} more on the shape and
{edge_weight:g} more on its outline; the encoder learns the posterior mean, scaled (squared error);
one AdamW, learning rate {lr:g} with {warmup} warm-up steps and a cosine decay over {steps} steps,
batch {batch}. Architecture: {width} channels at every one of {levels} levels, {decoder_blocks}
blocks per decoder level (TAESD keeps one at its last level, the full resolution, where the toy's
outlines are drawn), {encoder_blocks} per encoder level after the first.

Wall time: **{train_s:.0f} s of training** ({done} steps{stopped}), {data_s:.0f} s to make the
data and {eval_s:.0f} s of evaluation on {cpu}. `taesd_log.json` holds the config, the loss curves,
the times and the evaluation. Seeded throughout: with one thread and the same torch build the run
repeats on the same machine, as long as the time cap is not reached.
{tried}
## License

Apache-2.0, as the rest of this repository, and as the base model: made from it alone.
"""


#: What a shipped tiny autoencoder is used for, per output folder: the card says so.
USED_BY = {
    "tiny-shapes-sdxl-taesd": ", and is what notebook 07's smoke run\ndecodes with when it adds TAESD",
    "tiny-shapes-sd15-taesd": (
        ", and is what the SD 1.5 rows of the\nwhole-image quality table "
        "(`sdaccel.toy.whole_image_quality`) decode with when they add TAESD"
    ),
}

#: Where a shipped tiny autoencoder's decode is timed in OpenVINO, per output folder.
MEASURED_IN = {
    "tiny-shapes-sdxl-taesd": " Notebook 07\nmeasures it in OpenVINO, beside the whole image.",
}

#: What was tried before the shipped recipe, per output folder: the card quotes it.
RECIPES_TRIED = {
    "tiny-shapes-sdxl-taesd": """
Recipes tried and not kept (the decoder alone, one torch thread, seed 0; scored on 256 held-out
data-set images through the VAE's encoder, where the VAE's own decodes score 0.957):

* 16 channels, blocks (3, 3, 1) as TAESD's last level, plain squared error, 2500 steps: PSNR
  31.8 dB, adherence 0.738;
* the same with the weighted squared + absolute error, 2000 steps: 32.7 dB, 0.797;
* blocks (3, 3, 2), 2500 steps: 33.8 dB, 0.836; blocks (3, 3, 3), kept: 34.4 dB, 0.848;
* 24 channels, blocks (2, 2, 1), 2000 steps: 34.0 dB, 0.875, with a decoder of 90 k parameters;
* the kept recipe with `--edge-weight 12` (the whole run, the table's 64 images): 34.65, 32.41 and
  31.22 dB, adherence 0.891, 0.938 and 0.906: no better.
""",
}


def remake_command(checkpoint: Path, dst: Path, config: TaesdConfig, lora: Path | None) -> str:
    """The command line that makes this folder again (the flags that differ from the defaults)."""
    default = TaesdConfig()
    flags = [
        f"--{f.name.replace('_', '-')} {getattr(config, f.name)}"
        for f in dataclasses.fields(TaesdConfig)
        if f.type in ("int", "float") and getattr(config, f.name) != getattr(default, f.name)
    ]
    if lora is not None:
        flags.insert(0, f"--lora {lora}")
    return " ".join(["python -m sdaccel.tools.toys.distill_taesd", str(checkpoint), str(dst), *flags])


def readme_text(dst: Path, log: dict) -> str:
    """:data:`README` filled in from a run's ``log`` for the folder ``dst``."""
    import diffusers
    import torch

    config = TaesdConfig(**log["config"])
    checkpoint = Path(log["checkpoint"])
    lora = Path(log["lora"]) if log.get("lora") else None
    rows = log["evaluation"]["rows"]
    times = log["evaluation"]["decode_ms_per_image"]
    tiny = log["tiny_config"]
    return README.format(
        name=dst.name,
        base=checkpoint.name,
        base_path=str(checkpoint),
        path=str(dst),
        decoder_params=log["decoder_parameters"]["TAESD"],
        vae_params=log["decoder_parameters"]["VAE"],
        ratio=log["decoder_parameters"]["VAE"] / log["decoder_parameters"]["TAESD"],
        minutes=log["wall_s"]["train"] / 60,
        last=rows[-1]["latents"],
        images=rows[0]["images"],
        diffusers=diffusers.__version__,
        torch=torch.__version__.split("+")[0],
        table=evaluation_table(rows),
        cpu=log["cpu"],
        threads="one torch thread" if config.threads == 1 else f"{config.threads} torch threads",
        decode_images=times["images"],
        vae_ms=times["VAE"],
        tiny_ms=times["TAESD"],
        speed=times["VAE"] / times["TAESD"],
        command=remake_command(checkpoint, dst, config, lora),
        config_list="Config (`TaesdConfig`): "
        + ", ".join(f"`{k}={v}`" for k, v in dataclasses.asdict(config).items()),
        train_images=log["data"]["images"],
        scaling=log["vae_scaling_factor"],
        shape_weight=config.shape_weight,
        edge_weight=config.edge_weight,
        lr=config.lr,
        warmup=config.warmup_steps,
        steps=config.steps,
        batch=config.batch,
        width=config.width,
        levels=len(tiny["num_decoder_blocks"]),
        decoder_blocks=config.decoder_blocks,
        encoder_blocks=config.encoder_blocks,
        train_s=log["wall_s"]["train"],
        done=log["steps_done"],
        stopped=", stopped by the time cap" if log["stopped_by_time"] else "",
        data_s=log["wall_s"]["data"],
        eval_s=log["wall_s"].get("evaluation", 0.0),
        tried=RECIPES_TRIED.get(dst.name, ""),
        used_by=USED_BY.get(dst.name, ""),
        measured_in=MEASURED_IN.get(dst.name, ""),
    )


def refresh_readme(folder: str | Path) -> Path:
    """Write ``folder``'s README.md again from its ``taesd_log.json`` (what ``--readme-only`` does)."""
    folder = Path(folder)
    replace_text(folder / "README.md", readme_text(folder, read_json(folder / LOG_NAME)))
    return folder / "README.md"


# --------------------------------------------------------------------------------------------
# 6. The run, and the command line


def run(
    checkpoint: str | Path,
    dst: str | Path,
    config: TaesdConfig | None = None,
    lora: str | Path | None = None,
    overwrite: bool = False,
    evaluate_model: bool = True,
    progress: bool = True,
) -> dict:
    """Distil a tiny autoencoder for ``checkpoint``'s VAE into ``dst`` (checked first; written to a
    staging folder beside it and renamed at the end). Returns the log."""
    import torch
    from diffusers import AutoencoderKL, AutoencoderTiny

    # 1. Check the inputs, before anything runs
    config = config or TaesdConfig()
    config.check()
    checkpoint, dst = Path(checkpoint), check_destination(dst, overwrite)
    vae_config = checkpoint_vae(checkpoint)
    if lora is not None:
        from sdaccel.toy.adherence_steps import lora_file

        lora = lora_file(lora).parent

    # 2. The VAE and the training data
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    arguments = tiny_config(vae_config, config)
    log: dict = {
        "config": dataclasses.asdict(config),
        "checkpoint": str(checkpoint),
        "lora": None if lora is None else str(lora),
        "tiny_config": {k: list(v) if isinstance(v, tuple) else v for k, v in arguments.items()},
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "wall_s": {},
    }
    start = time.perf_counter()
    vae = AutoencoderKL.from_pretrained(checkpoint / "vae").eval().requires_grad_(False)
    data = training_data(checkpoint, vae, config)
    log["data"] = {"images": len(data["latents"]), "size": data["size"]}
    log["vae_scaling_factor"] = vae.config.scaling_factor
    log["wall_s"]["data"] = round(time.perf_counter() - start, 1)

    # 3. The tiny autoencoder, trained on the VAE's decodes and posterior means
    model = AutoencoderTiny(**arguments)
    log["decoder_parameters"] = {"VAE": decoder_parameters(vae), "TAESD": decoder_parameters(model)}
    start = time.perf_counter()
    train(model, data, config, log, progress=progress)
    log["wall_s"]["train"] = round(time.perf_counter() - start, 1)

    # 4. The weights, their evaluation, samples and card, and the log, published together
    with staged_folder(dst) as stage:
        model.save_pretrained(stage)
        fault_point("distill_taesd.weights-saved")
        if evaluate_model:
            start = time.perf_counter()
            result = evaluate(checkpoint, vae, model, config, lora, log)
            log["wall_s"]["evaluation"] = round(time.perf_counter() - start, 1)
            # one column per held-out prompt, the VAE's decode above the tiny autoencoder's
            plot_samples(stage / "samples.png", result, rows=list(result["images"]))
            replace_text(stage / "README.md", readme_text(dst, log))
        replace_json(stage / LOG_NAME, log)
        stage.chmod(0o755)  # a staging folder is private; the autoencoder is for everyone to read
        for path in stage.iterdir():
            path.chmod(0o644)
    return log


def build_parser() -> argparse.ArgumentParser:
    """The command line: the checkpoint, the output folder and a flag per number of :class:`TaesdConfig`."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", type=Path, help="a trained shapes checkpoint (diffusers layout)")
    parser.add_argument("out_dir", type=Path, help="folder to write the tiny autoencoder into")
    parser.add_argument(
        "--lora",
        type=Path,
        default=None,
        help="an LCM-LoRA of the checkpoint: its latents join the evaluation",
    )
    add_config_flags(parser, TaesdConfig)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing out_dir")
    parser.add_argument("--no-eval", action="store_true", help="skip the evaluation, samples and README")
    parser.add_argument(
        "--readme-only",
        action="store_true",
        help="only write out_dir/README.md again from its taesd_log.json",
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.readme_only:
        print(refresh_readme(args.out_dir))
        return read_json(args.out_dir / LOG_NAME)
    config = config_from_args(args, TaesdConfig)
    log = run(args.checkpoint, args.out_dir, config, args.lora, args.overwrite, not args.no_eval)
    print(json.dumps({k: log[k] for k in ("wall_s", "steps_done", "stopped_by_time", "decoder_parameters")}))
    if "evaluation" in log:
        print(evaluation_table(log["evaluation"]["rows"]))
    return log


if __name__ == "__main__":
    main()
