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

Its steps, one module each: the settings and the inputs' checks
(:mod:`sdaccel.tools.toys.taesd_config`), the data and the training loop
(:mod:`sdaccel.tools.toys.taesd_train`), the evaluation (:mod:`sdaccel.tools.toys.taesd_eval`) and
the card (:mod:`sdaccel.tools.toys.taesd_card`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from sdaccel.core.checkpoint import read_json
from sdaccel.core.env import cpu_model
from sdaccel.core.faults import fault_point
from sdaccel.core.staging import replace_json, replace_text, staged_folder
from sdaccel.tools.toys.distill_config import add_config_flags, config_from_args
from sdaccel.tools.toys.distill_eval import plot_samples
from sdaccel.tools.toys.taesd_card import readme_text, refresh_readme
from sdaccel.tools.toys.taesd_config import (
    LOG_NAME,
    TaesdConfig,
    check_destination,
    checkpoint_vae,
    tiny_config,
)
from sdaccel.tools.toys.taesd_eval import evaluate, evaluation_table
from sdaccel.tools.toys.taesd_train import decoder_parameters, train, training_data
from sdaccel.toy.adherence_steps import lora_file


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
