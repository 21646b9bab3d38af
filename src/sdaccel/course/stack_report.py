"""Notebook 06b's stack table: each stack of speed levers with what the picture keeps on the trained
toy (:func:`sdaccel.toy.stack_quality.measure`) beside its seconds per UNet step on a real UNet
(``benchmarks/bench_openvino.py --levers stack``: :func:`sdaccel.tools.measure.speedups.compose_stack`),
joined by their levers, and the fastest stack within a quality bound.

The toy's own seconds are not used: a 1 M-parameter UNet's call is mostly fixed cost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from sdaccel.core.tables import markdown_table
from sdaccel.cpu.families import isa_tier

#: The repository's measured runs of lever ``stack`` on the real SD 1.5 UNet, one per CPU.
REFERENCE_PATTERN = "stack_sd15_*.json"


def reference_run(folder: Path, cpu_flags: Mapping) -> tuple[Path, dict]:
    """The repository's run of lever ``stack`` (a :data:`REFERENCE_PATTERN` file of ``folder``)
    measured on the ISA tier of ``cpu_flags`` (:func:`sdaccel.cpu.families.isa_tier`), the
    reader's CPU; where none was, the first by name. Its path and its JSON."""
    runs = {path: json.loads(path.read_text()) for path in sorted(Path(folder).glob(REFERENCE_PATTERN))}
    if not runs:
        raise FileNotFoundError(f"no {REFERENCE_PATTERN} in {folder}: the repository's benchmarks/results.")
    tier = isa_tier(cpu_flags)
    same = [path for path, run in runs.items() if isa_tier(run["machine"]["cpu_flags"]) == tier]
    path = (same or list(runs))[0]
    return path, runs[path]


def join(quality: Mapping, speed: Mapping | None) -> dict[str, dict]:
    """Per row of ``quality`` (``stack_quality.measure``'s result): its levers, adherence, PSNR
    against f32 and ``within`` (the bound it was measured against), and from ``speed`` (the
    ``rows`` of ``compose_stack``, or None) the stack of the same levers: wall and CPU seconds per
    step and their ratios to the best float and PyTorch fp32 (None where ``speed`` has no such stack,
    e.g. INT8, which lever ``stack`` does not time)."""
    by_levers = {frozenset(row["levers"]): row for row in (speed or {}).values()}
    out = {}
    for name, row in quality["rows"].items():
        timed = by_levers.get(frozenset(row["levers"]), {})
        out[name] = {
            "levers": list(row["levers"]),
            "adherence": row["adherence"]["score"],
            "psnr": row.get("psnr_mean"),
            "within": row["within"],
            **{
                key: timed.get(key)
                for key in ("s_per_step", "cpu_s_per_step", "cpu_x_best_float", "cpu_x_torch_fp32")
            },
        }
    return out


def join_runs(qualities, speed: Mapping | None) -> dict[str, dict]:
    """:func:`join` over several ``stack_quality.measure`` results (chains of levers measured
    apart, e.g. the float stack and INT8 with DeepCache), each row named by its levers
    (``"static shapes + INT8 + DeepCache N=3"``; ``"f32"`` for none). Where two runs have a row of
    the same levers, the first run's is kept. The runs must judge the same number of prompts."""
    counts = {quality["settings"]["num_prompts"] for quality in qualities}
    if len(counts) > 1:
        raise ValueError(
            f"the stack runs judge different numbers of prompts ({sorted(counts)}): not comparable."
        )
    out: dict[str, dict] = {}
    for quality in qualities:
        for row in join(quality, speed).values():
            out.setdefault(" + ".join(row["levers"]) or "f32", row)
    return out


def fastest(rows: Mapping[str, Mapping]) -> str | None:
    """The row of :func:`join` with the least CPU seconds per step among those within the bound
    (None when no such row was timed)."""
    timed = [name for name, row in rows.items() if row["within"] and row["cpu_s_per_step"] is not None]
    return min(timed, key=lambda name: rows[name]["cpu_s_per_step"]) if timed else None


def markdown(rows: Mapping[str, Mapping], num_prompts: int, max_drop: float) -> str:
    """The joined rows as a Markdown table."""

    def cell(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    return markdown_table(
        [
            "stack",
            f"adherence ({num_prompts} prompts)",
            "PSNR vs f32 dB",
            f"within {100 * max_drop:g} points",
            "CPU s/step",
            "x best float",
            "x PyTorch fp32",
        ],
        [
            [
                name,
                f"{row['adherence']:.3f}",
                cell(row["psnr"], ".1f"),
                "yes" if row["within"] else "no",
                cell(row["cpu_s_per_step"], ".2f"),
                cell(row["cpu_x_best_float"], ".2f"),
                cell(row["cpu_x_torch_fp32"], ".2f"),
            ]
            for name, row in rows.items()
        ],
        align="lrrcrrr",
    )
