"""Train a tiny SDXL-architecture text-to-image model on coloured shapes, on a CPU, in minutes.

    python -m sdaccel.tools.toys.train checkpoints/tiny-shapes-sdxl
    python -m sdaccel.tools.toys.train checkpoints/tiny-shapes-sd15 --layout sd15    # SD 1.x sibling

The random-weight checkpoints of :mod:`sdaccel.tools.toys.random_checkpoints` exercise every code path but draw noise, so
nothing can say whether an optimisation kept the *pictures* right. This script makes the smallest
real model that draws what a prompt asks for: the procedural data set of :mod:`sdaccel.toy.dataset`
("a red circle on a blue background, top left"), 32x32 pixels, learned by the same recipe and
the same diffusers classes as SDXL, only small. It writes the exact folder layout of
``stabilityai/stable-diffusion-xl-base-1.0`` so that ``StableDiffusionXLPipeline.from_pretrained``
(and every loader of this repository) reads it.

The stages, each one a function below:

1. **Tokenizers** (:func:`write_tokenizer`): a CLIP byte-level BPE vocabulary whose merges spell
   every caption word as one token, as the real CLIP vocabulary does for common words.
2. **Text encoders** (:func:`build_text_encoders`): SDXL's two CLIP encoders (the second with a
   projection), small and random, *frozen*. Random encoders are fine: different prompts give
   different hidden states, and the UNet learns to read them.
3. **VAE** (:func:`train_vae`): an ``AutoencoderKL`` with three levels (latents 1/4 of the image
   side, 4 channels: 32x32x3 -> 8x8x4), trained first on reconstruction with a tiny KL term, as
   the SD VAE was. Its ``scaling_factor`` is set to ``1 / std`` of the latents, as SD's 0.18215
   and SDXL's 0.13025 were, so that diffusion sees unit-variance latents.
4. **UNet** (:func:`train_unet`): a ``UNet2DConditionModel`` with SDXL's conditioning: the
   penultimate hidden states of both encoders concatenated as cross-attention context, the pooled
   (projected) embedding of encoder 2 and the six size/crop ``time_ids`` through
   ``addition_embed_type="text_time"``. Objective: the standard epsilon prediction, on SDXL's
   noise schedule (scaled-linear betas 0.00085-0.012, 1000 steps). One caption in ten is replaced
   by zeros, which is the *unconditional* input the pipeline gives for classifier-free guidance
   (``force_zeros_for_empty_prompt``). The saved weights are an exponential moving average.
5. **Evaluation** (:func:`evaluate`): the saved folder is loaded by diffusers'
   ``StableDiffusionXLPipeline`` and asked for held-out prompts; :func:`sdaccel.toy.dataset.adherence`
   reads the images back.

``--layout sd15`` writes the SD 1.x layout instead (``StableDiffusionPipeline``): the first
encoder alone, its *last* hidden state as context, no added conditioning, the encoded empty
prompt as the unconditional input, attention at the full latent resolution, and DDIM where SD 1.5
ships PNDM (see :func:`build_scheduler`; :data:`LAYOUTS`).

Everything is seeded; the config, the loss curves, the wall times and the adherence go into
``training_log.json`` (with ``training_loss.png`` and ``samples.png``) beside the weights.

Why these sizes: the whole run has to fit in about half an hour of one shared CPU core. The
latents are 8x8 because the UNet's cost grows with their area (16x16 costs ~6x more per step),
and the images are 32x32 rather than 64x64 because a VAE that packs an 8x8 patch into one latent
(64x64 -> 8x8) learned outlines several times slower than one that packs 4x4 (32x32 -> 8x8).
One torch thread by default: with other processes on the machine, two threads were measured 2-8x
*slower* per step than one (``--threads 2`` on an idle machine).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdaccel.core import staging
from sdaccel.core.faults import fault_point
from sdaccel.tools.toys.random_checkpoints import (
    SD15_COMPONENTS,
    SD_NOISE_SCHEDULE,
    SDXL_COMPONENTS,
    bytes_to_unicode,
    clip_text_encoder,
    write_model_index,
)
from sdaccel.toy import dataset

#: Words that become single tokens: every word of the shapes captions, plus a few common ones.
WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        "a an on background".split()
        + list(dataset.COLOURS)
        + list(dataset.SHAPES)
        + " ".join(dataset.POSITIONS).split()
        + "the of in at with and photo picture small large".split()
    )
)


#: What differs between the two checkpoint layouts this script writes. SDXL: two text encoders,
#: ``text_time`` added conditioning, no attention at the full latent resolution, linear
#: projections into the transformers, Euler. SD 1.x: one encoder (its last hidden state), attention
#: at the full latent resolution and none at the lowest, 1x1-conv projections, DDIM.
LAYOUTS = {
    "sdxl": {
        "pipeline": "StableDiffusionXLPipeline",
        "components": SDXL_COMPONENTS,
        "down_blocks": ("DownBlock2D", "CrossAttnDownBlock2D"),
        "use_linear_projection": True,
    },
    "sd15": {
        "pipeline": "StableDiffusionPipeline",
        "components": {**SD15_COMPONENTS, "scheduler": ("diffusers", "DDIMScheduler")},
        "down_blocks": ("CrossAttnDownBlock2D", "DownBlock2D"),
        "use_linear_projection": False,
    },
}


@dataclass
class TrainConfig:
    """Every knob of a training run (recorded in ``training_log.json``)."""

    layout: str = "sdxl"  # or "sd15": see LAYOUTS
    seed: int = 0
    threads: int = 1
    image_size: int = 32
    train_images: int = 4096
    # frozen text encoders (both: hidden size, layers)
    text_hidden: int = 32
    text_layers: int = 3
    # VAE
    vae_channels: tuple[int, ...] = (16, 32, 64)  # three levels: latents 1/4 of the image side
    vae_steps: int = 1500
    vae_batch: int = 32
    vae_lr: float = 3e-3
    vae_kl_weight: float = 1e-6
    vae_shape_weight: float = 2.0
    vae_edge_weight: float = 6.0
    # UNet
    unet_channels: tuple[int, ...] = (32, 64)
    unet_layers_per_block: int = 1
    unet_transformer_layers: tuple[int, ...] = (1, 1)
    unet_steps: int = 4500
    unet_batch: int = 64
    unet_lr: float = 2e-3
    warmup_steps: int = 20
    ema_decay: float = 0.999
    cond_dropout: float = 0.1
    # evaluation with the diffusers pipeline
    eval_prompts: int = 64
    eval_steps: int = 25
    guidance_scale: float = 5.0

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {self.layout!r}")

    @property
    def latent_size(self) -> int:
        return self.image_size // 2 ** (len(self.vae_channels) - 1)


#: A run small enough for a test: seconds, and a checkpoint that loads but draws nothing useful.
SMOKE = TrainConfig(
    threads=1,
    train_images=64,
    text_hidden=8,
    text_layers=1,
    vae_channels=(4, 4),
    image_size=16,
    vae_steps=2,
    vae_batch=8,
    unet_channels=(8, 8),
    unet_steps=3,
    unet_batch=8,
    warmup_steps=1,
    eval_prompts=2,
    eval_steps=2,
)


# --------------------------------------------------------------------------------------------
# 1. Tokenizers


def _bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """CLIP's BPE on one word: merge the lowest-ranked adjacent pair until none is known."""
    pieces = [*word[:-1], word[-1] + "</w>"]
    while len(pieces) > 1:
        pairs = [(ranks.get(p, len(ranks)), i) for i, p in enumerate(zip(pieces, pieces[1:], strict=False))]
        rank, i = min(pairs)
        if rank == len(ranks):
            break
        pieces = [*pieces[:i], pieces[i] + pieces[i + 1], *pieces[i + 2 :]]
    return pieces


def write_tokenizer(folder: Path, pad_token: str) -> int:
    """Write a CLIP tokenizer whose vocabulary spells each of :data:`WORDS` as one token.

    As in CLIP, every byte has a token with and without the end-of-word marker ``</w>``, merges
    build whole words, and the two special tokens take the last two ids (so the end-of-text token
    is the largest id, which CLIP's pooling looks for). BPE applies merges by rank, lowest first,
    so a merge learned for one word ("r e" of "red") can block the merges planned for another
    ("g r", "gr e" of "green"); each word therefore gets merges until it really comes out as one
    token, checked by running the same BPE. A merge added later has a higher rank than all before
    it, so it never changes a word already finished.
    """
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    ranks: dict[tuple[str, str], int] = {}
    for word in WORDS:
        while len(pieces := _bpe(word, ranks)) > 1:
            pair = (pieces[0], pieces[1])
            ranks[pair] = len(ranks)
            vocab.setdefault(pair[0] + pair[1], len(vocab))
    for special in ("<|startoftext|>", "<|endoftext|>"):
        vocab[special] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    merges = "\n".join(f"{a} {b}" for (a, b), _ in sorted(ranks.items(), key=lambda kv: kv[1]))
    (folder / "merges.txt").write_text(f"#version: 0.2\n{merges}\n")
    tokenizer = CLIPTokenizer.from_pretrained(folder, pad_token=pad_token, model_max_length=77)
    tokenizer.save_pretrained(folder)
    for word in WORDS:  # the check the docstring promises, with the real tokenizer
        if tokenizer.tokenize(word) != [word + "</w>"]:
            raise AssertionError(f"{word!r} tokenizes as {tokenizer.tokenize(word)}")
    return len(vocab)


# --------------------------------------------------------------------------------------------
# 2. Text encoders and the SDXL conditioning


def build_text_encoders(folder: Path, config: TrainConfig):
    """Tokenizers and frozen CLIP encoders (two for SDXL, one for SD 1.x), saved into ``folder``;
    returns them. The first encoder is the same for both layouts."""
    from transformers import CLIPTokenizer

    vocab = write_tokenizer(folder / "tokenizer", pad_token="<|endoftext|>")
    h, n = config.text_hidden, config.text_layers
    encoders = [clip_text_encoder(vocab, h, n, "quick_gelu", None, config.seed)]
    encoders[0].save_pretrained(folder / "text_encoder")
    names = ["tokenizer"]
    if config.layout == "sdxl":
        write_tokenizer(folder / "tokenizer_2", pad_token="!")  # SDXL's second tokenizer pads with "!"
        encoders.append(clip_text_encoder(vocab, h, n, "gelu", h, config.seed + 1))
        encoders[1].save_pretrained(folder / "text_encoder_2")
        names.append("tokenizer_2")
    return [CLIPTokenizer.from_pretrained(folder / name) for name in names], encoders


def encode_prompts(prompts: list[str], tokenizers, encoders):
    """The text conditioning, as the diffusers pipelines' ``encode_prompt`` computes it.

    SDXL (two encoders): ``prompt_embeds`` (B, 77, h1 + h2), the penultimate hidden states of both
    encoders concatenated on the feature axis, and ``pooled`` (B, proj), encoder 2's projected
    embedding. SD 1.x (one encoder): its last hidden state (after the final layer norm), and
    ``pooled`` is None.
    """
    import torch

    with torch.no_grad():
        ids = [
            t(prompts, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
            for t in tokenizers
        ]
        if len(encoders) == 1:
            return encoders[0](ids[0])[0], None
        outs = [encoder(i, output_hidden_states=True) for encoder, i in zip(encoders, ids, strict=True)]
    return torch.cat([out.hidden_states[-2] for out in outs], dim=-1), outs[-1][0]


def sdxl_time_ids(size: int):
    """SDXL's micro-conditioning for an uncropped ``size`` x ``size`` image: (original_size,
    crop_top_left, target_size), the values the pipeline passes at that resolution."""
    import torch

    return torch.tensor([size, size, 0, 0, size, size], dtype=torch.float32)


# --------------------------------------------------------------------------------------------
# 3. VAE


def _rounded(losses: list[float]) -> list[float]:
    """Four significant digits: the loss curve, not the noise in the last bits, for the log."""
    return [float(f"{x:.4g}") for x in losses]


def _progress(stage: str, step: int, total: int, losses: list[float]) -> None:
    if step % max(1, total // 20) == 0 or step == total:
        print(f"{stage} step {step}/{total}  loss {np.mean(losses[-50:]):.4f}", flush=True)


def _to_tensor(images: np.ndarray):
    """uint8 (N, H, W, 3) -> float32 (N, 3, H, W) in [-1, 1], the VAE's input range."""
    import torch

    return torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1


def _to_images(x) -> np.ndarray:
    return ((x.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()


def pixel_weights(images: np.ndarray, shape_weight: float, edge_weight: float):
    """Per-pixel loss weights (N, 1, H, W): 1 on the background, ``1 + shape_weight`` on the
    shape, and ``edge_weight`` more on a one-pixel band either side of its outline.

    A plain reconstruction loss is dominated by the flat background, and the VAE learns the
    outline (the only thing that tells a circle from a square) last; weighting it brings that
    forward several-fold. The background colour is read from the corner, which no shape reaches.
    """
    import torch
    from scipy import ndimage

    shape = np.abs(images.astype(np.int16) - images[:, :1, :1].astype(np.int16)).sum(-1) > 0
    edge = np.stack([ndimage.binary_dilation(m) & ~ndimage.binary_erosion(m) for m in shape])
    return torch.from_numpy(1 + shape_weight * shape + edge_weight * edge).float()[:, None]


def warmup_cosine(optimizer, warmup: int, total: int):
    """The learning-rate schedule of both trainings (and of :mod:`sdaccel.tools.toys.distill`): a cosine
    from 1 at the first step to 0 at ``total``, times a linear ramp over the first ``warmup`` steps."""
    import torch

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup) * 0.5 * (1 + np.cos(np.pi * step / total))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_vae(images: np.ndarray, config: TrainConfig, log: dict):
    """Train an AutoencoderKL to reconstruct ``images``; return it (eval mode, unscaled).

    The loss is the weighted (:func:`pixel_weights`) sum of squared and absolute errors of the
    reconstruction from a *sampled* latent, plus ``vae_kl_weight`` times the KL divergence to a
    unit Gaussian, as for the SD VAEs. The posterior's log-variance starts at -8 (std 0.02), so
    the sampling noise does not drown the latents before the encoder has learned anything; the
    tiny KL term then keeps them from drifting to arbitrary scales.
    """
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(config.seed + 3)
    levels = len(config.vae_channels)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * levels,
        up_block_types=["UpDecoderBlock2D"] * levels,
        block_out_channels=list(config.vae_channels),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=config.image_size,
        force_upcast=False,
    )
    with torch.no_grad():
        vae.quant_conv.bias[4:] = -8.0  # the log-variance half of the posterior's moments
    optimizer = torch.optim.AdamW(vae.parameters(), lr=config.vae_lr, weight_decay=0.0)
    schedule = warmup_cosine(optimizer, config.warmup_steps, config.vae_steps)
    data = _to_tensor(images)
    weights = pixel_weights(images, config.vae_shape_weight, config.vae_edge_weight)
    rng = np.random.default_rng(config.seed + 3)
    losses = []
    vae.train()
    for _ in range(config.vae_steps):
        idx = torch.from_numpy(rng.integers(0, len(data), config.vae_batch))
        x, w = data[idx], weights[idx]
        posterior = vae.encode(x).latent_dist
        error = vae.decode(posterior.sample()).sample - x
        loss = ((error**2 + error.abs()) * w).mean() / w.mean()
        loss = loss + config.vae_kl_weight * posterior.kl().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        _progress("vae", len(losses), config.vae_steps, losses)
    log["vae_loss"] = _rounded(losses)
    return vae.eval()


def encode_images(vae, images: np.ndarray, batch: int = 128):
    """Posterior means and standard deviations of ``images``, (N, 4, h, w) each, unscaled."""
    import torch

    means, stds = [], []
    with torch.no_grad():
        for start in range(0, len(images), batch):
            dist = vae.encode(_to_tensor(images[start : start + batch])).latent_dist
            means.append(dist.mean)
            stds.append(dist.std)
    return torch.cat(means), torch.cat(stds)


# --------------------------------------------------------------------------------------------
# 4. UNet


def build_unet(config: TrainConfig, cross_attention_dim: int, pooled_dim: int | None):
    """The UNet of ``config.layout``, small (see :data:`LAYOUTS`); with a ``pooled_dim`` (SDXL),
    ``text_time`` added conditioning: six size/crop ids and the pooled text embedding."""
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(config.seed + 2)
    layout = LAYOUTS[config.layout]
    down = list(layout["down_blocks"])
    time_embed_dim = 8
    added = {}
    if pooled_dim is not None:
        added = {
            "addition_embed_type": "text_time",
            "addition_time_embed_dim": time_embed_dim,
            "projection_class_embeddings_input_dim": 6 * time_embed_dim + pooled_dim,
        }
    return UNet2DConditionModel(
        sample_size=config.latent_size,
        in_channels=4,
        out_channels=4,
        down_block_types=down,
        up_block_types=[block.replace("Down", "Up") for block in reversed(down)],
        block_out_channels=list(config.unet_channels),
        layers_per_block=config.unet_layers_per_block,
        transformer_layers_per_block=list(config.unet_transformer_layers),
        attention_head_dim=[max(1, c // 16) for c in config.unet_channels],  # read as the number of heads
        cross_attention_dim=cross_attention_dim,
        norm_num_groups=min(8, *config.unet_channels),
        use_linear_projection=layout["use_linear_projection"],
        **added,
    )


def build_scheduler(layout: str = "sdxl"):
    """SDXL's published scheduler config (Euler); for the SD 1.x layout, DDIM on SD 1.5's noise
    schedule (its betas, ``steps_offset``, ``set_alpha_to_one``; no sample clipping).

    Why not SD 1.5's own PNDM: its pseudo-linear multistep (PLMS) extrapolates each step from the
    last four noise predictions, and with this small model's predictions it fell apart (adherence
    0.5-0.6 on held-out prompts where DDIM and Euler reached 0.96 with the same weights). The
    sampler is not part of training (only the betas are), so it can be swapped freely.
    """
    from diffusers import DDIMScheduler, EulerDiscreteScheduler

    if layout == "sd15":
        return DDIMScheduler(
            **SD_NOISE_SCHEDULE,
            clip_sample=False,
            set_alpha_to_one=False,
        )
    return EulerDiscreteScheduler(
        **SD_NOISE_SCHEDULE,
        timestep_spacing="leading",
        prediction_type="epsilon",
    )


def train_unet(latents, prompt_embeds, pooled, uncond, config: TrainConfig, log: dict):
    """Train the UNet to predict the noise added to ``latents`` (a pair of posterior mean and
    std, already scaled), conditioned on per-image ``prompt_embeds``/``pooled`` rows (``pooled``
    None for SD 1.x). With probability ``cond_dropout`` an image gets ``uncond`` instead, the
    pair the pipeline feeds for the negative side of classifier-free guidance.

    Returns the exponential moving average of the weights, the model the pipeline will use.
    """

    import torch

    unet = build_unet(config, prompt_embeds.shape[-1], None if pooled is None else pooled.shape[-1])
    ema = copy.deepcopy(unet).eval().requires_grad_(False)
    alphas_cumprod = build_scheduler(config.layout).alphas_cumprod.float()
    time_ids = sdxl_time_ids(config.image_size)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=config.unet_lr, weight_decay=1e-2)
    schedule = warmup_cosine(optimizer, config.warmup_steps, config.unet_steps)
    mean, std = latents
    rng = np.random.default_rng(config.seed + 4)
    generator = torch.Generator().manual_seed(config.seed + 4)
    losses = []
    unet.train()
    for step in range(config.unet_steps):
        idx = torch.from_numpy(rng.integers(0, len(mean), config.unet_batch))
        x0 = mean[idx] + std[idx] * torch.randn(mean[idx].shape, generator=generator)
        t = torch.randint(0, len(alphas_cumprod), (len(idx),), generator=generator)
        noise = torch.randn(x0.shape, generator=generator)
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        noisy = a.sqrt() * x0 + (1 - a).sqrt() * noise
        keep = torch.rand(len(idx), generator=generator) >= config.cond_dropout
        context = torch.where(keep.view(-1, 1, 1), prompt_embeds[idx], uncond[0])
        added = None
        if pooled is not None:
            text_embeds = torch.where(keep.view(-1, 1), pooled[idx], uncond[1])
            added = {"text_embeds": text_embeds, "time_ids": time_ids.expand(len(idx), 6)}
        pred = unet(noisy, t, encoder_hidden_states=context, added_cond_kwargs=added).sample
        loss = torch.nn.functional.mse_loss(pred, noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        decay = min(config.ema_decay, (1 + step) / (10 + step))  # short warm-up of the average
        with torch.no_grad():
            for e, p in zip(ema.parameters(), unet.parameters(), strict=True):
                e.lerp_(p, 1 - decay)
        losses.append(loss.item())
        _progress("unet", len(losses), config.unet_steps, losses)
    log["unet_loss"] = _rounded(losses)
    return ema


def write_calibration_prompts(folder: Path, n: int = 64, seed: int = 0) -> Path:
    """``calibration_prompts.txt``: ``n`` *training* captions, for the INT8 calibration of
    notebook 05 (calibrate on what the model was trained for, never on the evaluated prompts)."""
    path = Path(folder) / "calibration_prompts.txt"
    header = (
        "# Training captions of this checkpoint, for INT8 calibration (sdaccel.toy.dataset, split 'train')\n"
    )
    path.write_text(header + "\n".join(dataset.prompts(n, seed=seed + 1, split="train")) + "\n")
    return path


# --------------------------------------------------------------------------------------------
# 5. Evaluation with diffusers' own pipeline


def generate(
    folder: Path, prompts: list[str], steps: int, guidance_scale: float, seed: int = 0, batch: int = 16
):
    """Images for ``prompts`` from the checkpoint in ``folder``, fp32, with diffusers'
    pipeline (``StableDiffusionXLPipeline`` or ``StableDiffusionPipeline``, as ``model_index.json``
    says); image ``i`` uses the seed ``seed + i``."""
    import torch
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(folder, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    images = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        generators = [torch.Generator().manual_seed(seed + start + i) for i in range(len(chunk))]
        images += pipe(
            chunk, num_inference_steps=steps, guidance_scale=guidance_scale, generator=generators
        ).images
    return images


def evaluate(folder: Path, config: TrainConfig, log: dict) -> list:
    """Adherence on held-out combinations and on seen ones; returns the held-out images."""
    result = {"steps": config.eval_steps, "guidance_scale": config.guidance_scale}
    heldout = dataset.heldout_prompts(config.eval_prompts, seed=0)
    images = generate(folder, heldout, config.eval_steps, config.guidance_scale)
    result["heldout"] = dataset.adherence(images, heldout)
    seen = dataset.prompts(config.eval_prompts, seed=0, split="train")
    result["seen"] = dataset.adherence(generate(folder, seen, config.eval_steps, config.guidance_scale), seen)
    log["adherence"] = result
    return images


# --------------------------------------------------------------------------------------------


def _plot(folder: Path, log: dict, images: list, prompts: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, key in zip(axes, ("vae_loss", "unet_loss"), strict=True):
        loss = np.asarray(log[key])
        ax.plot(loss, alpha=0.3, label="per step")
        window = max(1, len(loss) // 50)
        ax.plot(np.convolve(loss, np.ones(window) / window, mode="valid"), label=f"mean of {window}")
        ax.set(title=key, xlabel="step", yscale="log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "training_loss.png", dpi=80)
    plt.close(fig)

    cols = 8
    rows = -(-len(images) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2 * cols, 2.3 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, image, prompt in zip(axes.ravel(), images, prompts, strict=False):
        ax.imshow(image)
        ax.set_title(prompt.replace(" on ", "\non ").replace(", ", "\n"), fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "samples.png", dpi=80)
    plt.close(fig)


def train(out_dir: str | Path, config: TrainConfig | None = None, evaluate_model: bool = True) -> dict:
    """Run every stage and write the checkpoint to ``out_dir``; returns the training log.

    The checkpoint is built in a hidden staging folder beside ``out_dir`` and replaces it only when
    whole (:func:`sdaccel.core.staging.staged_folder`): a training stopped or killed half-way leaves
    the previous checkpoint as it was, and two trainings of one folder take turns."""
    config = config or TrainConfig()
    with staging.staged_folder(out_dir) as stage:
        return _train_into(stage, config, evaluate_model)


def _train_into(tmp: Path, config: TrainConfig, evaluate_model: bool) -> dict:
    """:func:`train`'s stages, writing into the empty staging folder ``tmp``."""
    import torch

    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    log: dict = {"config": dataclasses.asdict(config), "wall_s": {}}
    start = last = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal last
        now = time.perf_counter()
        log["wall_s"][stage] = round(now - last, 1)
        last = now

    images, captions = dataset.make_dataset(
        config.train_images, config.seed, config.image_size, split="train"
    )
    tokenizers, encoders = build_text_encoders(tmp, config)
    unique = sorted(set(captions))
    embeds, pooled = encode_prompts(unique, tokenizers, encoders)
    row = torch.tensor([unique.index(c) for c in captions])
    if config.layout == "sdxl":  # force_zeros_for_empty_prompt: the negative side is all zeros
        uncond = (torch.zeros_like(embeds[:1]), torch.zeros_like(pooled[:1]))
    else:  # SD 1.x encodes the empty prompt
        uncond = encode_prompts([""], tokenizers, encoders)
    lap("data_and_text_encoders")

    vae = train_vae(images, config, log)
    mean, std = encode_images(vae, images)
    scaling = 1.0 / mean.std().item()
    log["scaling_factor"] = round(scaling, 5)
    vae.register_to_config(scaling_factor=log["scaling_factor"])
    vae.save_pretrained(tmp / "vae")
    fault_point("train.vae-saved")
    check_images, check_prompts = dataset.make_dataset(
        64, config.seed + 10, config.image_size, split="heldout"
    )
    with torch.no_grad():
        recon = vae.decode(encode_images(vae, check_images)[0]).sample
    log["vae_reconstruction_adherence"] = dataset.adherence(list(_to_images(recon)), check_prompts)
    lap("vae")

    rows = (embeds[row], None if pooled is None else pooled[row])
    unet = train_unet((mean * scaling, std * scaling), *rows, uncond, config, log)
    unet.save_pretrained(tmp / "unet")
    build_scheduler(config.layout).save_pretrained(tmp / "scheduler")
    layout = LAYOUTS[config.layout]
    write_model_index(tmp, layout["pipeline"], layout["components"])
    write_calibration_prompts(tmp, seed=config.seed)
    lap("unet")
    log["training_wall_s"] = round(time.perf_counter() - start, 1)

    if evaluate_model:
        samples = evaluate(tmp, config, log)
        lap("evaluation")
        _plot(tmp, log, samples[:16], dataset.heldout_prompts(config.eval_prompts, seed=0)[:16])
    log["size_bytes"] = staging.disk_bytes(tmp)
    (tmp / "training_log.json").write_text(json.dumps(log, indent=1))
    return log


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir", type=Path, help="folder to write the checkpoint into (replaced)")
    for field in dataclasses.fields(TrainConfig):
        kind = {"int": int, "float": float, "str": str}.get(field.type)
        if kind is not None:  # every number (and the layout) can be set from the command line
            flag = "--" + field.name.replace("_", "-")
            choices = sorted(LAYOUTS) if field.name == "layout" else None
            parser.add_argument(
                flag, type=kind, default=field.default, choices=choices, help=f"default {field.default}"
            )
    parser.add_argument("--no-eval", action="store_true", help="skip the pipeline evaluation")
    args = parser.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)}
    log = train(args.out_dir, TrainConfig(**values), evaluate_model=not args.no_eval)
    print(json.dumps({k: log[k] for k in ("wall_s", "training_wall_s", "size_bytes")}))
    if "adherence" in log:
        print(json.dumps(log["adherence"], indent=1))


if __name__ == "__main__":
    main()
