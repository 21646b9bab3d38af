"""Timing on the CPU, each run in a child process: the wall/CPU timer (:func:`time_wall_and_cpu`),
one UNet step in PyTorch and in OpenVINO (:func:`time_torch`, :func:`time_openvino`), the merged
UNets side by side (:func:`time_tome`), the UNet's float precision (:func:`choose_unet_precision`),
a runtime lever's arms (:func:`time_lever`), the VAE decoder (:func:`time_vae`,
:func:`time_torch_vae`), and the levers' output differences (:func:`quality_levers`)."""

from __future__ import annotations

import json
import os
import statistics
from functools import partial
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import resolve_checkpoint
from sdaccel.core.timing import time_calls
from sdaccel.cpu import levers
from sdaccel.cpu.export import MODEL_XML, export_pipeline
from sdaccel.cpu.precision import decide, default_precision, device_capabilities, kept_default, settled
from sdaccel.cpu.precision_timing import measure
from sdaccel.cpu.quantize import time_unet
from sdaccel.cpu.random_unet import build_torch_unet, checkpoint_folder, unet_inputs
from sdaccel.tools.measure.models import vae_config, vae_latents


def time_wall_and_cpu(call, iters: int, warmup: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (this process, all threads) of ``iters`` calls after ``warmup``
    untimed ones (:func:`sdaccel.core.timing.time_calls`)."""
    timing = time_calls(call, repeats=iters, warmup=lambda: [call() for _ in range(warmup)])
    return timing.runs_s, timing.cpu_s


def time_torch(model: str, batch: int, latent: int, iters: int, warmup: int, seed: int = 0) -> dict:
    import torch

    torch.set_flush_denormal(True)  # as OpenVINO does: denormals would slow random-weight layers
    unet = build_torch_unet(model, seed)
    inputs = {k: torch.from_numpy(v) for k, v in unet_inputs(model, batch, latent).items()}
    added = None
    if "text_embeds" in inputs:
        added = {"text_embeds": inputs["text_embeds"], "time_ids": inputs["time_ids"]}

    def call():
        with torch.inference_mode():
            unet(
                inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"], added_cond_kwargs=added
            )

    times, cpu_times = time_wall_and_cpu(call, iters, warmup)
    return {"times": times, "cpu_times": cpu_times, "precision": "f32", "compile_s": 0.0}


def time_openvino(xml: str, inputs_spec: dict, precision: str | None, iters: int, warmup: int) -> dict:
    """``quantize.time_unet`` (static shapes) on the inputs described by ``inputs_spec``:
    ``unet_inputs``'s keyword arguments plus ``"extra"``, more input arrays given by their shapes
    (DeepCache's cached feature)."""
    spec = dict(inputs_spec)
    extra = spec.pop("extra", {})
    inputs = unet_inputs(**spec)
    rng = np.random.default_rng(1)
    inputs.update({name: rng.standard_normal(shape, dtype=np.float32) for name, shape in extra.items()})
    timing = time_unet(xml, inputs, iters=iters, warmup=warmup, precision=precision, static=True)
    return {k: timing[k] for k in ("times", "cpu_times", "compile_s", "precision")}


def time_tome(
    irs: dict[str, str], inputs_spec: dict, rounds: int, warmup: int, precision: str | None
) -> dict:
    """The unmerged UNet (the first of ``irs``: name -> IR) and each merged one, static, interleaved:
    every round compiles, warms up and times each IR in turn (``sdaccel.cpu.levers.time_arms`` on
    one arm, so one model is in memory at a time). The layout of ``time_arms``' result, with each
    arm's ``speedup`` over the first. ``inputs_spec``: as :func:`time_openvino`'s (its ``"extra"``
    inputs, DeepCache's cached feature, go to the IRs that have them; ``"extra_by_arm"``: arm name ->
    extra inputs of another shape for that arm, such as the cached feature of another cut)."""
    import openvino as ov

    spec = dict(inputs_spec)
    extra = spec.pop("extra", {})
    by_arm = spec.pop("extra_by_arm", {})
    inputs = unet_inputs(**spec)
    rng = np.random.default_rng(1)
    inputs.update({name: rng.standard_normal(shape, dtype=np.float32) for name, shape in extra.items()})
    own = {
        arm: {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in shapes.items()}
        for arm, shapes in by_arm.items()
    }
    core = ov.Core()
    ports = {name: {p.get_any_name() for p in core.read_model(xml).inputs} for name, xml in irs.items()}
    rows = {name: {"times": [], "cpu_times": [], "compile_s": []} for name in irs}
    for _ in range(rounds):
        for name, xml in irs.items():
            mine = {key: value for key, value in (inputs | own.get(name, {})).items() if key in ports[name]}
            arm = levers.time_arms(
                xml, mine, {name: levers.Arm()}, 1, warmup, precision, keep_compiled=False
            )["arms"][name]
            for key in ("times", "cpu_times", "compile_s"):
                rows[name][key] += arm[key]
            rows[name].setdefault("reported", arm["reported"])
            rows[name].setdefault("output_abs_max", arm["output_abs_max"])
    first = next(iter(irs))
    for name, row in rows.items():
        row["s_per_call"] = statistics.median(row["times"])
        row["cpu_s_per_call"] = statistics.median(row["cpu_times"])
        row["speedup"] = rows[first]["s_per_call"] / row["s_per_call"]
        row["cpu_speedup"] = rows[first]["cpu_s_per_call"] / row["cpu_s_per_call"]
        row["ir"] = str(Path(irs[name]).resolve())
    return {"reference": first, "rounds": rounds, "warmup": warmup, "keep_compiled": False, "arms": rows}


def choose_unet_precision(
    xml: str, inputs_spec: dict, candidates: list[str], iters: int, warmup: int
) -> dict:
    """``choose_precision``'s rule on the UNet IR alone: each candidate compiled static (as the
    variants are timed) and timed in interleaved rounds; the plugin's default stays unless another
    candidate is faster beyond the margin (:func:`sdaccel.cpu.precision.decide`)."""
    import openvino as ov

    core = ov.Core()
    inputs = unet_inputs(**inputs_spec)
    model = core.read_model(xml)
    model.reshape({name: list(value.shape) for name, value in inputs.items()})

    def compile_model(precision):
        return core.compile_model(
            model, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
        )

    hint = default_precision(device_capabilities(core))
    measurements = measure(
        compile_model, inputs, tuple(candidates), iters, warmup, settled=partial(settled, default=hint)
    )
    default = kept_default(measurements, hint)
    return {
        "chosen": decide(measurements, default),
        "measurements": {
            p: {"reported": m.reported, "median_s": m.median_s, "times": m.times, "cpu_times": m.cpu_times}
            for p, m in measurements.items()
        },
    }


def time_lever(
    xml: str,
    inputs_spec: dict,
    lever: str,
    rounds: int,
    warmup: int,
    precision: str | None,
    keep_compiled: bool,
    cores: int,
    only: list[str] | None = None,
) -> dict:
    """The arms of a runtime lever (``sdaccel.cpu.levers``) on one UNet call's inputs, interleaved;
    ``only``: those of them (by name), the lever's reference arm always first."""
    arms = {
        "runtime": levers.runtime_arms(cores),
        "static": levers.STATIC_ARMS,
        "guidance_split": levers.GUIDANCE_ARMS,
    }[lever]
    if only:
        unknown = sorted(set(only) - set(arms))
        if unknown:
            raise ValueError(f"no arm {unknown} in lever {lever}; its arms: {list(arms)}")
        reference = next(iter(arms))
        arms = {name: arm for name, arm in arms.items() if name == reference or name in only}
    return levers.time_arms(
        xml, unet_inputs(**inputs_spec), arms, rounds, warmup, precision, keep_compiled=keep_compiled
    )


def time_vae(xml: str, model: str, latent: int, precision: str | None, iters: int, warmup: int) -> dict:
    """One decode (batch 1, as the pipeline decodes) of the VAE decoder IR, static shapes."""
    inputs = {"latent_sample": vae_latents(model, latent, 1, seed=1)}
    timing = time_unet(xml, inputs, iters=iters, warmup=warmup, precision=precision, static=True)
    return {k: timing[k] for k in ("times", "cpu_times", "compile_s", "precision")}


def time_torch_vae(model: str, latent: int, iters: int, warmup: int, seed: int = 0) -> dict:
    import torch
    from diffusers import AutoencoderKL

    torch.set_flush_denormal(True)
    folder = checkpoint_folder(model)
    torch.manual_seed(seed)
    if folder is not None:
        vae = AutoencoderKL.from_pretrained(folder / "vae", torch_dtype=torch.float32).eval()
    else:
        vae = AutoencoderKL.from_config(vae_config(model)).eval()
    latents = torch.from_numpy(vae_latents(model, latent, 1, seed=1))

    def call():
        with torch.inference_mode():
            vae.decode(latents)

    times, cpu_times = time_wall_and_cpu(call, iters, warmup)
    return {"times": times, "cpu_times": cpu_times, "precision": "f32", "compile_s": 0.0}


def quality_levers(checkpoint: str, work: str, batch: int) -> dict:
    """Max abs difference of each runtime lever's UNet output from its reference arm, on the
    checkpoint's exported UNet at its native size (one round each: numerics, not speed)."""
    folder = resolve_checkpoint(checkpoint)
    export = export_pipeline(folder, Path(work) / "openvino", components=["unet"], progress=False)
    latent = json.loads((folder / "unet" / "config.json").read_text())["sample_size"]
    inputs = unet_inputs(checkpoint, batch, latent)
    arms = {
        "runtime": levers.runtime_arms(os.cpu_count() or 1),
        "static": levers.STATIC_ARMS,
        "guidance_split": levers.GUIDANCE_ARMS,
    }
    out = {}
    for lever, group in arms.items():
        timed = levers.time_arms(
            export / "unet" / MODEL_XML, inputs, group, rounds=1, warmup=0, precision="f32"
        )
        out[lever] = {
            name: {k: row[k] for k in ("max_abs_diff", "output_abs_max")}
            for name, row in timed["arms"].items()
        }
    return out
