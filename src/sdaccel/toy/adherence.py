"""Does every pipeline of this tutorial still draw what it is asked? Prompt adherence, side by side.

    python -m sdaccel.toy.adherence checkpoints/tiny-shapes-sd15 --prompts 96
    python -m sdaccel.toy.adherence checkpoints/tiny-shapes-sdxl --prompts 96 --out build/adherence/sdxl.json

On a trained shapes checkpoint (:mod:`sdaccel.tools.toys.train`) the same held-out prompts and the
same initial noise go through:

* ``torch_fp32``: diffusers' own PyTorch pipeline, the reference;
* ``jax_fp32``: this repository's JAX pipeline (:class:`sdaccel.tpu.pipeline.JaxPipeline`);
* ``ov_f32``: the OpenVINO export run by :class:`sdaccel.cpu.pipeline.OVPipeline` with
  ``INFERENCE_PRECISION_HINT=f32``, and ``ov_default``: the same with the plugin's default
  precision (bf16 on a CPU with AVX-512 BF16 or AMX; the table says which ran);
* one row per NNCF INT8 variant of the UNet (:data:`sdaccel.cpu.quantize.VARIANTS`, and full
  INT8 with the ResNets kept in float, :data:`sdaccel.toy.int8_unets.FLOAT_GROUP_VARIANTS`),
  calibrated on *training* captions (never the evaluated ones) by
  :func:`sdaccel.toy.int8_unets.quantize_unet`, run with the f32 hint so that the INT8 layers are
  the only difference from ``ov_f32``.

Each row gets the adherence of :func:`sdaccel.toy.dataset.adherence` (the fraction of images whose
shape *and* colour match the prompt, and each attribute's accuracy) and PSNR/SSIM of its images
against ``torch_fp32``'s and against ``ov_f32``'s (:func:`sdaccel.cpu.quality.compare_images`).
The two kinds of number answer different questions: PSNR/SSIM say how far a pipeline moved from
the reference pixels; adherence says whether the picture is still *right*.

Image ``i`` starts from ``torch.randn`` seeded with ``seed + i`` (NCHW, as diffusers draws it;
transposed for JAX), so every difference between two rows comes from the pipeline, not the noise.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from functools import cache, partial
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import read_config, resolve_checkpoint
from sdaccel.core.staging import check_writable
from sdaccel.cpu import quality
from sdaccel.cpu.export import (
    MODEL_XML,
    export_pipeline,
    pipeline_class,
    text_to_image_components,
    vae_scale_factor_of,
)
from sdaccel.cpu.pipeline import OVPipeline, run_diffusers
from sdaccel.cpu.quality import compare_images, compile_f32
from sdaccel.cpu.quantize import describe_ir, ir_size_bytes
from sdaccel.cpu.quantize_vae import VARIANTS as VAE_VARIANTS
from sdaccel.cpu.quantize_vae import decode, decoder_inputs, quantize_vae_decoder
from sdaccel.toy import dataset, runner
from sdaccel.toy.comparison import paired_latents, uint8_images
from sdaccel.toy.int8_unets import FLOAT_GROUP_VARIANTS, PARTS_VARIANTS, quantize_unet
from sdaccel.toy.runner import Column

#: What the rows are compared with: the reference, and the pipeline the INT8 UNets replace into.
REFERENCES = ("torch_fp32", "ov_f32")
#: The INT8 rows of :func:`evaluate` by default: every recipe in one piece.
VARIANTS = ("int8_weights", "hybrid", "full_int8", *FLOAT_GROUP_VARIANTS)


def run_torch(folder, prompts, latents, steps: int, guidance_scale: float, size: int) -> list[np.ndarray]:
    """diffusers' PyTorch pipeline, fp32 (the reference)."""

    images = run_diffusers(
        folder,
        list(prompts),
        latents=latents,
        steps=steps,
        guidance_scale=guidance_scale,
        height=size,
        width=size,
    )
    return uint8_images(images)


def run_jax(folder, prompts, latents, steps: int, guidance_scale: float, size: int) -> list[np.ndarray]:
    """This repository's JAX pipeline, fp32, from the same noise (transposed to channels-last)."""
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import JaxPipeline

    pipe = JaxPipeline.from_pretrained(folder, dtype=jnp.float32, progress=False)
    result = pipe.generate(
        list(prompts),
        steps=steps,
        guidance_scale=guidance_scale,
        height=size,
        width=size,
        latents=np.transpose(latents, (0, 2, 3, 1)),
    )
    return uint8_images(result.array)


def evaluate(
    checkpoint: str | Path,
    work_dir: str | Path,
    num_prompts: int = 96,
    steps: int = 20,
    guidance_scale: float = 6.0,
    size: int | None = None,
    seed: int = 0,
    pipelines: tuple[str, ...] = ("torch_fp32", "jax_fp32", "ov_f32", "ov_default"),
    variants: tuple[str, ...] = VARIANTS,
    recipes: dict[str, dict] | None = None,
) -> dict:
    """Generate the held-out prompts with every pipeline and INT8 variant; return the rows.
    ``recipes``: more full INT8 recipes by name, as :func:`sdaccel.toy.int8_unets.quantize_unet` takes them; each is a row.

    ``work_dir`` receives the OpenVINO export and the quantized UNets (reused when present).
    ``pipelines`` must include ``"torch_fp32"``, and ``"ov_f32"`` when ``variants`` is not empty.
    Returns ``{"config": ..., "rows": {name: {"adherence": ..., "vs_torch_fp32": ...,
    "vs_ov_f32": ..., "seconds": ..., "precision": ...}}, "images": {name: [uint8 arrays]}}``.
    """

    # 1. Every input checked, the prompts and their noise
    if "torch_fp32" not in pipelines:
        raise ValueError("pipelines must include 'torch_fp32', the reference every row is compared with.")
    if (variants or recipes) and "ov_f32" not in pipelines:
        raise ValueError("The INT8 variants replace the UNet of 'ov_f32': include it in pipelines.")
    folder = resolve_checkpoint(checkpoint)
    size = size or read_config(folder, "unet")["sample_size"] * vae_scale_factor_of(folder, "vae")
    prompts = dataset.heldout_prompts(num_prompts, seed=seed)
    latents = paired_latents(folder, num_prompts, size, seed)
    common = dict(steps=steps, guidance_scale=guidance_scale, size=size)

    # 2. Every pipeline and INT8 UNet of the table, scored against both references
    table = configurations(
        folder, Path(work_dir), pipelines, variants, recipes, prompts, latents, common, seed
    )
    order = ["torch_fp32", "jax_fp32", "ov_f32", "ov_default", *variants, *(recipes or {})]
    rows, images = runner.score(table, prompts, evaluated_row, references=REFERENCES, order=order)
    config = {
        "checkpoint": str(checkpoint),
        "pipeline": pipeline_class(folder),
        "prompts": num_prompts,
        "split": "heldout",
        "steps": steps,
        "guidance_scale": guidance_scale,
        "size": size,
        "seed": seed,
    }
    return {"config": config, "rows": rows, "images": images, "prompts": prompts}


def configurations(
    folder: Path, work: Path, pipelines, variants, recipes, prompts, latents, common, seed
) -> dict:
    """The table of :func:`evaluate`, in the order they run (name -> the images of ``prompts`` and
    their seconds, precision and sampler): PyTorch, JAX, OpenVINO at the default precision and at
    f32, then each INT8 UNet in the f32 pipeline (quantized once, when the first of them runs)."""

    from sdaccel.tpu import schedulers

    sampler = read_config(folder, "scheduler")["_class_name"]
    jax_sampler = sampler if sampler in schedulers.SCHEDULERS else schedulers.FALLBACK  # see from_config
    export_dir = work / "openvino"
    unet_xml = export_dir / "unet" / "openvino_model.xml"

    def timed(run, *args, precision="f32", sampler=sampler):
        start = time.perf_counter()
        images = run(*args, prompts, latents, **common)
        return images, {"precision": precision, "sampler": sampler, "seconds": time.perf_counter() - start}

    @cache
    def export():
        export_pipeline(folder, export_dir, components=text_to_image_components(folder), weight_dtype="fp32")

    @cache
    def openvino(precision):  # the export (once), and its pipeline at this precision
        export()
        return OVPipeline.from_pretrained(export_dir, precision=precision)

    def openvino_row(precision, unet=None):
        pipe = openvino(precision)
        if unet is not None:  # an INT8 UNet in the f32 pipeline
            pipe.replace_unet(quantized()[unet])
            return timed(runner.paired_images, pipe, precision=f"int8+{pipe.precision}")
        return timed(runner.paired_images, pipe, precision=pipe.precision)

    @cache
    def quantized():
        return quantize_unet(openvino("f32"), unet_xml, work, variants, **common, seed=seed, recipes=recipes)

    table = {"torch_fp32": partial(timed, run_torch, folder)}
    if "jax_fp32" in pipelines:
        table["jax_fp32"] = partial(timed, run_jax, folder, sampler=jax_sampler)
    for name, precision in (("ov_default", None), ("ov_f32", "f32")):
        if name in pipelines:
            table[name] = partial(openvino_row, precision)
    if "ov_f32" in pipelines:
        table |= {unet: partial(openvino_row, "f32", unet) for unet in [*variants, *(recipes or {})]}
    return table


def evaluated_row(images: list, prompts, measured: dict, against: dict) -> dict:
    """A row of :func:`evaluate`: the adherence, the precision and sampler that ran, PSNR/SSIM
    against each reference, the seconds."""

    row = {
        "adherence": dataset.adherence(images, prompts),
        **{k: measured[k] for k in ("precision", "sampler")},
    }
    for reference, reference_images in against.items():
        pair = quality.compare_images(reference_images, images)
        row[f"vs_{reference}"] = {k: pair[k] for k in ("psnr_mean", "ssim_mean", "identical")}
    row["seconds"] = round(measured["seconds"], 2)
    return row


def different_samplers(result: dict) -> list[str]:
    """Rows whose sampler is not the reference's (the JAX pipeline runs Euler in place of PNDM):
    their PSNR/SSIM against it measure the sampler too, their adherence is still comparable."""
    reference = result["rows"]["torch_fp32"]["sampler"]
    return [name for name, row in result["rows"].items() if row["sampler"] != reference]


def format_table(result: dict) -> str:
    """The rows as a Markdown table, then a note on each row that ran another sampler."""

    def pair(reference, key):
        def cell(name, row):
            p = row.get(f"vs_{reference}")
            if p is None:
                return "-"
            if key == "ssim_mean":
                return f"{p['ssim_mean']:.3f}"
            return "identical" if p["identical"] == result["config"]["prompts"] else f"{p['psnr_mean']:.1f}"

        return cell

    columns = [
        Column("pipeline", runner.name_cell, "l"),
        Column("precision", lambda name, row: row["precision"], "l"),
        Column("adherence (colour+shape)", lambda name, row: f"**{row['adherence']['score']:.3f}**", "l"),
        *(Column(k, runner.number(f"adherence.{k}", ".3f"), "l") for k in dataset.ATTRIBUTES),
        Column("PSNR vs torch (dB)", pair("torch_fp32", "psnr_mean"), "l"),
        Column("SSIM vs torch", pair("torch_fp32", "ssim_mean"), "l"),
        Column("PSNR vs ov_f32 (dB)", pair("ov_f32", "psnr_mean"), "l"),
        Column("SSIM vs ov_f32", pair("ov_f32", "ssim_mean"), "l"),
    ]
    lines = [runner.format_table(result["rows"], columns)]
    for name in different_samplers(result):
        lines.append(
            f"\n{name} ran {result['rows'][name]['sampler']} (the checkpoint's "
            f"{result['rows']['torch_fp32']['sampler']} is not implemented there): its PSNR/SSIM "
            "include the change of sampler."
        )
    return "\n".join(lines)


def final_latents(pipe, prompts: Sequence[str], latents, steps: int, guidance_scale: float, size: int):
    """The final (diffusion-scaled) latents of ``pipe`` for ``prompts`` from initial ``latents``."""
    out = pipe.generate(
        list(prompts), steps=steps, guidance_scale=guidance_scale, height=size, width=size, latents=latents
    )
    return np.asarray(out.latents, np.float32)


def vae_decoder_quality(
    checkpoint: str | os.PathLike,
    work_dir: str | os.PathLike,
    variants: Sequence[str] = ("int8_weights", "hybrid", "full_int8"),
    num_prompts: int = 96,
    calibration_prompts: int = 16,
    steps: int = 20,
    guidance_scale: float = 6.0,
    seed: int = 0,
) -> dict:
    """What each INT8 decoder costs on a trained ``sdaccel.toy.dataset`` checkpoint.

    The f32 pipeline (``INFERENCE_PRECISION_HINT=f32``) generates ``num_prompts`` held-out prompts
    from the noise of :func:`sdaccel.toy.comparison.paired_latents`; their final latents are
    decoded by the f32 decoder (the reference) and by each INT8 decoder (compiled with the f32
    hint, so that INT8 is the only difference). Calibration: the final latents of
    ``calibration_prompts`` *training* captions. Returns per row the prompt adherence
    (:func:`sdaccel.toy.dataset.adherence`), PSNR/SSIM against the f32 decoder's images, the size on
    disk and the quantization counts.
    """

    bad = [v for v in variants if v not in VAE_VARIANTS]
    if bad:
        raise ValueError(f"unknown INT8 variants {bad}; expected some of {VAE_VARIANTS}")
    folder = resolve_checkpoint(checkpoint)
    work = Path(work_dir)
    check_writable(work)
    size = read_config(folder, "unet")["sample_size"] * vae_scale_factor_of(folder, "vae")
    export = export_pipeline(
        folder, work / "openvino", components=text_to_image_components(folder), weight_dtype="fp32", progress=False
    )  # fmt: skip
    pipe = OVPipeline.from_pretrained(export, precision="f32")
    call = dict(steps=steps, guidance_scale=guidance_scale, size=size)
    prompts = dataset.heldout_prompts(num_prompts, seed=seed)
    heldout = decoder_inputs(
        final_latents(pipe, prompts, paired_latents(folder, num_prompts, size, seed), **call), pipe.vae_config
    )
    train = dataset.prompts(calibration_prompts, seed=seed + 1, split="train")
    noise = paired_latents(folder, calibration_prompts, size, seed + 10_000)
    calibration = decoder_inputs(final_latents(pipe, train, noise, **call), pipe.vae_config)
    src = export / "vae_decoder" / MODEL_XML

    def decoded(variant):  # the f32 decoder, or an INT8 one quantized on the calibration latents
        xml, measured = src, {"size_bytes": ir_size_bytes(src)}
        if variant != "f32":
            xml = work / f"vae_decoder_{variant}.xml"
            report = quantize_vae_decoder(src, xml, variant, calibration)
            measured = {k: report[k] for k in ("size_bytes", "seconds", "calibration_samples")}
        return uint8_images(decode(compile_f32(xml), heldout)), {**measured, **describe_ir(xml)}

    table = {variant: partial(decoded, variant) for variant in ("f32", *variants)}
    rows, _ = runner.score(table, prompts, decoder_row, references=("f32",))
    return {
        "config": {
            "checkpoint": str(checkpoint),
            "prompts": num_prompts,
            "split": "heldout",
            "calibration_prompts": calibration_prompts,
            "calibration_split": "train",
            "size": size,
            "seed": seed,
            **{k: v for k, v in call.items() if k != "size"},
            "precision": "f32 hint everywhere; the INT8 layers run in INT8",
        },
        "rows": rows,
    }


def decoder_row(images: list, prompts, measured: dict, against: dict) -> dict:
    """A row of :func:`vae_decoder_quality`: the adherence, PSNR/SSIM against the f32 decoder's
    images (not for the f32 row), then what the decoder measured."""

    row = {"adherence": dataset.adherence(images, prompts)}
    for reference in against.values():
        pair = compare_images(reference, images)
        row["vs_f32"] = {k: pair[k] for k in ("psnr_mean", "ssim_mean", "identical")}
    return {**row, **measured}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", help="a trained shapes checkpoint (diffusers layout)")
    parser.add_argument("--prompts", type=int, default=96, help="held-out prompts (default 96)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--guidance-scale", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--variants",
        nargs="*",
        default=list(VARIANTS),
        choices=[*VARIANTS, *PARTS_VARIANTS],
        help="INT8 rows (default: every recipe in one piece)",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="default build/adherence/<name>")
    parser.add_argument("--out", type=Path, default=None, help="JSON (default <work-dir>/adherence.json)")
    args = parser.parse_args(argv)
    work = args.work_dir or Path("build/adherence") / Path(args.checkpoint).name
    result = evaluate(
        args.checkpoint,
        work,
        num_prompts=args.prompts,
        steps=args.steps,
        guidance_scale=args.guidance_scale,
        seed=args.seed,
        variants=tuple(args.variants),
    )
    table = format_table(result)
    print(table)
    out = args.out or work / "adherence.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({k: result[k] for k in ("config", "rows", "prompts")}, indent=2) + "\n")
    print(f"\nwritten: {out}")
    return result


if __name__ == "__main__":
    main()
