"""The SD 1.5 UNet's speed on each CPU family we have measured, beside the reader's own run.

Which precision and which INT8 recipe win on a CPU depends on a few instruction sets, not on the
brand alone:

* **AMX** (Intel Sapphire Rapids and later): tile instructions that multiply bf16 and INT8
  matrices at many times the vector rate. bf16 and INT8 both pay most there.
* **AVX-512 BF16** without AMX: bf16 dot products in vector registers (``VDPBF16PS``), at most
  twice the f32 multiply-add rate, and the plugin converts between f32 and bf16 around the ops it
  keeps in f32. Whether bf16 wins depends on the core: the two such CPUs below disagree.
* **AVX-512 VNNI**: INT8 dot products in one instruction (``VPDPBUSD``); full INT8 pays.
* **AVX2 only**: no bf16 at all (the plugin offers f32). INT8 runs on oneDNN's AVX2 kernels,
  which take three instructions (``VPMADDUBSW``, ``VPMADDWD``, ``VPADDD``) where VNNI takes one:
  slower than VNNI, not emulated, and little faster than f32.

:data:`REFERENCE` (``sdaccel/data/cpu_families.json``) holds one table per family, each measured
by ``benchmarks/bench_openvino.py`` (SD 1.5 UNet, random weights, batch 2, 64x64 latents, static
shapes) on a 2-core VM, with the command, the CPU's flags and a note on the clock. :func:`family_of` names the reader's
family from :func:`sdaccel.core.env.cpu_features`; :func:`reference_table` lays the references and the
reader's own run side by side as ratios to PyTorch fp32 (the only number that carries from one
machine to another: absolute seconds depend on the core count and the load).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sdaccel.core.tables import markdown_table

DATA = Path(__file__).resolve().parents[1] / "data" / "cpu_families.json"
#: The variants every table is read for, in this order (absent ones print as "-").
VARIANTS = (
    "torch_fp32",
    "ov_f32",
    "ov_bf16",
    "int8_weights",
    "hybrid",
    "full_int8",
    "full_int8_float_resnets",
    "full_int8+deepcache(N=3)",
)
BASELINE = "torch_fp32"


@dataclass(frozen=True)
class Family:
    """One measured CPU: its name, the instruction sets that decide the precisions, and seconds
    per UNet step of each variant."""

    name: str
    cpu: str
    isa: str
    flags: dict
    s_per_step: dict
    command: str
    note: str = ""

    def ratio(self, variant: str) -> float | None:
        """PyTorch fp32's seconds per step over ``variant``'s (``None`` where not measured)."""
        s = self.s_per_step.get(variant)
        base = self.s_per_step.get(BASELINE)
        return None if s is None or base is None else base / s

    def best_float(self) -> str:
        floats = [v for v in ("ov_f32", "ov_bf16") if v in self.s_per_step]
        return min(floats, key=self.s_per_step.__getitem__)


def isa_tier(flags: dict) -> str:
    """The instruction sets of :mod:`sdaccel.core.env`'s ``cpu_features()`` that decide which precision
    wins, as one label."""
    if not flags:
        return "unknown (no /proc/cpuinfo)"
    if flags.get("amx_tile") and flags.get("amx_bf16"):
        return "AMX"
    if flags.get("avx512_bf16"):
        return "AVX-512 VNNI + BF16, no AMX" if flags.get("avx512_vnni") else "AVX-512 BF16, no AMX"
    if flags.get("avx512_vnni"):
        return "AVX-512 VNNI, no BF16"
    if flags.get("avx512f"):
        return "AVX-512, no VNNI"
    if flags.get("avx2"):
        return "AVX2 only"
    return "no AVX2"


def vendor(cpu: str) -> str:
    text = cpu.lower()
    return (
        "AMD"
        if ("amd" in text or "epyc" in text or "ryzen" in text)
        else "Intel"
        if "intel" in text or "xeon" in text
        else ""
    )


@cache
def _load() -> tuple[Family, ...]:
    raw = json.loads(DATA.read_text())
    return tuple(Family(**entry) for entry in raw["families"])


def reference() -> tuple[Family, ...]:
    """The measured families of ``cpu_families.json``."""
    return _load()


def family_of(cpu: str, flags: dict) -> Family | None:
    """The measured family with the same vendor and instruction-set tier as this CPU, if any."""
    tier, maker = isa_tier(flags), vendor(cpu)
    for family in reference():
        if family.isa == tier and vendor(family.cpu) == maker:
            return family
    return None


def reference_table(
    reader: dict | None = None, reader_label: str = "your run"
) -> tuple[list[str], list[list]]:
    """Columns and rows: one column per family (ratios to PyTorch fp32), one row per variant of
    :data:`VARIANTS`, and the reader's ratios last when ``reader`` (variant -> seconds per step,
    with ``torch_fp32``) is given."""
    families = reference()
    columns = ["variant", *(f"{f.name}" for f in families)]
    if reader is not None:
        columns.append(reader_label)
    base = reader.get(BASELINE) if reader else None
    rows = []
    for variant in VARIANTS:
        row = [variant, *(f.ratio(variant) for f in families)]
        if reader is not None:
            s = reader.get(variant)
            row.append(None if s is None or base is None else base / s)
        if any(value is not None for value in row[1:]):
            rows.append(row)
    return columns, rows


def markdown(columns: list[str], rows: list[list], digits: int = 2) -> str:
    """The table as markdown, ratios with ``digits`` decimals and an ``x``; ``-`` where missing."""
    cells = [[name, *("-" if v is None else f"{v:.{digits}f}x" for v in values)] for name, *values in rows]
    return markdown_table(columns, cells, align="l" + "r" * (len(columns) - 1))
