"""Distill a trained tiny shapes checkpoint into a few-step LCM-LoRA, on a CPU, in minutes.

    python -m sdaccel.tools.toys.distill checkpoints/tiny-shapes-sdxl checkpoints/tiny-shapes-sdxl-lcm-lora
    python -m sdaccel.tools.toys.distill checkpoints/tiny-shapes-sd15 checkpoints/tiny-shapes-sd15-lcm-lora

A latent consistency model (LCM) maps any point of a sampling trajectory straight to its end, so
that 2-8 steps do what 20-50 did. LCM-LoRA learns that map as a low-rank adapter on top of the
frozen model, which is what diffusers' ``examples/consistency_distillation/
train_lcm_distill_lora_sdxl.py`` does for SDXL; this module follows the same recipe, small:

* **teacher**: the frozen base UNet; **student**: the same UNet with a peft LoRA on its attention,
  feed-forward, ResNet and resampling layers; **target**: the student itself without gradient
  (the LoRA recipe keeps no EMA copy), or, with ``ema_decay`` > 0, an exponential moving average
  of the LoRA weights, as the full-model LCM scripts keep (``--ema_decay 0.95``); that average is
  then the adapter written.
* **solver**: DDIM over ``num_ddim_timesteps`` (50) timesteps of the 1000, ``1000 / 50 = 20``
  apart. A training sample is a latent noised to one of them, ``t_n``; the teacher takes one DDIM
  step from there to ``t_n - 20`` with classifier-free guidance ``w`` drawn per sample from
  ``[w_min, w_max]`` (``x0 = cond + w (cond - uncond)``, i.e. guidance scale ``w + 1``), so that
  the adapter learns the *guided* trajectory and runs without a negative batch afterwards.
* **consistency loss**: the student's estimate of the clean latent at ``t_n`` (with the boundary
  scalings ``c_skip``/``c_out`` at ``timestep_scaling`` 10, which make it the identity at t = 0)
  must match the target's estimate at ``t_n - 20`` from the teacher's step; pseudo-Huber loss.
* **data**: the training images and captions of :func:`sdaccel.tools.toys.train.train` (never the
  held-out combinations), through the checkpoint's own VAE and text encoders, conditioned exactly
  as :mod:`sdaccel.tools.toys.train` trained (:func:`~sdaccel.tools.toys.train.encode_prompts`,
  :func:`~sdaccel.tools.toys.train.sdxl_time_ids`; zeros as the SDXL unconditional input, the encoded
  empty prompt for SD 1.x).

The adapter is written in the diffusers LoRA layout (``pytorch_lora_weights.safetensors``, keys
``unet.<module>.lora_A/lora_B.weight`` with peft's metadata), which diffusers'
``load_lora_weights``, :func:`sdaccel.core.lora_files.read_lora` / ``JaxPipeline.fuse_lora`` and
``export_pipeline(..., lora=...)`` read. Beside it: ``distill_log.json`` (config, loss curve,
times, CPU, adherence), ``samples.png`` and a ``README.md``. The run is seeded and runs on one
torch thread by default (see :mod:`sdaccel.tools.toys.train` for why); ``--minutes`` caps the wall time
(the run stops early, and says so, when the cap comes before ``--steps``).

This module trains and is the command line. The knobs are
:class:`~sdaccel.tools.toys.distill_config.DistillConfig`, the evaluation is :mod:`sdaccel.tools.toys.distill_eval`
and the README :mod:`sdaccel.tools.toys.model_card`.
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
from tqdm.auto import tqdm

from sdaccel.core.checkpoint import read_json
from sdaccel.core.env import cpu_model
from sdaccel.core.staging import staged_folder
from sdaccel.tools.toys.distill_config import (
    TARGET_MODULES,
    WEIGHT_NAME,
    DistillConfig,
    add_config_flags,
    config_from_args,
)
from sdaccel.tools.toys.distill_eval import adherence_table, evaluate, plot_samples
from sdaccel.tools.toys.model_card import refresh_readme, write_readme
from sdaccel.tools.toys.train import (
    TrainConfig,
    build_scheduler,
    encode_images,
    encode_prompts,
    sdxl_time_ids,
    warmup_cosine,
)
from sdaccel.toy import dataset

PIPELINE_LAYOUTS = {"StableDiffusionXLPipeline": "sdxl", "StableDiffusionPipeline": "sd15"}


# --------------------------------------------------------------------------------------------
# The inputs, checked before anything runs


def checkpoint_layout(folder: str | Path) -> str:
    """``"sdxl"`` or ``"sd15"`` from ``model_index.json``; a clear error for anything else."""
    index_file = Path(folder) / "model_index.json"
    if not index_file.is_file():
        raise FileNotFoundError(f"{folder}: no model_index.json; pass a diffusers checkpoint folder.")
    name = read_json(index_file).get("_class_name")
    if name not in PIPELINE_LAYOUTS:
        raise ValueError(
            f"{folder} is a {name}; LCM-LoRA distillation takes a StableDiffusionXLPipeline or "
            "StableDiffusionPipeline checkpoint (e.g. checkpoints/tiny-shapes-sdxl)."
        )
    return PIPELINE_LAYOUTS[name]


def check_destination(dst: str | Path, overwrite: bool) -> Path:
    """``dst`` as a path, unless it exists and ``overwrite`` is not set (then a clear error)."""
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists; pass --overwrite to replace it, or choose another folder.")
    return dst


# --------------------------------------------------------------------------------------------
# The pieces of the recipe


class DDIMSolver:
    """The teacher's one-step solver over ``n`` evenly skipping timesteps (19, 39, ..., 999 for
    n = 50 of 1000; 39, 79, ..., 999 for n = 25): ``step(x0, eps, i)`` goes from
    ``timesteps[i]`` to ``timesteps[i] - skip``."""

    def __init__(self, alphas_cumprod, n: int):
        import torch

        self.skip = len(alphas_cumprod) // n
        self.timesteps = torch.arange(1, n + 1) * self.skip - 1
        self.alpha_prev = torch.cat([alphas_cumprod[:1], alphas_cumprod[self.timesteps[:-1]]])

    def step(self, x0, eps, index):
        a = self.alpha_prev[index].view(-1, 1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * eps


def boundary_scalings(t, timestep_scaling: float, sigma_data: float = 0.5):
    """LCM's ``c_skip``, ``c_out`` at timesteps ``t`` (as (B, 1, 1, 1)): at t = 0 the model is
    the identity; the scaling 10 makes ``c_out`` take over within the first few timesteps."""
    scaled = (t.float() * timestep_scaling).view(-1, 1, 1, 1)
    c_skip = sigma_data**2 / (scaled**2 + sigma_data**2)
    c_out = scaled / (scaled**2 + sigma_data**2) ** 0.5
    return c_skip, c_out


def predicted_x0(eps, noisy, t, alphas_cumprod):
    a = alphas_cumprod[t].view(-1, 1, 1, 1)
    return (noisy - (1 - a).sqrt() * eps) / a.sqrt()


def pseudo_huber(pred, target, c: float):
    import torch

    return torch.mean(torch.sqrt((pred - target) ** 2 + c**2) - c)


def load_models(folder: Path, layout: str):
    """The checkpoint's tokenizers, text encoders, VAE and UNet (fp32, frozen)."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    tokenizers = [CLIPTokenizer.from_pretrained(folder / "tokenizer")]
    encoders = [CLIPTextModel.from_pretrained(folder / "text_encoder")]
    if layout == "sdxl":
        tokenizers.append(CLIPTokenizer.from_pretrained(folder / "tokenizer_2"))
        encoders.append(CLIPTextModelWithProjection.from_pretrained(folder / "text_encoder_2"))
    vae = AutoencoderKL.from_pretrained(folder / "vae")
    unet = UNet2DConditionModel.from_pretrained(folder / "unet")
    for model in (*encoders, vae, unet):
        model.eval().requires_grad_(False)
    return tokenizers, encoders, vae, unet


def training_data(folder: Path, layout: str, tokenizers, encoders, vae, limit: int = 0):
    """The base model's training set, as :mod:`sdaccel.tools.toys.train` made it (its ``training_log.json``
    config: number of images, seed, size): scaled posterior (mean, std), per-image text
    conditioning and the unconditional pair."""
    import torch

    # 1. The images and captions, drawn as the base model's training drew them
    log_file = folder / "training_log.json"
    trained = read_json(log_file)["config"] if log_file.is_file() else {}
    base = TrainConfig()
    n = trained.get("train_images", base.train_images)
    n = min(n, limit) if limit > 0 else n
    seed = trained.get("seed", base.seed)
    size = trained.get("image_size", base.image_size)
    images, captions = dataset.make_dataset(n, seed, size, split="train")

    # 2. The text conditioning of each distinct caption, and the unconditional pair
    unique = sorted(set(captions))
    embeds, pooled = encode_prompts(unique, tokenizers, encoders)
    row = torch.tensor([unique.index(c) for c in captions])
    if layout == "sdxl":  # force_zeros_for_empty_prompt
        uncond = (torch.zeros_like(embeds[:1]), torch.zeros_like(pooled[:1]))
    else:
        uncond = encode_prompts([""], tokenizers, encoders)

    # 3. The latents: the VAE's posterior, scaled as the UNet sees it
    mean, std = encode_images(vae, images)
    scaling = vae.config.scaling_factor
    return {
        "mean": mean * scaling,
        "std": std * scaling,
        "embeds": embeds,
        "pooled": pooled,
        "row": row,
        "uncond": uncond,
        "size": size,
        "images": n,
    }


def add_lora(unet, rank: int):
    """The student: ``unet`` with a trainable peft LoRA of ``rank`` on :data:`TARGET_MODULES`."""
    from peft import LoraConfig

    config = LoraConfig(
        r=rank, lora_alpha=rank, init_lora_weights="gaussian", target_modules=list(TARGET_MODULES)
    )
    unet.add_adapter(config)
    return config


# --------------------------------------------------------------------------------------------
# The training loop


def conditioning(data: dict, idx, time_ids, uncond: bool):
    """The text conditioning of the training images ``idx`` (or the unconditional input in their
    place): the cross-attention context and, for SDXL, the added ``text_embeds``/``time_ids``."""
    b = len(idx)
    rows = data["row"][idx]
    context = data["uncond"][0].expand(b, -1, -1) if uncond else data["embeds"][rows]
    added = None
    if data["pooled"] is not None:
        pooled = data["uncond"][1].expand(b, -1) if uncond else data["pooled"][rows]
        added = {"text_embeds": pooled, "time_ids": time_ids.expand(b, 6)}
    return context, added


@dataclass
class Batch:
    """One training batch: latents noised to DDIM timestep ``index`` (``start``), the timestep one
    teacher step down (``end``), the teacher's guidance ``w`` and the text conditioning."""

    idx: object
    noisy: object
    index: object
    start: object
    end: object
    w: object
    context: object
    added: dict | None


def sample_batch(
    data: dict, solver: DDIMSolver, alphas_cumprod, time_ids, config: DistillConfig, rng, generator
):
    """Draw a :class:`Batch` (the images from ``rng``, every random tensor from ``generator``, in a
    fixed order: the run is seeded)."""
    import torch

    mean, std = data["mean"], data["std"]
    idx = torch.from_numpy(rng.integers(0, len(data["row"]), config.batch))
    x0 = mean[idx] + std[idx] * torch.randn(mean[idx].shape, generator=generator)
    noise = torch.randn(x0.shape, generator=generator)
    index = torch.randint(0, config.num_ddim_timesteps, (len(idx),), generator=generator)
    start = solver.timesteps[index]
    end = (start - solver.skip).clamp(min=0)
    a = alphas_cumprod[start].view(-1, 1, 1, 1)
    noisy = a.sqrt() * x0 + (1 - a).sqrt() * noise
    w = (config.w_max - config.w_min) * torch.rand(len(idx), generator=generator) + config.w_min
    context, added = conditioning(data, idx, time_ids, uncond=False)
    return Batch(idx, noisy, index, start, end, w.view(-1, 1, 1, 1), context, added)


def consistency_target(
    unet, teacher, batch: Batch, data: dict, solver: DDIMSolver, alphas_cumprod, time_ids, config, swap
):
    """The target's clean-latent estimate at ``batch.end``, from the teacher's guided DDIM step
    (without gradient). ``swap``: None, or the (params, ema) pair whose average is the target."""
    import torch

    with torch.no_grad():
        # 1. The teacher on both halves of classifier-free guidance, at the start
        u_context, u_added = conditioning(data, batch.idx, time_ids, uncond=True)
        added = batch.added
        both = {k: torch.cat([added[k], u_added[k]]) for k in added} if added is not None else None
        eps_t = teacher(
            torch.cat([batch.noisy, batch.noisy]),
            torch.cat([batch.start, batch.start]),
            encoder_hidden_states=torch.cat([batch.context, u_context]),
            added_cond_kwargs=both,
        ).sample
        # 2. One guided DDIM step down to the end
        cond_eps, uncond_eps = eps_t.chunk(2)
        cond_x0 = predicted_x0(cond_eps, batch.noisy, batch.start, alphas_cumprod)
        uncond_x0 = predicted_x0(uncond_eps, batch.noisy, batch.start, alphas_cumprod)
        guided_x0 = cond_x0 + batch.w * (cond_x0 - uncond_x0)
        guided_eps = cond_eps + batch.w * (cond_eps - uncond_eps)
        previous = solver.step(guided_x0, guided_eps, batch.index)
        # 3. The target network (the student, or its average) at the end, boundary-scaled
        c_skip_end, c_out_end = boundary_scalings(batch.end, config.timestep_scaling)
        online = _swap_weights(*swap) if swap is not None else None
        eps_end = unet(
            previous, batch.end, encoder_hidden_states=batch.context, added_cond_kwargs=added
        ).sample
        if online is not None:
            _swap_weights(swap[0], online)
        return c_skip_end * previous + c_out_end * predicted_x0(eps_end, previous, batch.end, alphas_cumprod)


def student_loss(unet, batch: Batch, target, alphas_cumprod, config: DistillConfig):
    """The pseudo-Huber distance of the student's boundary-scaled clean-latent estimate at
    ``batch.start`` from ``target``."""
    c_skip, c_out = boundary_scalings(batch.start, config.timestep_scaling)
    eps = unet(
        batch.noisy, batch.start, encoder_hidden_states=batch.context, added_cond_kwargs=batch.added
    ).sample
    prediction = c_skip * batch.noisy + c_out * predicted_x0(eps, batch.noisy, batch.start, alphas_cumprod)
    return pseudo_huber(prediction, target, config.huber_c)


def distill(unet, teacher, data: dict, config: DistillConfig, log: dict, progress: bool = True):
    """Train the LoRA of ``unet`` (already added) against the frozen ``teacher``; fills ``log``."""
    import torch

    # 1. The solver, the trainable LoRA weights (and their average), the optimizer
    layout = "sdxl" if data["pooled"] is not None else "sd15"
    alphas_cumprod = build_scheduler(layout).alphas_cumprod.float()
    solver = DDIMSolver(alphas_cumprod, config.num_ddim_timesteps)
    params = [p for p in unet.parameters() if p.requires_grad]
    ema = [p.detach().clone() for p in params] if config.ema_decay > 0 else None
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=1e-2)
    schedule = warmup_cosine(optimizer, config.warmup_steps, config.steps)
    time_ids = sdxl_time_ids(data["size"])
    rng = np.random.default_rng(config.seed + 5)
    generator = torch.Generator().manual_seed(config.seed + 5)
    deadline = time.perf_counter() + 60 * config.minutes
    losses = []

    # 2. The steps, until config.steps or the time cap
    unet.train()
    bar = tqdm(total=config.steps, desc="lcm-lora", disable=not progress, mininterval=10)
    for _ in range(config.steps):
        if time.perf_counter() > deadline:
            break
        batch = sample_batch(data, solver, alphas_cumprod, time_ids, config, rng, generator)
        swap = (params, ema) if ema is not None else None
        target = consistency_target(
            unet, teacher, batch, data, solver, alphas_cumprod, time_ids, config, swap
        )
        # the student after the target: loading the EMA weights in place for the target would
        # otherwise change tensors that the student's backward pass needs
        loss = student_loss(unet, batch, target, alphas_cumprod, config)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        if ema is not None:
            with torch.no_grad():
                for average, p in zip(ema, params, strict=True):
                    average.lerp_(p, 1 - config.ema_decay)
        losses.append(loss.item())
        bar.update()
        if len(losses) % 100 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-100:]):.4f}")
    bar.close()

    # 3. The average is the adapter, as the LCM scripts keep their target network; the log
    if ema is not None:
        _swap_weights(params, ema)
    unet.eval()
    log["steps_done"] = len(losses)
    log["stopped_by_time"] = len(losses) < config.steps
    log["loss"] = [float(f"{x:.4g}") for x in losses]
    return losses


def _swap_weights(params, values) -> list:
    """Load ``values`` into the tensors ``params`` in place; returns their previous values."""
    import torch

    with torch.no_grad():
        previous = [p.detach().clone() for p in params]
        for p, v in zip(params, values, strict=True):
            p.copy_(v)
    return previous


def save_adapter(unet, folder: Path, layout: str) -> Path:
    """``pytorch_lora_weights.safetensors`` in the diffusers LoRA layout: peft's state dict,
    ``unet.``-prefixed (``unet.<module>.lora_A.weight`` / ``lora_B.weight``), written by
    ``save_lora_weights``, which is what ``load_lora_weights`` reads back as it is.

    Not passed through ``convert_state_dict_to_diffusers`` as the diffusers LCM-LoRA script does:
    that renames only the attention keys (to the old ``to_q.lora.down.weight``) and leaves the
    ResNet and resampling convolutions as ``lora_A``, and diffusers 0.42 then loads the mixed file
    without its attention LoRAs (a warning lists them). ``lora_alpha`` equals the rank, the value
    every loader assumes when a file has no alpha, so no metadata is needed.
    """
    from diffusers import StableDiffusionPipeline, StableDiffusionXLPipeline
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(unet)
    cls = StableDiffusionXLPipeline if layout == "sdxl" else StableDiffusionPipeline
    cls.save_lora_weights(folder, unet_lora_layers=state)
    return folder / WEIGHT_NAME


# --------------------------------------------------------------------------------------------
# The run, and the command line


def run(
    checkpoint: str | Path,
    dst: str | Path,
    config: DistillConfig | None = None,
    overwrite: bool = False,
    evaluate_model: bool = True,
    progress: bool = True,
) -> dict:
    """Distill ``checkpoint`` into an LCM-LoRA written to ``dst`` (checked first; written to a
    staging folder beside it and renamed at the end). Returns the log."""

    import torch

    # 1. Check the inputs, before anything runs
    config = config or DistillConfig()
    config.check()
    checkpoint, dst = Path(checkpoint), check_destination(dst, overwrite)
    layout = checkpoint_layout(checkpoint)

    # 2. The models and the training data
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    log: dict = {
        "config": dataclasses.asdict(config),
        "checkpoint": str(checkpoint),
        "layout": layout,
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "wall_s": {},
    }
    start = time.perf_counter()
    tokenizers, encoders, vae, unet = load_models(checkpoint, layout)
    data = training_data(checkpoint, layout, tokenizers, encoders, vae, config.train_images)
    log["data"] = {"images": data["images"], "size": data["size"]}
    log["wall_s"]["data"] = round(time.perf_counter() - start, 1)

    # 3. The student's LoRA, trained against the frozen teacher
    teacher = copy.deepcopy(unet)
    add_lora(unet, config.rank)
    log["lora_parameters"] = sum(p.numel() for p in unet.parameters() if p.requires_grad)
    start = time.perf_counter()
    distill(unet, teacher, data, config, log, progress=progress)
    log["wall_s"]["train"] = round(time.perf_counter() - start, 1)

    # 4. The adapter, its evaluation, samples and card, and the log, published together
    with staged_folder(dst) as stage:
        save_adapter(unet, stage, layout)
        if evaluate_model:
            start = time.perf_counter()
            result = evaluate(checkpoint, stage, config, log)
            log["wall_s"]["evaluation"] = round(time.perf_counter() - start, 1)
            plot_samples(stage / "samples.png", result)
            write_readme(stage, dst, checkpoint, config, log)
        (stage / "distill_log.json").write_text(json.dumps(log, indent=1) + "\n")
        stage.chmod(0o755)  # a staging folder is private; the adapter is for everyone to read
        for path in stage.iterdir():
            path.chmod(0o644)
    return log


def build_parser() -> argparse.ArgumentParser:
    """The command line: the checkpoint, the output folder and a flag per number of :class:`DistillConfig`."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", type=Path, help="a trained shapes checkpoint (SDXL or SD 1.x layout)")
    parser.add_argument("out_dir", type=Path, help="folder to write the adapter into")
    add_config_flags(parser, DistillConfig)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing out_dir")
    parser.add_argument("--no-eval", action="store_true", help="skip the diffusers evaluation and README")
    parser.add_argument(
        "--readme-only",
        action="store_true",
        help="only write out_dir/README.md again from its distill_log.json and the steps sweep's JSON",
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.readme_only:
        print(refresh_readme(args.out_dir))
        return read_json(args.out_dir / "distill_log.json")
    config = config_from_args(args, DistillConfig)
    log = run(args.checkpoint, args.out_dir, config, args.overwrite, not args.no_eval)
    print(json.dumps({k: log[k] for k in ("wall_s", "steps_done", "stopped_by_time")}))
    if "adherence" in log:
        print(adherence_table(log["adherence"]["rows"]))
    return log


if __name__ == "__main__":
    main()
