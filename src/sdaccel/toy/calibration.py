"""INT8 calibration data for the trained shapes checkpoints: the f32 UNet's inputs over *training* captions of :mod:`sdaccel.toy.dataset`, never the held-out prompts that are scored."""

from __future__ import annotations

from pathlib import Path

from sdaccel.cpu.calibration import CalibrationSet, collect_unet_inputs
from sdaccel.toy import dataset


def calibrate_on_training_captions(
    pipe,
    out_dir: Path,
    steps: int,
    guidance_scale: float,
    size: int,
    prompts: int = 16,
    samples: int = 64,
    seed: int = 0,
    progress: bool = False,
) -> CalibrationSet:
    """INT8 calibration data for a trained shapes checkpoint (:mod:`sdaccel.toy.dataset`): the f32
    ``pipe``'s UNet inputs over ``prompts`` *training* captions (never the held-out ones that are
    evaluated), a reservoir of ``samples`` spread over the prompts and steps, streamed to
    ``out_dir`` (:func:`collect_unet_inputs`)."""

    return collect_unet_inputs(
        pipe,
        dataset.prompts(prompts, seed=seed + 1, split="train"),
        steps=steps,
        num_samples=samples,
        guidance_scale=guidance_scale,
        height=size,
        width=size,
        seed=seed,
        out_dir=out_dir,
        progress=progress,
    )
