"""Fewer steps: the measurements of notebook 07, on either track.

The notebook times whole images (text encoding, every denoising step, the decode) for a base
model at its usual number of steps and for the same model with an LCM-LoRA fused at a few steps,
then adds the tiny autoencoder and an INT8 UNet one at a time. This module holds what its
cells share and what the tests check:

- :func:`time_images`: compile (or warm up) once, then the median of a few timed calls (the calls
  timed by :func:`sdaccel.course.whole_image.time_calls`, that is :func:`sdaccel.core.timing.time_calls`),
  with the decode's share where the pipeline reports it, and the final latents;
- :func:`speed_rows` / :func:`format_speed`: seconds per image and the ratio to a base measured in
  the same run, with the precision that ran;
- :func:`lever_costs` / :func:`format_costs`: what each configuration costs against the base's
  images (PSNR, SSIM and, for the shapes checkpoints' captions, prompt adherence);
- :func:`decoder_cost`: what the tiny autoencoder costs against the VAE on the same latents, beside
  what it saves;
- :func:`faster`: a ratio as words ("3.1x faster", "1.2x slower"), so the text follows the numbers;
- :func:`parameters`: the size of a model or of a VAE's decoder (when TAESD can pay), from its files;
- :func:`use_scheduler`: switch a JAX pipeline's sampler (LCM for a fused LCM-LoRA, and back);
- :func:`adapter_rows` / :func:`adapter_gain` / :func:`format_adapter_gain`: what the LCM-LoRA adds
  to the LCM sampler on a trained shapes checkpoint, at each number of steps: adherence, and PSNR
  against the base sampler's images at its usual number of steps, with the adapter and without it;
- :func:`random_tiny_vae`: a random-weight tiny autoencoder that fits a checkpoint's latents (a
  stand-in for TAESD where there is no trained one: it times like one, and draws noise; the smoke
  profile runs the toy's own, ``checkpoints/tiny-shapes-sdxl-taesd``, distilled by
  :mod:`sdaccel.tools.toys.distill_taesd`).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path

from sdaccel.core.checkpoint import open_weights, read_config, read_json, resolve_checkpoint
from sdaccel.course.whole_image import time_calls
from sdaccel.cpu import quality
from sdaccel.toy import adherence_steps as sweeps
from sdaccel.toy import dataset
from sdaccel.toy.runner import score


@dataclass
class Timed:
    """One configuration's timing: the images of its last call and the seconds of each."""

    images: list
    #: seconds of the first call that were compilation (JAX; 0 for OpenVINO, which compiles at load)
    compile_s: float
    #: whole-image seconds of each timed call (the call's run time over its number of images)
    per_image_s: list[float]
    steps: int
    #: the decode's seconds per image in each timed call, where the pipeline reports it (OpenVINO;
    #: a JAX pipeline runs denoising and decode as one program: empty)
    decode_per_image_s: list[float] = field(default_factory=list)
    #: the final latents of the last call, where the pipeline keeps them (``None`` otherwise)
    latents: object = None

    @property
    def seconds(self) -> float:
        """The median whole-image seconds."""
        return statistics.median(self.per_image_s)

    @property
    def decode_seconds(self) -> float | None:
        """The median decode seconds per image, or ``None`` where the pipeline does not report it."""
        return statistics.median(self.decode_per_image_s) if self.decode_per_image_s else None


def time_images(
    pipe, prompts: Sequence[str], repeats: int = 3, *, clock=time.perf_counter, **generate
) -> Timed:
    """Generate ``prompts`` once to compile (JAX) or warm up (OpenVINO), then ``repeats`` more
    times, timed by the wall clock less any compile time (:func:`sdaccel.course.whole_image.time_calls`,
    built on :func:`sdaccel.core.timing.time_calls`). Every call is the same (same seed), so the
    images of the last one stand for all."""
    if not prompts:
        raise ValueError("time_images needs at least one prompt.")
    last = {}

    def call():
        last["result"] = pipe.generate(list(prompts), **generate)
        return last["result"]

    def warmup():
        last["first"] = pipe.generate(list(prompts), **generate)

    times = time_calls(call, repeats, warmup=warmup, clock=clock)
    first = last["first"].timings
    return Timed(
        images=list(last["result"].images),
        compile_s=float(first.get("compile_s", 0.0)),
        per_image_s=[s / len(prompts) for s in times["image_s"]],
        steps=int(first["steps"]),
        decode_per_image_s=[s / len(prompts) for s in times["decode_s"] if s is not None],
        latents=getattr(last["result"], "latents", None),
    )


def speed_rows(timed: Mapping[str, Timed], base: str, precisions: Mapping[str, str] | None = None) -> dict:
    """``{name: {"steps", "seconds", "x_base", "compile_s", "precision"}}``: the median whole-image
    seconds of each configuration and how many times faster than ``base`` (a key of ``timed``,
    measured in the same run) it is."""
    if base not in timed:
        raise KeyError(f"The base {base!r} is not among the timed configurations {sorted(timed)}.")
    reference = timed[base].seconds
    rows = {}
    for name, t in timed.items():
        rows[name] = {
            "steps": t.steps,
            "seconds": t.seconds,
            "x_base": reference / t.seconds,
            "compile_s": t.compile_s,
            "precision": (precisions or {}).get(name, ""),
        }
    return rows


def format_speed(rows: Mapping[str, dict], base: str) -> str:
    """The speed table as text, one line per configuration."""
    width = max(len(n) for n in rows)
    lines = [
        f"{'configuration':{width}s} {'steps':>5s} {'s/image':>9s} {'x ' + base:>{len(base) + 2}s}  precision"
    ]
    for name, r in rows.items():
        lines.append(
            f"{name:{width}s} {r['steps']:5d} {r['seconds']:9.4f} {r['x_base']:{len(base) + 2}.2f}  {r['precision']}"
        )
    return "\n".join(lines)


def faster(ratio: float) -> str:
    """``ratio`` (base seconds / these seconds) as words: ``"3.10x faster"``, ``"1.25x slower"``."""
    if ratio <= 0:
        raise ValueError(f"A speed ratio is positive, got {ratio}.")
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def lever_costs(
    reference: Sequence, candidates: Mapping[str, Sequence], prompts: Sequence[str] | None = None
) -> dict:
    """What each configuration's images cost against ``reference`` (the base's images of the same
    prompts and seed): mean PSNR and SSIM (:func:`sdaccel.cpu.quality.compare_images`) and, when
    every prompt is a caption of the shapes data set, the adherence of each (reference included,
    under ``"reference"``)."""

    scored = bool(prompts) and all(dataset.is_caption(p) for p in prompts)
    costs = {}
    if scored:
        costs["reference"] = {"adherence": dataset.adherence(reference, prompts)["score"]}
    for name, images in candidates.items():
        pair = quality.compare_images(reference, images)
        costs[name] = {"psnr_mean": pair["psnr_mean"], "ssim_mean": pair["ssim_mean"]}
        if scored:
            costs[name]["adherence"] = dataset.adherence(images, prompts)["score"]
    return costs


def decoder_cost(
    vae_images: Sequence,
    tiny_images: Sequence,
    prompts: Sequence[str] | None = None,
    vae_decode_s: float | None = None,
    tiny_decode_s: float | None = None,
) -> dict:
    """What decoding with a tiny autoencoder costs against the VAE, the images of both decoders
    from the *same* latents: mean PSNR and SSIM of the tiny autoencoder's images against the VAE's
    and, when every prompt is a caption of the shapes data set, the adherence of each
    (``adherence``, ``vae_adherence``). With both decode times (seconds per image), ``decode_x``:
    how many times faster the tiny autoencoder decodes."""

    if len(vae_images) != len(tiny_images) or not vae_images:
        raise ValueError(
            f"Pass the two decoders' images of the same latents, one each: got {len(vae_images)} "
            f"from the VAE and {len(tiny_images)} from the tiny autoencoder."
        )
    pair = quality.compare_images(vae_images, tiny_images)
    cost = {"psnr_mean": pair["psnr_mean"], "ssim_mean": pair["ssim_mean"], "images": len(vae_images)}
    if prompts and all(dataset.is_caption(p) for p in prompts):
        cost["vae_adherence"] = dataset.adherence(vae_images, prompts)["score"]
        cost["adherence"] = dataset.adherence(tiny_images, prompts)["score"]
    if vae_decode_s is not None and tiny_decode_s is not None:
        cost.update(
            vae_decode_s=vae_decode_s, tiny_decode_s=tiny_decode_s, decode_x=vae_decode_s / tiny_decode_s
        )
    return cost


def format_costs(costs: Mapping[str, dict], reference: str) -> str:
    """The cost table as text; PSNR and SSIM are against ``reference`` (its own row has none)."""
    width = max(len(n) for n in [*costs, reference])
    lines = [f"{'configuration':{width}s} {'PSNR dB':>8s} {'SSIM':>6s}  adherence"]
    for name, c in costs.items():
        label = reference if name == "reference" else name
        psnr = "-" if "psnr_mean" not in c else f"{c['psnr_mean']:8.2f}"
        ssim = "-" if "ssim_mean" not in c else f"{c['ssim_mean']:6.3f}"
        score = "-" if "adherence" not in c else f"{c['adherence']:.0%}"
        lines.append(f"{label:{width}s} {psnr:>8s} {ssim:>6s}  {score}")
    return "\n".join(lines)


def parameters(folder: str | os.PathLike, component: str = "", prefix: str = "") -> int:
    """Parameters of the weights in ``folder/component`` whose names start with ``prefix``
    (``"decoder."``: the decoder of a VAE or of a tiny autoencoder), read from the safetensors
    headers without loading a tensor."""

    weights = open_weights(folder, component)
    return sum(math.prod(weights.shape(k)) for k in weights.keys() if k.startswith(prefix))


def use_scheduler(pipe, kind: str | None) -> None:
    """Give a JAX :class:`~sdaccel.tpu.pipeline.JaxPipeline` the sampler ``kind`` (``"lcm"``, ``"euler_a"``...;
    ``None``: the checkpoint's own), built from its checkpoint's scheduler config as
    ``JaxPipeline.from_pretrained(..., scheduler=kind)`` builds it, and drop its compiled programs
    (the sampler is part of them). The weights stay as they are (a fused LoRA too)."""
    from sdaccel.tpu import schedulers

    scheduler = schedulers.from_config(read_config(pipe.folder, "scheduler"), kind=kind)
    pipe.scheduler = scheduler
    pipe.set_jit_options()


def adapter_rows(
    checkpoint: str | os.PathLike,
    lora: str | os.PathLike,
    steps: Sequence[int],
    prompts: int,
    seed: int,
    work_dir: str | os.PathLike,
    exports: Mapping[str, str | os.PathLike] | None = None,
    base_steps: int = 20,
) -> list[dict]:
    """The base sampler (the checkpoint's own, guidance 6) and the LCM sampler with the LCM-LoRA
    fused and without it (guidance 1), at each of ``steps`` (the base also at ``base_steps``), on
    ``prompts`` held-out prompts of a trained shapes checkpoint, every row from the same noise,
    OpenVINO f32. The rows of :func:`sdaccel.toy.adherence_steps.adherence_vs_steps` (``sampler``,
    ``steps``, ``score``...), each with ``psnr_mean``: its images against the base sampler's at
    ``base_steps`` (``None`` for that row itself). ``exports``: the OpenVINO exports to reuse
    (``{"base": ..., "lcm": ...}``); others are made in ``work_dir``."""
    folder = resolve_checkpoint(checkpoint)
    size = sweeps.image_size(folder)
    sweep = sweeps.Sweep(folder, sweeps.lora_file(lora), size, seed, (6.0, 1.0), prompts)
    table = {}
    for sampler in sweeps.SAMPLER_CHOICES:
        opened = cache(partial(sweep.openvino, sampler, Path(work_dir), dict(exports or {})))
        counts = sorted({*steps, base_steps}) if sampler == "base" else sorted(set(steps))
        table |= sweep.steps("ov_f32", sampler, counts, partial(sweep.openvino_run, opened))
    reference = ("ov_f32", "base", base_steps)

    def row(images, prompts, measured, against):
        psnr = quality.compare_images(against[reference], images)["psnr_mean"] if against else None
        return {**sweep.row(images, prompts, measured, against), "psnr_mean": psnr}

    rows, _ = score(table, sweep.prompts, row, references=[reference])
    return list(rows.values())


def adapter_gain(rows: Sequence[dict]) -> dict[int, dict]:
    """``{steps: {"with", "without", "adds", "psnr_with", "psnr_without"}}`` from
    :func:`adapter_rows`: the adherence of the LCM sampler with the adapter and without it at each
    number of steps both ran, what the adapter adds (points of adherence, as a fraction), and the
    PSNR of each against the base sampler's images."""
    by = {(r["sampler"], r["steps"]): r for r in rows}
    gain = {}
    for n in sorted(s for sampler, s in by if sampler == "lcm" and ("lcm_no_adapter", s) in by):
        with_it, without = by[("lcm", n)], by[("lcm_no_adapter", n)]
        gain[n] = {
            "with": with_it["score"],
            "without": without["score"],
            "adds": with_it["score"] - without["score"],
            "psnr_with": with_it["psnr_mean"],
            "psnr_without": without["psnr_mean"],
        }
    if not gain:
        raise ValueError("adapter_gain needs rows of both LCM samplers ('lcm' and 'lcm_no_adapter').")
    return gain


def format_adapter_gain(gain: Mapping[int, dict], base_steps: int = 20) -> str:
    """:func:`adapter_gain` as a Markdown table: adherence and PSNR with and without the adapter."""
    lines = [
        f"| steps | LCM-LoRA: adherence | PSNR to the {base_steps}-step base | LCM sampler alone: adherence "
        "| PSNR | the adapter adds |",
        "|---|---|---|---|---|---|",
    ]
    for n, g in gain.items():
        lines.append(
            f"| {n} | {g['with']:.0%} | {g['psnr_with']:.1f} dB | {g['without']:.0%} | "
            f"{g['psnr_without']:.1f} dB | {100 * g['adds']:+.0f} points, "
            f"{g['psnr_with'] - g['psnr_without']:+.1f} dB |"
        )
    return "\n".join(lines)


def random_tiny_vae(checkpoint: str | os.PathLike, folder: str | os.PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``AutoencoderTiny`` to ``folder`` whose latents are ``checkpoint``'s
    (its channels, and one decoder level per level of its VAE), TAESD's widths otherwise, and
    return the folder. Its images are noise; it runs in the time a tiny autoencoder of that size takes."""
    from sdaccel.tpu.models.taesd import save_random_tiny_vae

    checkpoint = Path(checkpoint)
    read_json(checkpoint / "model_index.json")  # a clear error for a folder that is no checkpoint
    vae = read_config(checkpoint, "vae")
    levels = len(vae["block_out_channels"])
    if levels < 2:
        raise ValueError(f"{checkpoint}'s VAE has {levels} level(s); a tiny autoencoder needs at least 2.")
    return save_random_tiny_vae(
        folder,
        seed=seed,
        latent_channels=vae.get("latent_channels", 4),
        num_encoder_blocks=(1, *[3] * (levels - 1)),
        num_decoder_blocks=(*[3] * (levels - 1), 1),
        encoder_block_out_channels=(64,) * levels,
        decoder_block_out_channels=(64,) * levels,
    )


def shapes_toy(model_id: str | os.PathLike) -> tuple[Path, Path]:
    """The repository's trained shapes checkpoint of ``model_id``'s family (SDXL or SD 1.x, read
    from its ``model_index.json``) and its distilled LCM-LoRA folder: ``checkpoints/tiny-shapes-sdxl``
    and ``-lcm-lora`` beside it. Where the SD 1.x one has no adapter, the SDXL pair."""

    repo = Path(__file__).resolve().parents[3] / "checkpoints"
    index = read_json(resolve_checkpoint(model_id, components=[]) / "model_index.json")
    family = "sdxl" if "XL" in index.get("_class_name", "") else "sd15"
    for name in dict.fromkeys([f"tiny-shapes-{family}", "tiny-shapes-sdxl"]):
        if (repo / f"{name}-lcm-lora").is_dir():
            return repo / name, repo / f"{name}-lcm-lora"
    raise FileNotFoundError(
        f"No trained shapes checkpoint with an LCM-LoRA under {repo}: make one with "
        "`python -m sdaccel.tools.toys.distill checkpoints/tiny-shapes-sdxl checkpoints/tiny-shapes-sdxl-lcm-lora`."
    )
