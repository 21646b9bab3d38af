"""The TPU plan's table: one line per compiled case, printed by ``python -m
sdaccel.tools.measure.tpu_plan`` as it goes and written beside its plan file as Markdown
(``benchmarks/results/tpu_plan_*.md``)."""

from __future__ import annotations

import sys

from sdaccel.core.tables import markdown_table
from sdaccel.tpu.plan_compile import ANCHORS, SPARE_BYTES
from sdaccel.tpu.topology import GiB

COLUMNS = (
    "topology",
    "mesh",
    "attention",
    "batch/chip",
    "VAE images/step",
    "args GiB",
    "temp GiB",
    "code GiB",
    "peak GiB",
    "resident GiB",
    "HBM GiB",
    "fits",
    "spare GiB",
    "est. max batch",
    "TFLOP/image",
    "floor s/image",
    "util. for goal",
    "util. for MLPerf",
    "collectives",
    "Pallas calls",
    "compile s",
)


def table_row(row: dict) -> list[str]:
    mem = row["hbm_bytes"]
    per_image, floor = row["flops"]["per_image"], row["floor_s_per_image_per_chip"]
    need = row["utilisation_needed"]

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}%"

    refused = bool(row["compile_error"])  # no compiled program: nothing to count in it
    coll = "-" if refused else ", ".join(f"{k} {v}" for k, v in sorted(row["collectives"].items())) or "none"
    mesh = "x".join(str(v) for v in row["mesh_shape"].values())
    return [
        row["topology"],
        mesh,
        row["attention"],
        str(row["batch"]),
        "all" if row["vae_images_per_step"] is None else str(row["vae_images_per_step"]),
        f"{mem['argument'] / GiB:.2f}",
        f"{mem['temp'] / GiB:.2f}",
        "-" if mem["code"] is None else f"{mem['code'] / GiB:.3f}",
        f"{mem['peak'] / GiB:.2f}",
        f"{row['resident_peak_bytes'] / GiB:.2f}",
        f"{row['hbm_capacity_bytes'] / GiB:.0f}",
        "yes" if row["fits"] else ("NO (refused)" if refused else "NO"),
        f"{row['spare_bytes'] / GiB:.2f}",
        str(row["batch_estimate"]),
        "-" if per_image is None else f"{per_image / 1e12:.1f}",
        "-" if floor is None else f"{floor:.2f}",
        pct(need["goal"]),
        pct(need["mlperf_v41_v5e4"]),
        coll,
        "-" if refused else str(row["pallas_calls"]),
        f"{row['compile_s']:.0f}",
    ]


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# TPU plan",
        "",
        f"Made with `{command}` (compile-only TPU devices, abstract weights). Per chip; batch per "
        "chip on the `data` axis; TFLOP per image corrected for the loop trip count and the splash "
        f"kernels; floor at the chip's peak; resident = the program's peak + the text encoders; "
        f"`fits` = resident <= HBM; spare target {SPARE_BYTES / GiB:.0f} GiB.",
        "",
        markdown_table(COLUMNS, [table_row(r) for r in rows]),
    ]
    lines += [
        "",
        "Anchors (s per image per chip): " + "; ".join(f"{v[1]}: {v[0]:.2f}" for v in ANCHORS.values()),
    ]
    return "\n".join(lines) + "\n"


def print_table(rows: list[dict], file=sys.stdout) -> None:
    cells = [list(COLUMNS)] + [table_row(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for line in cells:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)), file=file)
