"""Notebook 06's steps, one call each: run the per-step benchmark (:func:`run_benchmark`), lay out
its table (:func:`step_table`), put what the Intel CPU posts claimed beside what the committed runs
measured (:func:`claimed_and_measured`), show the PyTorch fp32 baseline's spread across the
committed whole-image runs (:func:`baseline_spread`), and price each image (:func:`price_report`).

Every figure that is not this notebook's own run names the file it comes from: a committed
results file of ``benchmarks/results`` or a published post (cited in :data:`PUBLISHED`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from sdaccel.core.tables import markdown_table
from sdaccel.core.timing import cost_per_image
from sdaccel.course import whole_image

#: One image with classifier-free guidance: the UNet's batch in every per-step run.
BATCH = 2
#: The posts' figures (whole images, seconds), per job (model, size, steps): the machine whose
#: price applies and the seconds per image. Hugging Face blog, "Accelerating Stable Diffusion
#: Inference on Intel CPUs" (2023; 32 Sapphire Rapids cores of an r7iz.metal-16xl, 64 vCPUs), and
#: "Accelerating Stable Diffusion XL Inference with JAX on Cloud TPU v5e" (October 2023).
PUBLISHED = {
    ("SD 1.5", 512, 20): {
        "Xeon, 32 cores (post): diffusers fp32": ("64-vCPU Xeon VM", 32.3),
        "Xeon, 32 cores (post): OpenVINO": ("64-vCPU Xeon VM", 16.7),
        "Xeon, 32 cores (post): OpenVINO, static shapes": ("64-vCPU Xeon VM", 4.7),
    },
    ("SDXL", 1024, 20): {"TPU v5e-4 (post): JAX, 4 images per call": ("TPU v5e-4", 2.33 / 4)},
}
INTEL_POST = 'Hugging Face blog, "Accelerating Stable Diffusion Inference on Intel CPUs" (2023)'
#: The committed per-step runs on the AMX Xeon and the whole-image run with and without static shapes.
AMX_PATTERN = "*sd15_xeon_amx.json"
STATIC_FILE = "whole_image_sd15_lcm_static.json"


def benchmark_command(
    script: str | os.PathLike,
    model_id: str,
    variants: Iterable[str],
    *,
    latent: int,
    iters: int,
    calibration_samples: int,
    quant_memory_limit_gb: float,
    workdir: str | os.PathLike,
    out: str | os.PathLike,
    speedups: Iterable[str] = (),
    deepcache_intervals: Iterable[int] = (),
) -> list[str]:
    """The command line of ``benchmarks/bench_openvino.py`` (``script``) for one UNet: each variant
    in its own child process, batch :data:`BATCH`, ``latent`` x ``latent`` latents, the median of
    ``iters`` calls; with ``speedups`` (the script's ``--levers``, e.g. ``["deepcache"]``), DeepCache at
    ``deepcache_intervals``."""
    command = [sys.executable, str(script), "--models", str(model_id), "--variants", *variants]
    command += ["--batch", str(BATCH), "--latent", str(latent), "--iters", str(iters)]
    command += ["--calib-samples", str(calibration_samples)]
    command += ["--quant-memory-limit-gb", str(quant_memory_limit_gb)]
    command += ["--workdir", str(workdir), "--out", str(out)]
    speedups = list(speedups)
    if speedups:
        command += ["--levers", *speedups]
        if "deepcache" in speedups:
            command += ["--deepcache-intervals", *map(str, sorted(set(deepcache_intervals)))]
    return command


def run_benchmark(command: list[str], out: str | os.PathLike, log: str | os.PathLike) -> dict:
    """Run :func:`benchmark_command`'s ``command`` quietly (the child processes' log goes to ``log``,
    NNCF's progress bars to their final line) and return its results JSON ``out``. A failure raises
    ``RuntimeError`` with the log's last lines."""
    plain = {**os.environ, "TTY_COMPATIBLE": "0", "TTY_INTERACTIVE": "0"}
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as sink:
        done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, env=plain, check=False)
    if done.returncode != 0:
        tail = "\n".join(Path(log).read_text().splitlines()[-20:])
        raise RuntimeError(
            f"the benchmark failed (exit {done.returncode}); the end of its log ({Path(log).name}):\n{tail}"
        )
    return json.loads(Path(out).read_text())


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def step_table(speed: Mapping, variants: Mapping) -> str:
    """The per-step table of one benchmarked UNet (its ``speedup`` and ``variants``): the precision
    that ran, wall and CPU seconds per step with their ratios to PyTorch fp32 and OpenVINO bf16, and
    the size on disk."""
    rows = []
    for name, row in speed.items():
        entry = variants.get(name, {})
        size = entry.get("size_bytes")
        rows.append(
            [
                name,
                entry.get("precision", ""),
                f"{row['s_per_step']:.3f}",
                _ratio(row["vs_torch_fp32"]),
                _ratio(row["vs_ov_bf16"]),
                f"{row['cpu_s_per_step']:.3f}",
                _ratio(row["cpu_vs_torch_fp32"]),
                "-" if not size else f"{size / 1e6:.0f}",
            ]
        )
    header = ["variant", "precision", "s/step", "x PyTorch fp32", "x OV bf16", "CPU s/step"]
    return markdown_table(header + ["x PyTorch fp32 (CPU s)", "MB"], rows, align="llrrrrrr")


def _amx_runs(results: Path) -> dict[str, dict]:
    """The committed per-step SD 1.5 runs on the AMX Xeon: file name -> its ``speedup`` rows."""
    runs = {}
    for path in sorted(results.glob(AMX_PATTERN)):
        speed = json.loads(path.read_text()).get("models", {}).get("sd15", {}).get("speedup", {})
        if {"torch_fp32", "ov_bf16", "full_int8"} <= set(speed):
            runs[path.name] = speed
    if not runs:
        raise FileNotFoundError(f"no {AMX_PATTERN} run with full_int8 in {results}: benchmarks/results.")
    return runs


def amx_int8_gain(results: str | os.PathLike) -> dict[str, float]:
    """Full INT8's speed-up over the best float per UNet step (wall clock), per committed AMX run."""
    return {name: speed["full_int8"]["vs_best_float"] for name, speed in _amx_runs(Path(results)).items()}


def claimed_and_measured(results: str | os.PathLike) -> str:
    """What the Intel CPU post claimed beside what the committed runs in ``results`` measured, one
    row per file: OpenVINO bf16 alone against PyTorch fp32, full INT8's further gain over bf16 on
    AMX, and static shapes against dynamic ones."""
    results = Path(results)
    post = PUBLISHED[("SD 1.5", 512, 20)]
    fp32, ov, static = (post[k][1] for k in post)
    runs = _amx_runs(results)
    rows = []
    for name, speed in runs.items():
        rows.append(
            ["OpenVINO bf16 alone vs PyTorch fp32", f"{fp32 / ov:.2f}x", f"{speed['ov_bf16']['vs_torch_fp32']:.2f}x",
             f"per UNet step, 2-core AMX Xeon: {name}"]
        )  # fmt: skip
    for name, speed in runs.items():
        rows.append(
            ["full INT8 on top of bf16", "not in the post's table", f"{speed['full_int8']['vs_best_float']:.2f}x",
             f"per UNet step, 2-core AMX Xeon: {name}"]
        )  # fmt: skip
    table = whole_image.read_table(results / STATIC_FILE)["rows"]
    gains = [  # each row with static shapes against the same row without
        table[key.replace("_static", "")]["image_s"] / row["image_s"]
        for key, row in table.items()
        if "_static" in key and row["image_s"] and table.get(key.replace("_static", ""), {}).get("image_s")
    ]
    if gains:
        rows.append(
            ["static shapes vs dynamic", f"{ov / static:.2f}x",
             f"{min(gains):.2f}x to {max(gains):.2f}x", f"whole image, 2-core AMX Xeon: {STATIC_FILE}"]
        )  # fmt: skip
    header = ["what", "the post (32 Xeon cores, 20 steps)", "measured here", "how, and the file"]
    return markdown_table(header, rows, align="lrrl")


def baseline_spread(results: str | os.PathLike, table: Mapping) -> dict:
    """PyTorch fp32's whole-image seconds (20 steps) across the committed whole-image runs of
    ``table``'s model and CPU in ``results``: ``{"files": {name: s}, "min", "median", "max"}``, each
    of the three a ``(seconds, file)``."""
    model, cpu = table["settings"]["model"], table["machine"]
    files = {}
    for path in sorted(Path(results).glob("whole_image_*.json")):
        try:
            other = whole_image.read_table(path)
        except (KeyError, ValueError):
            continue
        row = other["rows"].get("torch_fp32_20")
        same = other["machine"]["cpu"] == cpu["cpu"] and other["machine"]["flags"] == cpu["flags"]
        if other["settings"]["model"] == model and same and row and row["image_s"]:
            files[path.name] = row["image_s"]
    if not files:
        raise ValueError(f"no committed whole-image run of {model} on {cpu['cpu']} in {results}.")
    ordered = sorted(files.items(), key=lambda item: item[1])
    median = statistics.median_low([s for _, s in ordered])
    return {
        "files": files,
        "min": ordered[0][::-1],
        "median": next((s, n) for n, s in ordered if s == median),
        "max": ordered[-1][::-1],
    }


def spread_sentence(spread: Mapping, this_file: str, this_s: float) -> str:
    """One sentence: this table's PyTorch fp32 seconds beside the spread across the committed runs."""
    if len(spread["files"]) == 1:
        return (
            f"PyTorch fp32, the baseline of every ratio, took {this_s:.1f} s in this run ({this_file}), the "
            "only committed run of this model on this CPU."
        )
    parts = ", ".join(
        f"{what} {spread[what][0]:.1f} s ({spread[what][1]})" for what in ("min", "median", "max")
    )
    return (
        f"PyTorch fp32, the baseline of every ratio, took {this_s:.1f} s in this run ({this_file}); across "
        f"the {len(spread['files'])} committed runs on the same CPU: {parts}. Ratios compare rows of one "
        "run only: the same configuration against another run's baseline would read differently."
    )


def _per_image(machine: str, prices: Mapping, s_per_image: float, source: str, adherence=None) -> dict:
    if machine not in prices:
        raise KeyError(f"no price for {machine!r}: add it to PRICE_PER_HOUR (US dollars per hour).")
    cost = cost_per_image(1.0 / s_per_image, prices[machine])
    return {
        "machine": machine,
        "source": source,
        "s_per_image": s_per_image,
        "images_per_dollar": 1.0 / cost["per_image"],
        "adherence": adherence,
        **cost,
    }


def price_groups(tables: Iterable[Mapping], prices: Mapping, own: Mapping | None = None) -> dict:
    """Images per dollar, grouped by job (model, size, steps): the posts' figures (:data:`PUBLISHED`),
    each whole-image table's rows priced as a VM of as many vCPUs as its CPU had logical cores
    (``"2-vCPU VM"``), and ``own``: ``{(model, size, steps): {label: (machine, seconds)}}``."""
    groups = {
        job: {label: _per_image(*row[:1], prices, row[1], "published") for label, row in rows.items()}
        for job, rows in PUBLISHED.items()
    }
    for table in tables:
        s, m = table["settings"], table["machine"]
        for row in table["rows"].values():
            if row["ok"] and row["image_s"]:
                job = (whole_image.model_name(s["model"]), s["size"], row["steps"])
                label = f"{m['logical_cores']}-core {m['cpu']}: {row['title']}"
                machine = f"{m['logical_cores']}-vCPU VM"
                groups.setdefault(job, {}).setdefault(
                    label, _per_image(machine, prices, row["image_s"], "whole-image table", row["adherence"])
                )
    for job, rows in (own or {}).items():
        for label, (machine, seconds) in rows.items():
            groups.setdefault(job, {})[label] = _per_image(machine, prices, seconds, "this notebook's run")
    return groups


def price_report(tables: Iterable[Mapping], prices: Mapping, own: Mapping | None = None) -> dict:
    """:func:`price_groups`, as ``{"groups", "tables": [(title, markdown)], "sentences"}``: one
    Markdown table per job, fastest per dollar first, and the TPU against the best CPU rows."""
    groups = price_groups(tables, prices, own)
    shown = []
    for (model, size, steps), rows in sorted(groups.items(), key=lambda item: (*item[0][:2], -item[0][2])):
        ordered = sorted(rows.items(), key=lambda item: -item[1]["images_per_dollar"])
        cells = [
            [label, f"{r['s_per_image']:.2f}", f"{r['images_per_dollar']:.0f}",
             "-" if r["adherence"] is None else f"{r['adherence']:.3f}"]
            for label, r in ordered
        ]  # fmt: skip
        header = ["configuration", "s/image", "images/$", "adherence (tiny trained model)"]
        shown.append(
            (f"{model} at {size}x{size}, {steps} steps", markdown_table(header, cells, align="lrrr"))
        )
    return {"groups": groups, "tables": shown, "sentences": _tpu_sentences(groups)}


def _best(groups: Mapping, job: tuple, tpu: bool) -> tuple[str | None, dict | None]:
    rows = {k: v for k, v in groups.get(job, {}).items() if v["machine"].startswith("TPU") == tpu}
    return max(rows.items(), key=lambda item: item[1]["images_per_dollar"], default=(None, None))


def _tpu_sentences(groups: Mapping) -> list[str]:
    _, tpu = _best(groups, ("SDXL", 1024, 20), True)
    cpu20_label, cpu20 = _best(groups, ("SDXL", 1024, 20), False)
    cpu4_label, cpu4 = _best(groups, ("SDXL", 1024, 4), False)
    out = []
    if tpu and cpu20:
        out.append(
            f"SDXL at 20 steps, like for like: the TPU v5e-4 gives {tpu['images_per_dollar']:.0f} images per "
            f"dollar, {tpu['images_per_dollar'] / cpu20['images_per_dollar']:.1f}x the best CPU row "
            f"({cpu20_label.split(': ', 1)[1]}, {cpu20['images_per_dollar']:.0f})."
        )
    if tpu and cpu4:
        out.append(
            f"With 4 steps the CPU gives {cpu4['images_per_dollar']:.0f} images per dollar "
            f"({cpu4_label.split(': ', 1)[1]}), {cpu4['images_per_dollar'] / tpu['images_per_dollar']:.1f}x the "
            "TPU at 20 steps: not the same job (a distilled adapter, INT8 and a tiny decoder, each with its own "
            "quality cost, notebooks 05 and 07), and the TPU runs 4 steps faster too."
        )
    return out
