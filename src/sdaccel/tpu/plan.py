"""The TPU plan beside a measurement (notebooks 01-03): what a notebook's program would cost on a
Cloud TPU slice, predicted here with no TPU and no weights, next to what the notebook measured.

    from sdaccel.tpu import plan as tpu_plan

    plan = tpu_plan.predict(MODEL_ID, "v5e-1", batch=1, cache_dir="build/tpu-plan")
    measured = tpu_plan.measurement(run_s, images, chips, compile_s)
    display(Markdown(tpu_plan.beside(plan, measured)))
    results["tpu_plan"] = tpu_plan.summary(plan)

:func:`predict` compiles the program for the compile-only devices of a topology
(:func:`sdaccel.tpu.plan_compile.compile_case`) and keeps the plan in a cache folder
(:mod:`sdaccel.tpu.plan_files`). The command line that plans many cases and writes the committed
plan files is ``python -m sdaccel.tools.measure.tpu_plan``.
"""

from __future__ import annotations

import json
import math
import os
from importlib import resources
from pathlib import Path

import jax

from sdaccel.core.faults import fault_point
from sdaccel.core.staging import clear_leftovers, writer_lock
from sdaccel.core.tables import markdown_table
from sdaccel.tpu import topology as tpu_topology
from sdaccel.tpu.plan_compile import DEFAULT_CONFIG, Case, compile_case
from sdaccel.tpu.plan_files import (
    as_stored,
    partial_patterns,
    plan_document,
    plan_key,
    reusable_rows,
    write_plan_file,
)
from sdaccel.tpu.topology import GiB

#: Hub ids whose configs ship in ``sdaccel/reference_configs``: they are planned with no download.
REFERENCE_IDS = {"stabilityai/stable-diffusion-xl-base-1.0": DEFAULT_CONFIG}

#: The utilisation the HF blog's v5e-4 run reached by the plan's own floor (1.41 s of its 2.33 s
#: per image per chip: ``utilisation_needed`` of benchmarks/results/tpu_plan_v5e-4_b2_splash_vae1.json):
#: what a well-tuned JAX SDXL gets out of a v5e.
PUBLISHED_UTILISATION = 0.60


def config_source(model: str | os.PathLike) -> str:
    """What :func:`sdaccel.tpu.plan_compile.read_configs` plans for a notebook's ``MODEL_ID``: a
    local diffusers folder or a reference config name as it is, a reference config for the hub ids
    in :data:`REFERENCE_IDS`, else the hub repository's JSON configs alone (kilobytes; no weights)."""
    if Path(model).is_dir():
        return str(model)
    if str(model) in REFERENCE_IDS:
        return REFERENCE_IDS[str(model)]
    if str(model) == "tiny" or (resources.files("sdaccel") / "reference_configs" / str(model)).is_dir():
        return str(model)  # a reference config name (or --config tiny's)
    from huggingface_hub import snapshot_download

    return snapshot_download(
        str(model), allow_patterns=["model_index.json", "*/config.json", "*/*_config.json"]
    )


def predict(
    model: str | os.PathLike,
    topology: str = "v5e-1",
    batch: int = 1,
    height: int = 1024,
    width: int = 1024,
    steps: int = 20,
    guidance: bool = True,
    dtype: str = "bfloat16",
    attention: str = "splash",
    mesh: str = "auto",
    vae_images_per_chip: int | None = 1,
    cache_dir: str | os.PathLike | None = None,
) -> dict:
    """The plan's row for ``model``'s denoise-and-decode program with ``batch`` images per chip,
    compiled for the compile-only devices of ``topology`` (no TPU needed; it needs libtpu, and
    raises :class:`sdaccel.tpu.topology.CompilerMissing` naming the install without it). The
    defaults are the pipelines' own on a TPU: splash attention, one image per VAE decode step.
    With ``cache_dir``, a plan is kept there (:func:`sdaccel.tpu.plan_files.plan_key`) and read
    back, with ``"cached"`` set, instead of compiled again; a kept plan that cannot be trusted
    (:func:`sdaccel.tpu.plan_files.reusable_rows`) is compiled again and replaced. Two processes
    asking for one plan at once take turns (:func:`sdaccel.core.staging.writer_lock`): the second
    reads back the first one's."""
    if batch < 1 or steps < 1:
        raise ValueError(f"batch and steps must be positive, got batch={batch}, steps={steps}.")
    tpu_topology.topology(topology)  # raises with the choices
    vae = None if vae_images_per_chip is None else math.gcd(vae_images_per_chip, batch)
    case = Case(
        topology, mesh, attention, batch, height, width, steps, dtype, guidance, vae_images_per_chip=vae
    )
    source = config_source(model)
    if cache_dir is None:
        return as_stored(compile_case(case, source)[0])
    key = plan_key(case, source)
    path = Path(cache_dir) / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(path):
        clear_leftovers(path, partial_patterns(path))
        kept = reusable_rows(path, want=key).get(key)
        if kept is not None:
            return {**kept, "cached": True}
        row = as_stored({**compile_case(case, source)[0], "plan_key": key})
        fault_point("plan.case-compiled")
        write_plan_file(path, json.dumps(plan_document([row], f"sdaccel.tpu.plan.predict: {case}"), indent=1))
    return row


def measurement(
    run_s: float, images: int, chips: int, compile_s: float | None = None, flops_per_image=None
) -> dict:
    """What a notebook measured, in the plan's units: seconds per image per chip, and on a TPU the
    peak HBM the first chip has seen (``memory_stats``). ``platform`` says where it ran."""
    platform = jax.default_backend()
    stats = (jax.devices()[0].memory_stats() or {}) if platform == "tpu" else {}
    return {
        "platform": platform,
        "s_per_image_per_chip": run_s * chips / images,
        "peak_hbm_bytes": stats.get("peak_bytes_in_use"),
        "compile_s": compile_s,
        "flops_per_image": flops_per_image,
    }


def summary(row: dict) -> dict:
    """The plan's figures that a notebook keeps in its ``results.json``."""
    return {
        "topology": row["topology"],
        "batch_per_chip": row["batch"],
        "config": row["config"],
        "compile_error": row["compile_error"],
        "resident_peak_bytes": row["resident_peak_bytes"],
        "hbm_capacity_bytes": row["hbm_capacity_bytes"],
        "fits": row["fits"],
        "spare_bytes": row["spare_bytes"],
        "batch_estimate": row["batch_estimate"],
        "flops_per_image": row["flops"]["per_image"],
        "floor_s_per_image_per_chip": row["floor_s_per_image_per_chip"],
        "collectives": row["collectives"],
        "pallas_calls": row["pallas_calls"],
        "compile_s": row["compile_s"],
    }


def _bytes(n) -> str:
    return "-" if n is None else (f"{n / GiB:.2f} GiB" if n >= GiB / 10 else f"{n / 2**20:.1f} MiB")


def _flops(n) -> str:
    return "-" if not n else (f"{n / 1e12:.1f} TFLOP" if n >= 1e11 else f"{n / 1e9:.3g} GFLOP")


def _seconds(s) -> str:
    return "-" if s is None else (f"{s:.2f} s" if s >= 0.1 else f"{s * 1e3:.3g} ms")


def beside(row: dict, measured: dict | None = None) -> str:
    """A Markdown table: the plan's prediction for one program next to what was measured. Times
    and memory compare only on a TPU; elsewhere that column says so. FLOPs are the model's
    arithmetic and compare anywhere."""
    on_tpu = measured is not None and measured["platform"] == "tpu"
    topo, mem = row["topology"], row["hbm_bytes"]
    floor = row["floor_s_per_image_per_chip"]
    model = Path(str(row["config"])).name
    where = "no measurement" if measured is None else f"measured ({measured['platform']})"
    off = "" if measured is None else f"- ({measured['platform']}: not a TPU measurement)"
    if row["compile_error"]:
        fit = f"does NOT fit: XLA refused it ({row['compile_error'][:80]})"
    else:
        room = "fits" if row["fits"] else "does NOT fit"
        fit = (
            f"{_bytes(row['resident_peak_bytes'])} of {_bytes(row['hbm_capacity_bytes'])}: {room}, "
            f"{_bytes(row['spare_bytes'])} spare"
        )
    coll = ", ".join(f"{k} {v}" for k, v in sorted(row["collectives"].items())) or "none"
    measured_flops = _flops(measured.get("flops_per_image")) if measured else ""
    measured_compile = measured.get("compile_s") if on_tpu else None
    rows = [
        (f"{model}, {row['batch']} image(s) per chip", f"predicted for {topo} (compiled here)", where),
        ("HBM per chip: weights and inputs", _bytes(mem["argument"]), ""),
        ("HBM per chip: temporaries", _bytes(mem["temp"]), ""),
        (
            "HBM per chip: peak with the text encoders",
            fit,
            _bytes(measured["peak_hbm_bytes"]) if on_tpu else off,
        ),
        ("largest batch per chip (estimate)", str(row["batch_estimate"]), ""),
        (
            "FLOPs per image",
            _flops(row["flops"]["per_image"]),
            measured_flops if measured_flops != "-" else "",
        ),
        ("time per image per chip at 100% of peak", _seconds(floor), ""),
        (
            f"time per image per chip at {PUBLISHED_UTILISATION:.0%} of peak",
            _seconds(None if floor is None else floor / PUBLISHED_UTILISATION),
            _seconds(measured["s_per_image_per_chip"]) if on_tpu else off,
        ),
        ("collectives; Pallas kernel calls", f"{coll}; {row['pallas_calls']}", ""),
        (
            "compile time",
            f"{row['compile_s']:.1f} s (for {topo}, on the CPU here"
            + ("; read back from the plan cache)" if row.get("cached") else ")"),
            _seconds(measured_compile) if measured_compile is not None else "",
        ),
    ]
    return markdown_table(rows[0], rows[1:]) + "\n"
