"""Measuring the OpenVINO track on one UNet: what ``benchmarks/bench_openvino.py`` (and the
other CPU benchmarks) run, each piece in a child process of its own.

A *model* is a real architecture of :data:`MODELS` (``"sd15"``, ``"sdxl"``: the configs in
``sdaccel/reference_configs``, random seeded weights, no download) or a checkpoint folder or hub id
(its own weights).

## Models and inputs
:func:`checkpoint_folder`, :func:`label`, :func:`unet_config`, :func:`build_torch_unet`,
:func:`unet_inputs`, :func:`synthetic_calibration`, :func:`vae_config`, :func:`vae_latents`.

## Exports (children)
:func:`export_ir`, :func:`export_deepcache_shallow`, :func:`export_tome_ir`,
:func:`export_vae_decoder`, :func:`export_random_component`, :func:`ir_parameters`.

## Timing (children)
:func:`time_torch`, :func:`time_openvino`, :func:`time_tome`, :func:`time_lever`,
:func:`time_vae`, :func:`time_torch_vae`, :func:`choose_unet_precision`,
:func:`choose_precision_child`, :func:`quantize_vae_child`, :func:`quality_levers`.

## Running children, and the results
:func:`machine_info`, :func:`describe_machine`, :func:`free_gb`, :func:`wait_for_memory`, :func:`run_child`,
:func:`summarize_run`, :func:`add_speedups`, :func:`add_whole_image`, :func:`time_wall_and_cpu`.

## The results as a text table
:func:`results_table` (with :func:`lever_lines`, :func:`tome_lines`, :func:`stack_lines`,
:func:`quality_lines`); :func:`compose_stack`: lever ``stack``'s seconds per step.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import time
from importlib import resources
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import resolve_checkpoint
from sdaccel.core.env import cpu_features, cpu_model
from sdaccel.core.timing import time_calls
from sdaccel.cpu.deepcache import lever_name


def time_wall_and_cpu(call, iters: int, warmup: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (this process, all threads) of ``iters`` calls after ``warmup``
    untimed ones (:func:`sdaccel.core.timing.time_calls`)."""
    timing = time_calls(call, repeats=iters, warmup=lambda: [call() for _ in range(warmup)])
    return timing.runs_s, timing.cpu_s


#: Real architectures with random weights (configs in ``sdaccel/reference_configs``). Any other
#: ``--models`` entry is a checkpoint (a diffusers folder or hub id; ``tiny-sd15`` / ``tiny-sdxl``
#: are the tiny ones of ``sdaccel.tools.toys.random_checkpoints``) whose own UNet weights are used.
MODELS = {"sd15": "sd-1.5", "sdxl": "sdxl-base-1.0"}


#: The components of a text-to-image export, per reference architecture.
PIPELINE_PARTS = {
    "sd15": ("text_encoder", "unet", "vae_decoder"),
    "sdxl": ("text_encoder", "text_encoder_2", "unet", "vae_decoder"),
}


#: The VAE decoder recipes of lever ``vae_int8`` (``sdaccel.cpu.quantize_vae``).
VAE_VARIANTS = ("int8_weights", "hybrid", "full_int8")


FLOAT_VARIANTS = {"ov_f32": "f32", "ov_bf16": "bf16"}


def checkpoint_folder(model: str) -> Path | None:
    """The checkpoint folder behind a ``--models`` entry (a folder or a hub id), or ``None`` for a
    random-weight architecture of :data:`MODELS`. The script turns the names of the tiny
    checkpoints (``tiny-sd15``) into their folders first."""
    if model in MODELS:
        return None
    return resolve_checkpoint(model, components=["unet"])


def label(model: str) -> str:
    """A short name for results and folders: the key, a folder's name, or the hub id."""
    if model in MODELS or not Path(model).is_dir():
        return model
    return Path(model).name


def unet_config(model: str) -> dict:
    folder = checkpoint_folder(model)
    if folder is not None:
        return json.loads((folder / "unet" / "config.json").read_text())
    path = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}/unet.json")
    return json.loads(path.read_text())


def build_torch_unet(model: str, seed: int = 0):
    """A checkpoint's UNet in float32, or the real architecture with random weights (PyTorch's
    default initialisation, seeded)."""
    import torch
    from diffusers import UNet2DConditionModel

    folder = checkpoint_folder(model)
    if folder is not None:
        return UNet2DConditionModel.from_pretrained(folder / "unet", torch_dtype=torch.float32).eval()
    torch.manual_seed(seed)
    return UNet2DConditionModel.from_config(unet_config(model)).eval()


def unet_inputs(model: str, batch: int, latent: int, timestep: int = 500, seed: int = 0) -> dict:
    """One UNet call's inputs, named as in the exported IR."""
    cfg = unet_config(model)
    rng = np.random.default_rng(seed)
    inputs = {
        "sample": rng.standard_normal((batch, cfg["in_channels"], latent, latent), dtype=np.float32),
        "timestep": np.array([timestep], dtype=np.int64),
        "encoder_hidden_states": rng.standard_normal(
            (batch, 77, cfg["cross_attention_dim"]), dtype=np.float32
        ),
    }
    if cfg.get("addition_embed_type") == "text_time":
        pooled = cfg["projection_class_embeddings_input_dim"] - 6 * cfg["addition_time_embed_dim"]
        size = latent * 8
        inputs["text_embeds"] = rng.standard_normal((batch, pooled), dtype=np.float32)
        inputs["time_ids"] = np.tile(np.array([[size, size, 0, 0, size, size]], np.float32), (batch, 1))
    return inputs


def export_ir(model: str, xml: str, seed: int = 0, fp16: bool = True) -> dict:
    """The UNet -> OpenVINO IR with the export's port names, weights stored fp16 (or f32)."""
    import gc

    import openvino as ov

    from sdaccel.cpu.export import convert_unet

    start = time.perf_counter()
    unet = build_torch_unet(model, seed)
    params = sum(p.numel() for p in unet.parameters())
    ov_model = convert_unet(unet)
    del unet
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=fp16)
    return {"seconds": time.perf_counter() - start, "params": params}


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
    from sdaccel.cpu.quantize import time_unet

    spec = dict(inputs_spec)
    extra = spec.pop("extra", {})
    inputs = unet_inputs(**spec)
    rng = np.random.default_rng(1)
    inputs.update({name: rng.standard_normal(shape, dtype=np.float32) for name, shape in extra.items()})
    timing = time_unet(xml, inputs, iters=iters, warmup=warmup, precision=precision, static=True)
    return {k: timing[k] for k in ("times", "cpu_times", "compile_s", "precision")}


def synthetic_calibration(
    folder: str, model: str, batch: int, latent: int, count: int, extra: dict | None = None
):
    """``count`` UNet inputs spread over the timestep range, written as a CalibrationSet."""
    from sdaccel.cpu.quantize import CalibrationSet

    timesteps = np.linspace(999, 1, count).round().astype(int)
    samples = []
    for i, t in enumerate(timesteps):
        sample = unet_inputs(model, batch, latent, timestep=int(t), seed=100 + i)
        rng = np.random.default_rng(200 + i)
        sample.update(
            {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in (extra or {}).items()}
        )
        samples.append(sample)
    shutil.rmtree(folder, ignore_errors=True)
    return CalibrationSet.save(samples, folder)


def export_deepcache_shallow(model: str, xml: str, seed: int = 0, cut: str = "block") -> dict:
    """Export the shallow UNet that DeepCache runs on its cached steps
    (:func:`sdaccel.cpu.deepcache.convert_shallow`: the UNet's inputs plus ``cached``, the feature
    at the ``cut`` saved by the last full step; output ``out_sample``), weights stored fp16."""
    import gc

    import openvino as ov

    from sdaccel.cpu.deepcache import convert_shallow

    ov_model = convert_shallow(build_torch_unet(model, seed), cut=cut)
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=True)
    return {"inputs": [port.get_any_name() for port in ov_model.inputs]}


def export_tome_ir(
    model: str, xml: str, ratio: float, latent: int, seed: int = 0, part: str = "unet"
) -> dict:
    """The UNet with ``ratio`` of its full-resolution tokens merged
    (:func:`sdaccel.cpu.tome.convert_tome_unet`), or with ``part="shallow"`` DeepCache's shallow
    UNet merged alike (:func:`sdaccel.cpu.tome.convert_tome_deepcache`), traced at
    ``latent x latent`` latents, weights stored fp16; what was merged is written next to the IR
    (``.json``, last: its presence marks a finished export)."""
    import gc

    from sdaccel.cpu.export import save_ir
    from sdaccel.cpu.tome import convert_tome_deepcache, convert_tome_unet

    start = time.perf_counter()
    unet = build_torch_unet(model, seed)
    if part == "unet":
        ov_model, report = convert_tome_unet(unet, ratio, latent, latent)
    else:
        models, report = convert_tome_deepcache(unet, ratio, latent, parts=(part,))
        ov_model = models.pop(part)
    del unet
    gc.collect()
    xml = Path(xml)
    xml.parent.mkdir(parents=True, exist_ok=True)
    xml.with_suffix(".json").unlink(missing_ok=True)
    save_ir(ov_model, xml, compress_to_fp16=True)
    xml.with_suffix(".json").write_text(json.dumps(report, indent=2))
    return {"seconds": time.perf_counter() - start}


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

    from sdaccel.cpu import levers

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
    variants are timed), ``warmup`` + ``iters`` calls, the fastest that the plugin honoured."""
    import openvino as ov

    from sdaccel.cpu.precision import decide, measure

    core = ov.Core()
    inputs = unet_inputs(**inputs_spec)
    model = core.read_model(xml)
    model.reshape({name: list(value.shape) for name, value in inputs.items()})

    def compile_model(precision):
        return core.compile_model(
            model, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
        )

    measurements = {p: measure(compile_model, inputs, p, iters, warmup) for p in candidates}
    return {
        "chosen": decide(measurements),
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
    from sdaccel.cpu import levers

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


def vae_config(model: str) -> dict:
    folder = checkpoint_folder(model)
    if folder is not None:
        return json.loads((folder / "vae" / "config.json").read_text())
    path = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}/vae.json")
    return json.loads(path.read_text())


def vae_latents(model: str, latent: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` decoder inputs ``[count, C, latent, latent]``: unit Gaussian diffusion latents,
    unscaled as the pipeline unscales them (``/ scaling_factor``)."""
    cfg = vae_config(model)
    rng = np.random.default_rng(seed)
    shape = (count, cfg.get("latent_channels", 4), latent, latent)
    return (rng.standard_normal(shape, dtype=np.float32) / cfg.get("scaling_factor", 0.18215)).astype(
        np.float32
    )


def export_vae_decoder(model: str, xml: str, seed: int = 0) -> dict:
    """The VAE decoder (a checkpoint's, or the architecture's with seeded random weights) -> IR,
    weights stored fp16, with the export's converter."""
    import gc

    import openvino as ov
    import torch
    from diffusers import AutoencoderKL

    from sdaccel.cpu.export import convert_vae_decoder

    start = time.perf_counter()
    folder = checkpoint_folder(model)
    torch.manual_seed(seed)
    if folder is not None:
        vae = AutoencoderKL.from_pretrained(folder / "vae", torch_dtype=torch.float32)
    else:
        vae = AutoencoderKL.from_config(vae_config(model))
    vae.eval()
    params = sum(p.numel() for p in [*vae.decoder.parameters(), *vae.post_quant_conv.parameters()])
    ov_model = convert_vae_decoder(vae)
    del vae
    gc.collect()
    Path(xml).parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, xml, compress_to_fp16=True)
    return {"seconds": time.perf_counter() - start, "params": params}


def quantize_vae_child(src: str, dst: str, variant: str, latents_npy: str | None, subset: int) -> dict:
    from sdaccel.cpu.quantize_vae import quantize_vae_decoder

    latents = None if latents_npy is None else np.load(latents_npy)
    return quantize_vae_decoder(src, dst, variant, latents, subset)


def time_vae(xml: str, model: str, latent: int, precision: str | None, iters: int, warmup: int) -> dict:
    """One decode (batch 1, as the pipeline decodes) of the VAE decoder IR, static shapes."""
    from sdaccel.cpu.quantize import time_unet

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
    from sdaccel.core.checkpoint import resolve_checkpoint
    from sdaccel.cpu import levers
    from sdaccel.cpu.export import MODEL_XML, export_pipeline

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


def export_random_component(model: str, folder: str, component: str, seed: int = 0) -> dict:
    """One component of the architecture ``model`` with random weights (seeded), converted with
    the export's own converters into ``folder/component`` (``config.json`` and the IR, weights
    stored fp16), as ``export_pipeline`` lays it out."""
    import gc

    import openvino as ov
    import torch

    from sdaccel.cpu.export import MODEL_XML, convert_text_encoder, convert_unet, convert_vae_decoder

    start = time.perf_counter()
    configs = resources.files("sdaccel").joinpath(f"reference_configs/{MODELS[model]}")
    torch.manual_seed(seed)
    if component == "unet":
        module = build_torch_unet(model, seed)
        config = unet_config(model)
        ov_model = convert_unet(module)
    elif component.startswith("text_encoder"):
        import transformers

        config = json.loads(configs.joinpath(f"{component}.json").read_text())
        cls = getattr(transformers, config.get("architectures", ["CLIPTextModel"])[0])
        module = cls(transformers.CLIPTextConfig(**config)).eval()
        ov_model = convert_text_encoder(module, config.get("max_position_embeddings", 77))
    else:
        from diffusers import AutoencoderKL

        config = json.loads(configs.joinpath("vae.json").read_text())
        module = AutoencoderKL.from_config(config).eval()
        ov_model = convert_vae_decoder(module)
    params = sum(p.numel() for p in module.parameters())
    del module
    gc.collect()
    out = Path(folder) / component
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    ov.save_model(ov_model, str(out / MODEL_XML), compress_to_fp16=True)
    return {"seconds": time.perf_counter() - start, "params": params}


def choose_precision_child(folder: str, candidates: list[str], iters: int, warmup: int) -> dict:
    """``choose_precision`` on an export folder, measured afresh (the cache is not read)."""
    from sdaccel.cpu.precision import choose_precision

    choice = choose_precision(folder, candidates=candidates, iters=iters, warmup=warmup, cache=False)
    return {"choice": choice.to_json(), "table": choice.table()}


def machine_info() -> dict:
    """The machine a run measured: the CPU, its cores and instruction sets, memory, and versions."""
    import nncf
    import openvino as ov
    import psutil
    import torch

    flags = cpu_features()  # the CPU as sdaccel.core.env reads it (x86 flags or ARM features)
    return {
        "cpu": cpu_model(),
        "logical_cores": psutil.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "avx512_vnni": flags.get("avx512_vnni", False),
        "avx512_bf16": flags.get("avx512_bf16", False),
        "amx": flags.get("amx_tile", False),
        "cpu_flags": flags,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "openvino": ov.get_version(),
        "nncf": nncf.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def describe_machine(machine: dict) -> str:
    """:func:`machine_info` as one line a reader takes in: the CPU and its ISA tier, cores, memory
    and the versions that ran (the JSON keeps every field)."""
    from sdaccel.cpu.families import isa_tier

    return (
        f"{machine['cpu']}, {isa_tier(machine['cpu_flags'])}, {machine['logical_cores']} logical cores "
        f"({machine['physical_cores']} physical), {machine['memory_gb']} GiB; OpenVINO "
        f"{machine['openvino'].split('-')[0]}, NNCF {machine['nncf']}, PyTorch {machine['torch']}, "
        f"Python {machine['python']}"
    )


def free_gb() -> float:
    import psutil

    return psutil.virtual_memory().available / 2**30


def run_child(
    label: str, fn, *args, limit_gb: float | None, min_free_gb: float, wait_s: float = 900, **kwargs
):
    """One child-process job. It waits up to ``wait_s`` for ``min_free_gb`` of available memory
    (the machine may be shared), and is skipped if that never comes."""
    from sdaccel.core.processes import ChildRun, run_with_memory_limit

    deadline = time.monotonic() + wait_s
    while (free := free_gb()) < min_free_gb and time.monotonic() < deadline:
        time.sleep(10)
    if free < min_free_gb:
        print(f"  {label}: skipped, {free:.1f} GiB available < {min_free_gb} GiB", flush=True)
        return ChildRun(error=f"skipped: {free:.1f} GiB available < {min_free_gb} GiB")
    print(f"  {label} ...", end="", flush=True)
    load = os.getloadavg()[0]
    run = run_with_memory_limit(fn, *args, limit_gb=limit_gb, **kwargs)
    run.load = (load, os.getloadavg()[0])  # kept in the JSON (load_avg), not printed
    status = "ok" if run.ok else run.error.splitlines()[0][:200]
    print(
        f" {run.seconds:.0f} s, peak RSS {run.peak_rss_gb:.1f} GiB (anonymous {run.peak_anon_gb:.1f}), {status}",
        flush=True,
    )
    return run


def summarize_run(run, extra: dict | None = None) -> dict:
    out = {
        "ok": run.ok,
        "peak_rss_gb": round(run.peak_rss_gb, 2),
        "peak_anon_gb": round(run.peak_anon_gb, 2),
        "wall_s": round(run.seconds, 1),
    }
    if run.samples:  # RSS over the run, at most 40 points (GiB), to see where the peak is
        step = max(1, len(run.samples) // 40)
        out["rss_timeline_gb"] = [
            round(max(run.samples[i : i + step]) / 2**30, 2) for i in range(0, len(run.samples), step)
        ]
    if hasattr(run, "load"):  # 1-minute load average before and after: other jobs on the machine
        out["load_avg"] = [round(x, 1) for x in run.load]
    if run.error:
        out["error"] = run.error
    if run.ok and isinstance(run.result, dict):
        result = dict(run.result)
        if "times" in result:
            result["s_per_step"] = statistics.median(result["times"])
            result["cpu_s_per_step"] = statistics.median(result["cpu_times"])
        out.update(result)
    out.update(extra or {})
    return out


def wait_for_memory(min_free_gb: float, label: str, wait_s: float = 900) -> None:
    deadline = time.monotonic() + wait_s
    while free_gb() < min_free_gb and time.monotonic() < deadline:
        time.sleep(10)
    if free_gb() < min_free_gb:
        print(
            f"  {label}: only {free_gb():.1f} GiB available (wanted {min_free_gb}); going ahead", flush=True
        )


def ir_parameters(xml: Path) -> int:
    """Number of floating-point constant elements of an IR: its parameter count."""
    import openvino as ov

    return sum(
        int(np.prod(op.get_output_shape(0)))
        for op in ov.Core().read_model(str(xml)).get_ops()
        if op.get_type_name() == "Constant"
        and op.get_output_element_type(0).get_type_name() in ("f16", "f32")
    )


def add_speedups(result: dict) -> None:
    variants = result["variants"]
    rows = dict(variants)
    for base, entry in result.get("deepcache", {}).items():
        if isinstance(entry, dict) and "avg_s_per_step" in entry:
            for n, s in entry["avg_s_per_step"].items():
                cpu = entry["avg_cpu_s_per_step"][n]
                rows[f"{base}+deepcache(N={n})"] = {"s_per_step": s, "cpu_s_per_step": cpu, "ok": True}
    rows = {name: entry for name, entry in rows.items() if entry.get("ok") and entry.get("s_per_step")}

    def ratio(base: str | None, name: str, key: str):
        return rows[base][key] / rows[name][key] if base in rows else None

    best = result.get("best_float", {}).get("variant")
    result["speedup"] = {
        name: {
            "s_per_step": entry["s_per_step"],
            "cpu_s_per_step": entry["cpu_s_per_step"],
            "vs_torch_fp32": ratio("torch_fp32", name, "s_per_step"),
            "vs_ov_bf16": ratio("ov_bf16", name, "s_per_step"),
            "vs_best_float": ratio(best, name, "s_per_step"),
            "cpu_vs_torch_fp32": ratio("torch_fp32", name, "cpu_s_per_step"),
            "cpu_vs_ov_bf16": ratio("ov_bf16", name, "cpu_s_per_step"),
            "cpu_vs_best_float": ratio(best, name, "cpu_s_per_step"),
        }
        for name, entry in rows.items()
    }


def add_whole_image(result: dict, steps: int) -> None:
    """Seconds per image composed from the measured parts: ``steps`` UNet steps (batch 2, one
    guided image) plus one VAE decode (lever ``vae_int8``): PyTorch's decoder for ``torch_fp32``,
    the decoder in the best float for the OpenVINO rows, and each INT8 decoder beside the fastest
    UNet row. The text encoder (one call per image, well under a UNet step) is left out."""
    vae = result.get("levers", {}).get("vae_int8", {}).get("rows", {})
    vae = {name: row["s_per_step"] for name, row in vae.items() if row.get("ok")}
    float_vae = vae.get(result.get("best_float", {}).get("chosen"))
    speed = result.get("speedup", {})
    if float_vae is None or not speed:
        return
    rows = {}
    for name, entry in speed.items():
        decoder = vae.get("torch_fp32") if name == "torch_fp32" else float_vae
        if decoder is not None:
            rows[name] = {"unet_s": steps * entry["s_per_step"], "vae_s": decoder, "vae": "float"}
    fastest = min((n for n in speed if n != "torch_fp32"), key=lambda n: speed[n]["s_per_step"])
    for variant in VAE_VARIANTS:
        if variant in vae:
            rows[f"{fastest} + vae {variant}"] = {
                "unet_s": steps * speed[fastest]["s_per_step"],
                "vae_s": vae[variant],
                "vae": variant,
            }
    best = result.get("best_float", {}).get("variant")
    for row in rows.values():
        row["s_per_image"] = row["unet_s"] + row["vae_s"]
    for row in rows.values():
        for base in ("torch_fp32", best):
            if base in rows:
                row[f"vs_{'torch_fp32' if base == 'torch_fp32' else 'best_float'}"] = (
                    rows[base]["s_per_image"] / row["s_per_image"]
                )
    result["whole_image"] = {"steps": steps, "rows": rows}


# ----------------------------------------------------------------------------------------------
# The results as a text table
# ----------------------------------------------------------------------------------------------


def results_table(results: dict) -> str:
    """The text table of a ``bench_openvino.py`` run: per model, each variant's seconds per UNet step
    and speed-ups (wall clock and CPU time), sizes and peaks, then the levers, the precision choice,
    the memory study, and the quality parts."""
    header = (
        f"{'model':10} {'variant':30} {'prec':5} {'s/step':>8} {'x torch':>8} {'x bf16':>7} {'x best':>7} "
        f"{'cpu s':>8} {'x torch':>8} {'x best':>7} {'size MB':>8} {'run GiB':>8} {'quant GiB':>9}"
    )
    lines = [
        f"{'':10} {'':30} {'':5} {'-- wall clock, median --':>33} {'-- CPU time, median --':>25}",
        header,
    ]
    for model, result in results["models"].items():
        for name, speed in result.get("speedup", {}).items():
            entry = result["variants"].get(name, {})
            quant = result["quantization"].get(name.split("@")[0], {})
            size = entry.get("size_bytes")
            lines.append(
                f"{model[:10]:10} {name:30} {entry.get('precision', ''):5} {speed['s_per_step']:8.2f} "
                f"{fmt(speed['vs_torch_fp32'], 8)} {fmt(speed['vs_ov_bf16'], 7)} "
                f"{fmt(speed.get('vs_best_float'), 7)} "
                f"{speed['cpu_s_per_step']:8.2f} {fmt(speed['cpu_vs_torch_fp32'], 8)} "
                f"{fmt(speed.get('cpu_vs_best_float'), 7)} {fmt(size / 1e6 if size else None, 8, 0)} "
                f"{fmt(entry.get('peak_rss_gb'), 8, 1)} {fmt(quant.get('peak_rss_gb'), 9, 1)}"
            )
        for name, quant in result["quantization"].items():
            if not quant.get("ok"):
                lines.append(f"{model[:10]:10} {name:30} quantization failed: {quant.get('error', '')[:80]}")
        if "best_float" in result:
            best = result["best_float"]
            lines.append(f"{model[:10]:10} best float: {best['chosen']} ({best['why']})")
        if "int8_float" in result:
            lines.append(
                f"{model[:10]:10} INT8 variants' float layers: {', '.join(result['int8_float']['timed'])} "
                f"(--int8-float {result['int8_float']['mode']})"
            )
        lines.extend(lever_lines(model, result))
        choose = result.get("precision_choice", {}).get("choose", {})
        if choose.get("ok"):
            lines.append(f"{model[:10]:10} precision by measurement:")
            lines.extend(f"{'':10} {line}" for line in choose["table"].splitlines())
        elif choose:
            lines.append(f"{model[:10]:10} precision by measurement failed: {choose.get('error', '')[:80]}")
        for name, run in result.get("memory_study", {}).items():
            status = "ok" if run.get("ok") else run.get("error", "")[:60]
            lines.append(
                f"{model[:10]:10} memory study: {name:32} peak RSS {run.get('peak_rss_gb', 0):5.1f} GiB "
                f"(anonymous {run.get('peak_anon_gb', 0):5.1f}) "
                f"{run.get('wall_s', 0):6.0f} s  {status}"
            )
    for checkpoint, quality in results.get("quality", {}).items():
        lines.extend(quality_lines(checkpoint, quality))
    return "\n".join(lines)


def lever_lines(model: str, result: dict) -> list[str]:
    """One line per lever setting: seconds per call, the ratio to the lever's reference arm (wall
    and CPU), and the max abs difference of its output from the reference's."""
    lines = []
    for lever, out in result.get("levers", {}).items():
        if lever in ("vae_int8", "tome", "stack"):
            continue
        if not out.get("ok"):
            lines.append(f"{model[:10]:10} lever {lever}: failed: {out.get('error', '')[:80]}")
            continue
        lines.append(
            f"{model[:10]:10} lever {lever} ({out['precision_asked']}, {out['rounds']} rounds, "
            f"reference: {out['reference']}):"
        )
        for name, arm in out["arms"].items():
            parallel = (
                f"  {arm['parallel']} in flight: {arm['s_per_call_parallel']:.3f} s per call"
                if "s_per_call_parallel" in arm
                else ""
            )
            lines.append(
                f"{'':10}   {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:5.2f}  "
                f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:5.2f}  "
                f"max |diff| {arm['max_abs_diff']:.1e}{parallel}"
            )
    lines.extend(tome_lines(model, result.get("levers", {}).get("tome")))
    lines.extend(stack_lines(model, result.get("levers", {}).get("stack")))
    vae = result.get("levers", {}).get("vae_int8")
    if vae:
        lines.append(
            f"{model[:10]:10} lever vae_int8 (decoder, batch 1, {vae['image_size']}x{vae['image_size']}):"
        )
        for name, row in vae["rows"].items():
            status = (
                f"{row['s_per_step']:9.3f} s  x{fmt(row.get('vs_float'), 5)} vs float  "
                f"cpu {row['cpu_s_per_step']:8.3f} s  ({row.get('precision', '')})"
                if row.get("ok")
                else f"failed: {row.get('error', '')[:60]}"
            )
            lines.append(f"{'':10}   {name:28} {status}")
    whole = result.get("whole_image")
    if whole:
        lines.append(f"{model[:10]:10} per image ({whole['steps']} UNet steps + one VAE decode, composed):")
        for name, row in whole["rows"].items():
            lines.append(
                f"{'':10}   {name:40} {row['s_per_image']:9.1f} s  x{fmt(row.get('vs_torch_fp32'), 5)} torch  "
                f"x{fmt(row.get('vs_best_float'), 5)} best float"
            )
    return lines


def tome_lines(model: str, tome: dict | None) -> list[str]:
    """Lever ``tome``: seconds per UNet call of each merged IR against the unmerged one, and how many
    tokens its merged self-attentions kept."""
    if not tome:
        return []
    if not tome.get("ok"):
        return [f"{model[:10]:10} lever tome: failed: {tome.get('error', '')[:80]}"]
    lines = [
        f"{model[:10]:10} lever tome ({tome['precision_asked']}, {tome['rounds']} rounds, "
        f"{tome['latent']}x{tome['latent']} latents, reference: {tome['reference']}):"
    ]
    for name, arm in tome["arms"].items():
        merged = tome["merged"].get(name.removeprefix("tome "), {}).get("merged_blocks", {})
        kept = (
            f"  self-attention over {sorted({b['attended'] for b in merged.values()})} of "
            f"{sorted({b['tokens'] for b in merged.values()})} tokens in {len(merged)} blocks"
            if merged
            else ""
        )
        lines.append(
            f"{'':10}   {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:5.2f}  "
            f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:5.2f}{kept}"
        )
    return lines


#: The four UNets that lever ``stack`` times (:func:`compose_stack`'s arms), by role.
STACK_ARMS = ("full", "shallow", "merged", "merged shallow")
#: The INT8 arms that lever ``stack`` times as well when asked (``--stack-int8``): the UNet and
#: DeepCache's shallow UNet quantized by one recipe.
STACK_INT8_ARMS = ("int8", "int8 shallow")
#: DeepCache's shallow UNet of the layer cut (:data:`sdaccel.cpu.deepcache.CUTS`), timed as well when
#: asked (``--deepcache-layer-cut``), in float: the stacks keep it so after an INT8 UNet too
#: (:data:`sdaccel.cpu.deepcache.QUANTIZED_PARTS`).
STACK_LAYER_ARM = "layer shallow"


def compose_stack(arms: dict, ratio: float, intervals, torch_fp32: dict | None = None) -> dict:
    """Seconds per UNet step of the float levers stacked, from the four UNets of :data:`STACK_ARMS`
    timed side by side (``arms``: ``time_tome``'s rows by role): the UNet; DeepCache at each of
    ``intervals`` N, a step averaging ``(t_full + (N - 1) t_shallow) / N``; token merging at
    ``ratio``; and both, the merged UNet on full steps and the merged shallow UNet between them.
    Where ``arms`` has both of :data:`STACK_INT8_ARMS`, also INT8 alone and with DeepCache at each
    interval (not with merging: on the trained toy, merging on top of INT8 cost the picture). Where
    it has :data:`STACK_LAYER_ARM`, also DeepCache cut at the last layer at each interval: its
    shallow step in float after the float UNet, and after the INT8 one when that was timed.
    Each row names its ``levers`` as :mod:`sdaccel.toy.stack_quality`'s rows do.
    The full step of DeepCache is timed as the plain UNet (the same layers; DeepCache's full IR
    only returns one more tensor). Each row: wall and CPU seconds per step, ``x_best_float`` by
    both clocks against the UNet's row and, given PyTorch fp32's step (``s_per_step``,
    ``cpu_s_per_step``), ``x_torch_fp32``."""
    missing = [role for role in STACK_ARMS if role not in arms]
    if missing:
        raise ValueError(f"lever stack needs the arms {list(STACK_ARMS)}; missing {missing}.")

    def step(full: str, shallow: str, n: int) -> dict:
        return {
            clock: (arms[full][f"{clock}_call"] + (n - 1) * arms[shallow][f"{clock}_call"]) / n
            for clock in ("s_per", "cpu_s_per")
        }

    merge = f"token merging {ratio:g}"
    block = {n: lever_name(n) for n in intervals}  # "DeepCache N=3", as the toy's stacks name it
    layer = {n: lever_name(n, "layer") for n in intervals} if STACK_LAYER_ARM in arms else {}
    rows = {"static shapes": (step("full", "shallow", 1), [])}
    rows |= {f"+ {name}": (step("full", "shallow", n), [name]) for n, name in block.items()}
    rows |= {f"+ {name}": (step("full", STACK_LAYER_ARM, n), [name]) for n, name in layer.items()}
    rows[f"+ {merge}"] = (step("merged", "merged shallow", 1), [merge])
    rows |= {
        f"+ {merge} + {name}": (step("merged", "merged shallow", n), [merge, name])
        for n, name in block.items()
    }
    int8 = [role for role in STACK_INT8_ARMS if role in arms]
    if int8 and len(int8) < len(STACK_INT8_ARMS):
        raise ValueError(f"the INT8 stacks need the arms {list(STACK_INT8_ARMS)}; got only {int8}.")
    if int8:
        rows["+ INT8"] = (step("int8", "int8 shallow", 1), ["INT8"])
        rows |= {
            f"+ INT8 + {name}": (step("int8", "int8 shallow", n), ["INT8", name]) for n, name in block.items()
        }
        rows |= {
            f"+ INT8 + {name}": (step("int8", STACK_LAYER_ARM, n), ["INT8", name])
            for n, name in layer.items()
        }
    base = rows["static shapes"][0]
    out = {}
    for name, (row, levers) in rows.items():
        entry = {
            "levers": ["static shapes", *levers],
            "s_per_step": row["s_per"],
            "cpu_s_per_step": row["cpu_s_per"],
        }
        entry["x_best_float"] = base["s_per"] / row["s_per"]
        entry["cpu_x_best_float"] = base["cpu_s_per"] / row["cpu_s_per"]
        if torch_fp32:
            entry["x_torch_fp32"] = torch_fp32["s_per_step"] / row["s_per"]
            entry["cpu_x_torch_fp32"] = torch_fp32["cpu_s_per_step"] / row["cpu_s_per"]
        out[name] = entry
    return out


def stack_lines(model: str, stack: dict | None) -> list[str]:
    """Lever ``stack``: seconds per UNet step of each stack of float levers (:func:`compose_stack`)."""
    if not stack:
        return []
    if not stack.get("ok"):
        return [f"{model[:10]:10} lever stack: failed: {stack.get('error', '')[:80]}"]
    lines = [
        f"{model[:10]:10} lever stack ({stack['precision_asked']}, {stack['rounds']} rounds, "
        f"{stack['latent']}x{stack['latent']} latents; per UNet step, DeepCache averaged over N steps):"
    ]
    for name, row in stack["rows"].items():
        torch = f"  x{row['cpu_x_torch_fp32']:5.2f} torch (cpu)" if "cpu_x_torch_fp32" in row else ""
        lines.append(
            f"{'':10}   {name:36} {row['s_per_step']:9.3f} s  cpu {row['cpu_s_per_step']:8.3f} s  "
            f"x{row['cpu_x_best_float']:5.2f} best float (cpu){torch}"
        )
    return lines


def quality_lines(checkpoint: str, quality: dict) -> list[str]:
    lines = [f"quality on {checkpoint} ({quality['prompts']} held-out prompts):"]
    lines.append(f"  {'row':34} {'adherence':>9} {'PSNR dB':>8} {'SSIM':>6}  against")
    int8 = quality.get("int8_unet", {})
    for name, row in int8.get("rows", {}).items():
        pair = row.get("vs_ov_f32") or row.get("vs_torch_fp32") or {}
        against = "ov_f32" if "vs_ov_f32" in row else "torch_fp32"
        lines.append(
            f"  {'unet ' + name:34} {row['adherence']['score']:9.3f} {fmt(pair.get('psnr_mean'), 8, 1)} "
            f"{fmt(pair.get('ssim_mean'), 6, 3)}  {against if pair else ''}"
        )
    for name, row in quality.get("deepcache", {}).get("rows", {}).items():
        lines.append(
            f"  {'deepcache ' + name:34} {row['adherence']['score']:9.3f} {fmt(row.get('psnr_mean'), 8, 1)} "
            f"{fmt(row.get('ssim_mean'), 6, 3)}  {'f32 (no cache)' if 'ssim_mean' in row else ''}"
        )
    for name, row in quality.get("tome", {}).get("rows", {}).items():
        if name != "f32":
            lines.append(
                f"  {'unet ' + name:34} {row['adherence']['score']:9.3f} {fmt(row.get('psnr_mean'), 8, 1)} "
                f"{fmt(row.get('ssim_mean'), 6, 3)}  f32 (unmerged)"
            )
    for name, row in quality.get("vae_int8", {}).get("rows", {}).items():
        pair = row.get("vs_f32", {})
        lines.append(
            f"  {'vae decoder ' + name:34} {row['adherence']['score']:9.3f} {fmt(pair.get('psnr_mean'), 8, 1)} "
            f"{fmt(pair.get('ssim_mean'), 6, 3)}  {'f32 decoder' if pair else ''}"
        )
    for lever, arms in quality.get("levers_max_abs_diff", {}).items():
        if isinstance(arms, dict) and lever not in (
            "ok",
            "peak_rss_gb",
            "peak_anon_gb",
            "wall_s",
            "load_avg",
        ):
            worst = max((arm["max_abs_diff"] for arm in arms.values() if isinstance(arm, dict)), default=None)
            if worst is not None:
                lines.append(
                    f"  lever {lever:28} max abs diff of the UNet output from its reference: {worst:.1e}"
                )
    for name, part in quality.items():
        if isinstance(part, dict) and part.get("ok") is False:
            lines.append(f"  {name}: failed: {part.get('error', '')[:80]}")
    return lines


def fmt(value, width: int, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"
