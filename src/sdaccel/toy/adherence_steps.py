"""Prompt adherence against the number of steps: the base sampler and an LCM-LoRA, in every pipeline.

    python -m sdaccel.toy.adherence_steps checkpoints/tiny-shapes-sdxl --lora checkpoints/tiny-shapes-sdxl-lcm-lora \\
        --steps 1 2 3 4 6 8 12 20 --prompts 96 --out benchmarks/results/steps_adherence_tiny-shapes-sdxl.json

Fewer steps is the largest lever on latency, and a distilled adapter (:mod:`sdaccel.tools.toys.distill`)
is what makes few steps draw the right picture. This sweep says how many steps each sampler
needs, on the held-out prompts of :mod:`sdaccel.toy.dataset`, in each pipeline:

* ``jax_fp32``: :class:`sdaccel.tpu.pipeline.JaxPipeline`, float32; the adapter fused with ``fuse_lora``;
* ``ov_f32``: :class:`sdaccel.cpu.pipeline.OVPipeline` with the f32 hint; the adapter fused at
  export (``export_pipeline(..., lora=...)``);
* one row per INT8 recipe of that OpenVINO UNet (``full_int8``, and full INT8 with the ResNets in
  float, :data:`sdaccel.toy.int8_unets.FLOAT_GROUP_VARIANTS`), quantized *after* the fusion and
  calibrated on training captions with its own sampler (:func:`sdaccel.toy.int8_unets.quantize_unet`).

Two samplers by default: ``base``, the checkpoint's own scheduler (Euler for the SDXL layout) with
classifier-free guidance ``base_guidance`` (6, the guidance of :mod:`sdaccel.toy.adherence`'s table), and
``lcm``, the LCM scheduler with the adapter and guidance 1 (no classifier-free guidance: the
adapter learned the guided trajectory, as LCM-LoRA is run). A third on request,
``lcm_no_adapter``: the LCM scheduler on the base weights, with the adapter's guidance and
nothing else changed, which says what the adapter adds to the sampler. Every row starts image
``i`` from the same noise (:func:`sdaccel.toy.comparison.paired_latents`). The rows' Markdown table and the
per-pipeline verdicts are :mod:`sdaccel.toy.steps_report`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import platform
import time
from collections.abc import Mapping, Sequence
from functools import cache, partial
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import read_config, resolve_checkpoint
from sdaccel.core.lora_files import WEIGHT_NAMES
from sdaccel.core.staging import check_writable, replace_json
from sdaccel.cpu.export import export_pipeline, text_to_image_components, vae_scale_factor_of
from sdaccel.cpu.pipeline import OVPipeline
from sdaccel.toy import dataset, runner
from sdaccel.toy.comparison import paired_latents, uint8_images
from sdaccel.toy.int8_unets import FLOAT_GROUP_VARIANTS, quantize_unet
from sdaccel.toy.steps_report import format_table, sampler_label

PIPELINES = ("jax_fp32", "ov_f32")
INT8_VARIANTS = ("full_int8", *FLOAT_GROUP_VARIANTS)
#: The samplers of a sweep by default: the checkpoint's own, and LCM with the adapter fused.
SAMPLERS = ("base", "lcm")
#: The LCM sampler on the base weights (no adapter), at the adapter's guidance.
NO_ADAPTER = "lcm_no_adapter"
#: Every sampler a sweep can run.
SAMPLER_CHOICES = (*SAMPLERS, NO_ADAPTER)
#: The samplers that run the LCM scheduler, at ``lcm_guidance``.
LCM_SAMPLERS = ("lcm", NO_ADAPTER)
ATTRIBUTES = ("score", "colour", "shape", "background", "position", "all")
#: Steps of the INT8 calibration run, per sampler (its UNet inputs are the calibration data).
CALIBRATION_STEPS = {"base": 20, "lcm": 8, NO_ADAPTER: 8}


def lora_file(lora: str | Path) -> Path:
    """The ``.safetensors`` of an adapter folder (or the file itself); a clear error otherwise."""

    path = Path(lora)
    if path.is_file():
        return path
    for name in WEIGHT_NAMES:
        if (path / name).is_file():
            return path / name
    raise FileNotFoundError(
        f"{lora}: no LoRA weights ({' or '.join(WEIGHT_NAMES)}); make the adapter with "
        "`python -m sdaccel.tools.toys.distill CHECKPOINT OUT_DIR`."
    )


def image_size(folder: Path) -> int:

    return read_config(folder, "unet")["sample_size"] * vae_scale_factor_of(folder, "vae")


def jax_runner(folder: Path, sampler: str, lora: Path | None, vae: str | Path | None = None):
    """``run(prompts, latents, steps, guidance_scale, size) -> uint8 images`` of the JAX pipeline,
    float32, with ``sampler``'s scheduler (the adapter fused for ``"lcm"``) and ``vae`` (``None``:
    the checkpoint's own; a tiny autoencoder's folder: decode with it)."""
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import JaxPipeline

    pipe = JaxPipeline.from_pretrained(
        folder,
        dtype=jnp.float32,
        progress=False,
        scheduler="lcm" if sampler in LCM_SAMPLERS else None,
        vae=None if vae is None else str(vae),
    )
    if sampler == "lcm":
        pipe.fuse_lora([(str(lora), 1.0)])

    def run(prompts, latents, steps, guidance_scale, size):
        result = pipe.generate(
            list(prompts),
            steps=steps,
            guidance_scale=guidance_scale,
            height=size,
            width=size,
            latents=np.transpose(latents, (0, 2, 3, 1)),
        )
        return uint8_images(result.array)

    return run


def openvino_pipe(
    folder: Path,
    sampler: str,
    lora: Path | None,
    work: Path,
    export_dir: Path | None = None,
    vae: str | Path | None = None,
    static=None,
):
    """The OpenVINO pipeline of ``sampler`` (f32 hint) and its UNet's IR: the export with the
    adapter fused for ``"lcm"``, the base export otherwise (``work/openvino_<lcm|base>`` unless
    ``export_dir``), exported once and then reused (quietly: "already holds a complete export" is
    no news here); ``vae``: a tiny autoencoder's folder to decode with (``None``: the export's VAE);
    ``static``: the one shape to compile it for (``OVPipeline.from_pretrained``'s; ``None``: dynamic)."""

    weights = "lcm" if sampler == "lcm" else "base"
    export_dir = export_dir or work / f"openvino_{weights}"
    adapters = [(str(lora), 1.0)] if sampler == "lcm" else []
    with contextlib.redirect_stdout(io.StringIO()):
        export_pipeline(
            folder,
            export_dir,
            components=text_to_image_components(folder),
            weight_dtype="fp32",
            progress=False,
            lora=adapters,
        )
    pipe = OVPipeline.from_pretrained(
        export_dir,
        precision="f32",
        scheduler="lcm" if sampler in LCM_SAMPLERS else None,
        vae=None if vae is None else str(vae),
        static=static,
    )
    return pipe, export_dir / "unet" / "openvino_model.xml"


def openvino_runner(pipe):
    """``run(prompts, latents, steps, guidance_scale, size) -> uint8 images`` of an
    :class:`~sdaccel.cpu.pipeline.OVPipeline`."""

    def run(prompts, latents, steps, guidance_scale, size):
        out = pipe.generate(
            list(prompts),
            steps=steps,
            guidance_scale=guidance_scale,
            height=size,
            width=size,
            latents=latents,
        )
        return uint8_images(out.array)

    return run


def adherence_vs_steps(
    checkpoint: str | Path,
    lora: str | Path | None = None,
    steps: Sequence[int] = (1, 2, 4, 8, 20),
    prompts: int = 16,
    pipelines: Sequence[str] = ("jax_fp32",),
    int8: Sequence[str] = (),
    samplers: Sequence[str] = SAMPLERS,
    base_guidance: float = 6.0,
    lcm_guidance: float = 1.0,
    work_dir: str | Path | None = None,
    seed: int = 0,
    progress: bool = False,
    exports: Mapping[str, str | Path] | None = None,
) -> list[dict]:
    """Adherence of each pipeline x sampler x step count on ``prompts`` held-out prompts.

    ``pipelines``: any of :data:`PIPELINES`; ``int8``: INT8 recipes of the OpenVINO UNet (any of
    :data:`INT8_VARIANTS`, or ``"hybrid"``/``"int8_weights"``), each its own pipeline row (needs
    ``work_dir``, as ``ov_f32`` does: exports and quantized UNets go there and are reused).
    ``samplers``: any of :data:`SAMPLER_CHOICES`: ``"base"``, ``"lcm"`` (needs ``lora``) and
    ``"lcm_no_adapter"`` (the LCM sampler on the base weights). Every input is checked
    before anything runs. Returns one dict per (pipeline, sampler, steps): ``pipeline``,
    ``sampler``, ``scheduler``, ``lora``, ``steps``, ``guidance_scale``, ``prompts``,
    ``seconds`` and the :func:`sdaccel.toy.dataset.adherence` fields.

    ``exports``: an OpenVINO export folder per weights (``{"base": ..., "lcm": ...}``) to use in
    place of ``work_dir/openvino_<base|lcm>``, e.g. folders a notebook exported already from the same
    checkpoint (fp32 weights; the ``"lcm"`` one with ``lora`` fused at scale 1; ``"lcm_no_adapter"``
    runs the ``"base"`` one):
    :func:`~sdaccel.cpu.export.export_pipeline` reuses a folder made with the same settings and
    refuses any other.
    """

    # 1. Every input checked before anything runs
    steps = check_sweep(lora, steps, prompts, pipelines, int8, samplers, work_dir, exports)
    exports = {k: Path(v) for k, v in (exports or {}).items()}
    lora_path = lora_file(lora) if "lcm" in samplers else None
    folder = resolve_checkpoint(checkpoint)
    size = image_size(folder)

    # 2. The held-out prompts through each pipeline x sampler x step count, from the same noise
    sweep = Sweep(folder, lora_path, size, seed, (base_guidance, lcm_guidance), prompts)
    work = None if work_dir is None else Path(work_dir)
    table = {}
    for sampler in samplers:
        if "jax_fp32" in pipelines:
            table |= sweep.steps("jax_fp32", sampler, steps, partial(sweep.jax, sampler))
        if "ov_f32" in pipelines or int8:
            openvino = cache(partial(sweep.openvino, sampler, work, exports))
            quantized = cache(partial(sweep.quantize, openvino, sampler, list(int8), work))
            if "ov_f32" in pipelines:
                table |= sweep.steps("ov_f32", sampler, steps, partial(sweep.openvino_run, openvino))
            for variant in int8:
                make = partial(sweep.openvino_run, openvino, quantized, variant)
                table |= sweep.steps(variant, sampler, steps, make)

    def report(key, row):
        if progress:
            print(f"{key[0]:28s} {key[1]:4s} {key[2]:3d} steps  score {row['score']:.3f}", flush=True)

    rows, _ = runner.score(table, sweep.prompts, sweep.row, scored=report)
    return list(rows.values())


def check_sweep(lora, steps, prompts: int, pipelines, int8, samplers, work_dir, exports) -> list[int]:
    """Refuse a sweep :func:`adherence_vs_steps` cannot run, before anything runs; returns the steps."""
    unknown = [p for p in pipelines if p not in PIPELINES]
    if unknown:
        raise ValueError(f"Unknown pipelines {unknown}; choose from {list(PIPELINES)}.")
    bad_samplers = [s for s in samplers if s not in SAMPLER_CHOICES]
    if bad_samplers or not samplers:
        raise ValueError(
            f"samplers must be a non-empty subset of {list(SAMPLER_CHOICES)}, got {list(samplers)}."
        )
    steps = [int(s) for s in steps]
    if not steps or any(s < 1 for s in steps):
        raise ValueError(f"steps must be a non-empty list of integers >= 1, got {steps}.")
    if prompts < 1:
        raise ValueError(f"prompts must be >= 1, got {prompts}.")
    if "lcm" in samplers and lora is None:
        raise ValueError("The 'lcm' sampler runs the LCM-LoRA: pass lora=<adapter folder or file>.")
    if set(exports or {}) - set(SAMPLERS):
        raise ValueError(f"exports takes a folder per sampler of {list(SAMPLERS)}, got {sorted(exports)}.")
    if (int8 or "ov_f32" in pipelines) and work_dir is None:
        raise ValueError("The OpenVINO rows export and quantize into work_dir: pass work_dir=<folder>.")
    return steps


class Sweep:
    """What every configuration of a sweep shares: the checkpoint, its adapter, the held-out
    prompts and their noise, and each sampler's guidance (``guidance``: base, LCM)."""

    def __init__(self, folder: Path, lora: Path | None, size: int, seed: int, guidance, prompts: int):
        self.folder, self.lora, self.size, self.seed = folder, lora, size, seed
        self.base_guidance, self.lcm_guidance = guidance
        self.prompts, self.n = dataset.heldout_prompts(prompts, seed=seed), prompts
        self.latents = paired_latents(folder, prompts, size, seed)
        self.base_scheduler = read_config(folder, "scheduler")["_class_name"]

    def guidance(self, sampler: str) -> float:
        return self.lcm_guidance if sampler in LCM_SAMPLERS else self.base_guidance

    def steps(self, name: str, sampler: str, steps, make_run) -> dict:
        """The configurations of one pipeline and sampler, one per step count: ``make_run()`` (called
        once, when the first runs) gives the ``run(prompts, latents, steps, guidance, size)``."""
        made = cache(make_run)
        return {(name, sampler, n): partial(self.generate, made, name, sampler, n) for n in steps}

    def generate(self, made, name: str, sampler: str, n: int) -> tuple[list, dict]:
        run, guidance = made(), self.guidance(sampler)
        start = time.perf_counter()
        images = run(self.prompts, self.latents, n, guidance, self.size)
        seconds = time.perf_counter() - start
        scheduler = "LCMScheduler" if sampler in LCM_SAMPLERS else self.base_scheduler
        measured = {"pipeline": name, "sampler": sampler, "scheduler": scheduler, "lora": sampler == "lcm"}
        return images, {
            **measured,
            "steps": n,
            "guidance_scale": guidance,
            "prompts": self.n,
            "seconds": seconds,
        }

    def row(self, images, prompts, measured: dict, against: dict) -> dict:
        """A row of the sweep: what ran, the :func:`sdaccel.toy.dataset.adherence` fields, the seconds."""
        head = {k: v for k, v in measured.items() if k != "seconds"}
        return {**head, **dataset.adherence(images, prompts), "seconds": round(measured["seconds"], 2)}

    def jax(self, sampler: str):
        return jax_runner(self.folder, sampler, self.lora)

    def openvino(self, sampler: str, work: Path, exports: dict):
        weights = "lcm" if sampler == "lcm" else "base"
        return openvino_pipe(self.folder, sampler, self.lora, work, exports.get(weights))

    def quantize(self, openvino, sampler: str, variants: list[str], work: Path) -> dict:
        """The sampler's INT8 UNets, calibrated with its f32 pipeline (:func:`quantize_unet`)."""
        pipe, unet_xml = openvino()
        return quantize_unet(
            pipe,
            unet_xml,
            work / f"int8_{sampler}",
            variants,
            steps=CALIBRATION_STEPS[sampler],
            guidance_scale=self.guidance(sampler),
            size=self.size,
            seed=self.seed,
        )

    def openvino_run(self, openvino, quantized=None, variant: str | None = None):
        """The run of the sampler's OpenVINO pipeline, with ``variant``'s INT8 UNet swapped in
        (``quantized()``: every variant's) when one is named."""
        pipe, _ = openvino()
        if variant is not None:
            pipe.replace_unet(quantized()[variant])
        return openvino_runner(pipe)


def plot_adherence(rows: list[dict], ax=None, key: str = "score"):
    """A line chart of ``key`` (adherence) against steps, one line per pipeline x sampler;
    returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4))
    else:
        fig = ax.figure
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["pipeline"], r["sampler"]), []).append(r)
    for (pipeline, sampler), group in groups.items():
        group = sorted(group, key=lambda r: r["steps"])
        style = {"lcm": "-", NO_ADAPTER: ":"}.get(sampler, "--")
        label = f"{pipeline}, {sampler_label(sampler, group[0]['scheduler'])}"
        ax.plot([r["steps"] for r in group], [r[key] for r in group], style, marker="o", label=label)
    all_steps = sorted({r["steps"] for r in rows})
    ax.set_xscale("log")
    ax.set_xticks(all_steps)
    ax.set_xticklabels([str(s) for s in all_steps])
    ax.set_ylim(0, 1.02)
    ax.set(xlabel="steps", ylabel=f"adherence ({key})", title="Prompt adherence against steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", help="a trained shapes checkpoint (diffusers layout)")
    parser.add_argument("--lora", required=True, help="the LCM-LoRA folder (or .safetensors file)")
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8, 12, 20])
    parser.add_argument("--prompts", type=int, default=96, help="held-out prompts (default 96)")
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    parser.add_argument(
        "--int8",
        nargs="*",
        default=list(INT8_VARIANTS),
        choices=["int8_weights", "hybrid", *INT8_VARIANTS],
        help="INT8 recipes of the OpenVINO UNet, one row each (default: %(default)s)",
    )
    parser.add_argument("--base-guidance", type=float, default=6.0)
    parser.add_argument("--lcm-guidance", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=None, help="default build/steps/<name>")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON (default <work-dir>/steps_adherence.json)"
    )
    args = parser.parse_args(argv)
    work = args.work_dir or Path("build/steps") / Path(args.checkpoint).name
    out = args.out or work / "steps_adherence.json"

    check_writable(out.parent)
    start = time.perf_counter()
    rows = adherence_vs_steps(
        args.checkpoint,
        args.lora,
        steps=args.steps,
        prompts=args.prompts,
        pipelines=args.pipelines,
        int8=args.int8,
        base_guidance=args.base_guidance,
        lcm_guidance=args.lcm_guidance,
        work_dir=work,
        seed=args.seed,
        progress=True,
    )

    import diffusers
    import jax
    import nncf
    import openvino
    import torch

    result = {
        "config": {
            "checkpoint": str(args.checkpoint),
            "lora": str(args.lora),
            "steps": args.steps,
            "prompts": args.prompts,
            "split": "heldout",
            "base_guidance": args.base_guidance,
            "lcm_guidance": args.lcm_guidance,
            "seed": args.seed,
            "int8_calibration_steps": CALIBRATION_STEPS,
        },
        "versions": {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "openvino": openvino.__version__,
            "nncf": nncf.__version__,
            "diffusers": diffusers.__version__,
            "torch": torch.__version__,
        },
        "wall_s": round(time.perf_counter() - start, 1),
        "rows": rows,
    }
    print(format_table(rows))
    out.parent.mkdir(parents=True, exist_ok=True)
    replace_json(out, result)
    print(f"\nwritten: {out}")
    return result


if __name__ == "__main__":
    main()
