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

ARM CPUs (Apple silicon, Graviton, Ampere, Raspberry Pi) are read from their own features
(:data:`sdaccel.core.env.ARM_FLAGS`), and OpenVINO's CPU plugin behaves differently there:

* **FP16 arithmetic** (ARMv8.2 and later: Apple M1 on, Graviton 2 on, Cortex-A76 on): the plugin
  lists ``FP16`` in its ``OPTIMIZATION_CAPABILITIES`` and runs the float layers in f16 by default.
  Without it (Cortex-A72, a Raspberry Pi 4) it runs f32.
* **bf16** is an inference precision of the plugin on x86 only, even on ARM CPUs with BF16
  instructions (Apple M2 on, Graviton 3): a bf16 request is not honoured there.
* **INT8** runs through ARM kernels (Arm Compute Library, KleidiAI) that take fewer cases than
  oneDNN's x86 kernels (one scale per tensor, where NNCF quantizes weights with one scale per
  channel); the layers they do not take run in f16 after dequantizing. So no INT8 recipe is
  expected to beat f16 on ARM, and the extra quantize/dequantize steps can make it slower; INT8
  weights make the file smaller, not the run. The dot-product (``SDOT``) and ``I8MM`` instructions
  are what those kernels use where they apply; no ARM CPU is measured in :data:`REFERENCE` yet.

Sources: OpenVINO's "CPU Device" documentation (inference precisions: BF16 on x86-64 only, FP16 on
x86-64 and Arm; the half-precision type used automatically where the CPU has it); openvino pull
requests 22839 (f16 the default for convolutional networks on ARM), 25171 and 33040 (the ARM INT8
FullyConnected and Convolution kernels, without per-channel scales), 29067 (KleidiAI INT8
FullyConnected); openvino_build_deploy pull request 440 (OpenVINO's ARM developers: very limited
INT8 support on ARM, quantized models run in f16). An open OpenVINO issue (34673, 2026.0) reports
wrong INT8 results on Apple M4 Max. :func:`recipe_outlook` says, per recipe and tier, what to
expect.

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

from sdaccel.core.env import architecture
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
    #: the committed results file the seconds come from ("" where only this package data holds them)
    results: str = ""

    def ratio(self, variant: str) -> float | None:
        """PyTorch fp32's seconds per step over ``variant``'s (``None`` where not measured)."""
        s = self.s_per_step.get(variant)
        base = self.s_per_step.get(BASELINE)
        return None if s is None or base is None else base / s

    def best_float(self) -> str:
        floats = [v for v in ("ov_f32", "ov_bf16") if v in self.s_per_step]
        return min(floats, key=self.s_per_step.__getitem__)


@dataclass(frozen=True)
class Tier:
    """An instruction-set tier and what OpenVINO's CPU plugin does on it.

    ``int8``: ``"fast"`` (INT8 dot products in one instruction: VNNI, AMX), ``"slow"`` (x86
    kernels of several instructions: AVX2, AVX-512 without VNNI), ``"arm"`` (the plugin's narrower
    ARM kernels), ``"none"`` or ``"unknown"``. ``bf16``: ``"fast"`` (AMX), ``"mixed"`` (AVX-512
    BF16: faster or slower than f32 by the core), ``"none"``. ``f16``: ``"default"`` (the plugin's
    default float), ``"listed"`` (only where the plugin lists FP16: some AVX-512 Xeons), ``"none"``.
    ``default`` is the float precision the plugin runs by default; ``note`` one sentence on it.
    """

    label: str
    arch: str
    int8: str
    bf16: str
    f16: str
    default: str
    note: str


UNKNOWN = "unknown (instruction sets not read)"

ARM_INT8_NOTE = (
    "its INT8 kernels on ARM take few layers and the rest run in f16 after dequantizing, "
    "so INT8 is not expected to beat f16 and can be slower"
)


def _x86(label, int8, bf16, f16, note) -> Tier:
    return Tier(label, "x86", int8, bf16, f16, "bf16" if bf16 != "none" else "f32", note)


def _arm(label, f16: bool) -> Tier:
    if f16:
        note = f"OpenVINO runs f16 by default; {ARM_INT8_NOTE}."
        return Tier(label, "arm", "arm", "none", "default", "f16", note)
    note = f"OpenVINO runs f32 (no FP16 arithmetic); {ARM_INT8_NOTE.replace('f16', 'f32')}."
    return Tier(label, "arm", "arm", "none", "none", "f32", note)


#: Every tier :func:`isa_tier` can name, by its label.
TIERS = {
    tier.label: tier
    for tier in (
        _x86("AMX", "fast", "fast", "listed", "AMX tiles multiply bf16 and INT8 matrices: both pay most."),
        _x86(
            "AVX-512 VNNI + BF16, no AMX",
            "fast",
            "mixed",
            "listed",
            "INT8 dot products in one instruction (VNNI) pay; bf16 can be faster or slower than f32.",
        ),
        _x86(
            "AVX-512 BF16, no AMX",
            "slow",
            "mixed",
            "listed",
            "bf16 can be faster or slower than f32; INT8 runs without VNNI: small gains.",
        ),
        _x86(
            "AVX-512 VNNI, no BF16",
            "fast",
            "none",
            "listed",
            "INT8 dot products in one instruction (VNNI) pay; no bf16: the plugin runs f32.",
        ),
        _x86("AVX-512, no VNNI", "slow", "none", "listed", "No bf16, and INT8 without VNNI: small gains."),
        _x86("AVX2 only", "slow", "none", "none", "The plugin runs f32; INT8 on AVX2 kernels: small gains."),
        _x86("no AVX2", "none", "none", "none", "OpenVINO falls back to slow kernels: expect long runs."),
        Tier("ARM without NEON", "arm", "none", "none", "none", "f32", "No vector kernels of note: slow."),
        _arm("ARM NEON, no FP16", f16=False),
        *(
            _arm(f"ARM FP16{int8}{bf16}", f16=True)
            for int8 in ("", " + dot product", " + I8MM")
            for bf16 in ("", " + BF16")
        ),
        Tier(UNKNOWN, "", "unknown", "unknown", "unknown", "f32", "Its instruction sets could not be read."),
    )
}


def isa_tier(flags: dict) -> str:
    """The instruction sets of :mod:`sdaccel.core.env`'s ``cpu_features()`` (x86 or ARM) that
    decide which precision wins, as one label of :data:`TIERS`."""
    arch = architecture(flags)
    if arch == "arm":
        return arm_tier(flags)
    if arch == "":
        return UNKNOWN
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


def arm_tier(flags: dict) -> str:
    """The tier of an ARM CPU's features (:data:`sdaccel.core.env.ARM_FLAGS`): NEON, then FP16
    arithmetic (the plugin's f16), then the INT8 instructions (I8MM, else the dot product), then
    BF16."""
    if not flags.get("asimd"):
        return "ARM without NEON"
    if not flags.get("fp16"):
        return "ARM NEON, no FP16"
    int8 = " + I8MM" if flags.get("i8mm") else " + dot product" if flags.get("dotprod") else ""
    return f"ARM FP16{int8}{' + BF16' if flags.get('bf16') else ''}"


def tier_note(tier: str) -> str:
    """One sentence on what OpenVINO's CPU plugin does on ``tier`` (a label of :data:`TIERS`)."""
    return tier_info(tier).note


def tier_info(tier: str) -> Tier:
    """The :class:`Tier` of a label of :data:`TIERS`."""
    try:
        return TIERS[tier]
    except KeyError:
        raise ValueError(f"unknown instruction-set tier {tier!r}; expected one of {sorted(TIERS)}") from None


def vendor(cpu: str) -> str:
    text = cpu.lower()
    if "amd" in text or "epyc" in text or "ryzen" in text:
        return "AMD"
    if "intel" in text or "xeon" in text:
        return "Intel"
    if "apple" in text:
        return "Apple"
    return "Arm" if ("neoverse" in text or "cortex" in text or "arm cpu part" in text) else ""


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


# ----------------------------------------------------------------------------------------------
# What to expect of a recipe on a tier
# ----------------------------------------------------------------------------------------------

#: The verdicts of :func:`recipe_outlook`, in words.
VERDICTS = {
    "faster": "expected to be faster",
    "maybe": "may or may not be faster here: measure",
    "no gain": "runs, but no speed-up is expected",
    "unsupported": "not run as asked on this CPU",
    "reference": "the reference",
}
#: The recipes :func:`recipe_outlook` knows (a lever after ``+``, as in
#: ``full_int8+deepcache(N=3)``, is judged by the recipe before it).
RECIPES = (
    "torch_fp32",
    "ov_f32",
    "ov_bf16",
    "ov_f16",
    "int8_weights",
    "hybrid",
    "full_int8",
    "full_int8_float_resnets",
)
#: The plugin capability (``OPTIMIZATION_CAPABILITIES``) each recipe needs to run as asked.
NEEDS = {
    "ov_bf16": "BF16",
    "ov_f16": "FP16",
    "hybrid": "INT8",
    "full_int8": "INT8",
    "full_int8_float_resnets": "INT8",
}


@dataclass(frozen=True)
class Outlook:
    """What to expect of ``recipe`` on ``tier``: one of :data:`VERDICTS` and why, in one line.

    Float precisions (``ov_*``) are compared with OpenVINO f32 (``ov_f32`` with PyTorch f32); INT8
    recipes with the float precision the plugin runs by default on that CPU, which their float
    layers run in."""

    recipe: str
    tier: str
    verdict: str
    reason: str

    @property
    def supported(self) -> bool:
        """The plugin runs the recipe as asked on this CPU (it may still not be faster)."""
        return self.verdict != "unsupported"

    @property
    def expected_faster(self) -> bool:
        return self.verdict == "faster"

    def __str__(self) -> str:
        return f"{self.recipe} on {self.tier}: {VERDICTS[self.verdict]} ({self.reason})"


def recipe_outlook(recipe: str, tier: str, capabilities=None) -> Outlook:
    """Whether ``recipe`` (one of :data:`RECIPES`) is expected to be faster on a CPU of ``tier``
    (a label of :data:`TIERS`, as :func:`isa_tier` gives), or does not run as asked there, with a
    one-line reason. ``capabilities``, the plugin's ``OPTIMIZATION_CAPABILITIES`` on this CPU
    where known (:func:`sdaccel.cpu.precision.device_capabilities`), overrule the tier: a recipe
    whose capability (:data:`NEEDS`) is not listed is ``"unsupported"``."""
    base = recipe.split("+", 1)[0]
    if base not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; expected one of {RECIPES}")
    info = tier_info(tier)
    need = NEEDS.get(base)
    if capabilities is not None and need and need not in set(capabilities):
        reason = f"the CPU plugin does not list {need} in its OPTIMIZATION_CAPABILITIES here"
        return Outlook(recipe, tier, "unsupported", reason)
    judge = _float_outlook if base in FLOAT_RECIPES else _int8_outlook
    return Outlook(recipe, tier, *judge(base, info))


FLOAT_RECIPES = ("torch_fp32", "ov_f32", "ov_bf16", "ov_f16")


def _float_outlook(recipe: str, tier: Tier) -> tuple[str, str]:
    if recipe == "torch_fp32":
        return "reference", "PyTorch f32: what the reference tables divide by"
    if tier.arch == "":
        return "maybe", "the instruction sets of this CPU could not be read"
    if recipe == "ov_f32":
        if tier.arch == "x86":
            return "faster", "measured 1.2x to 1.6x PyTorch f32 on the reference CPUs"
        return "maybe", f"not measured on ARM yet; the plugin runs {tier.default} by default here"
    if recipe == "ov_bf16":
        return _bf16_outlook(tier)
    return _f16_outlook(tier)


def _bf16_outlook(tier: Tier) -> tuple[str, str]:
    if tier.arch == "arm":
        return "unsupported", "OpenVINO's CPU plugin runs bf16 on x86 only; on ARM it runs f16 or f32"
    if tier.bf16 == "fast":
        return "faster", "AMX multiplies bf16 tiles at many times the f32 rate"
    if tier.bf16 == "mixed":
        return "maybe", "AVX-512 BF16 measured 2.9x faster than f32 on one CPU, 1.5x slower on another"
    return "unsupported", "no bf16 instructions: the plugin runs a bf16 request in f32"


def _f16_outlook(tier: Tier) -> tuple[str, str]:
    if tier.f16 == "default":
        return "faster", "f16 arithmetic does twice the lanes of f32; the plugin's default on this CPU"
    if tier.f16 == "listed":
        return "maybe", "x86 runs f16 only where the plugin lists FP16 (AVX512-FP16 or AMX-FP16 CPUs)"
    return "unsupported", "no f16 arithmetic: the plugin runs an f16 request in f32"


def measured_gain(recipe: str, amx: bool) -> str | None:
    """``recipe``'s speed-up over the best float per UNet step across the measured families with
    (``amx``) or without AMX, as ``"1.23x"`` or ``"1.53x to 2.37x"``; ``None`` where none measured it."""
    gains = sorted(
        f.s_per_step[f.best_float()] / f.s_per_step[recipe]
        for f in reference()
        if (f.isa == "AMX") == amx and recipe in f.s_per_step and f.isa != "AVX2 only"
    )
    if not gains:
        return None
    low, high = f"{gains[0]:.2f}x", f"{gains[-1]:.2f}x"
    return low if low == high else f"{low} to {high}"


def _int8_outlook(recipe: str, tier: Tier) -> tuple[str, str]:
    if tier.int8 == "unknown":
        return "maybe", "the instruction sets of this CPU could not be read"
    if tier.int8 == "arm":
        return (
            "no gain",
            f"{tier.default} is the plugin's float here; {ARM_INT8_NOTE.replace('f16', tier.default)}",
        )
    if recipe == "int8_weights":
        return (
            "no gain",
            "4x smaller weights, but the products run in float: measured 0.89x to 1.03x the best float",
        )
    if tier.int8 == "fast":
        gain = measured_gain(recipe, amx=tier.label == "AMX")
        where = "on AMX" if tier.label == "AMX" else "with VNNI, without AMX"
        said = f"measured {gain} the best float {where}" if gain else f"not measured {where}"
        if recipe == "full_int8_float_resnets":
            said += " (less than full INT8: its ResNet convolutions stay float)"
        return "faster", f"INT8 dot products in one instruction; {said}"
    if tier.int8 == "slow" and recipe != "full_int8_float_resnets":
        return (
            "maybe",
            "INT8 without VNNI takes three instructions: measured 1.13x to 1.15x f32 on an AVX2 CPU",
        )
    if tier.int8 == "slow":
        return "no gain", "INT8 without VNNI takes three instructions: measured 0.86x f32 on an AVX2 CPU"
    return "no gain", "no INT8 vector instructions of note on this CPU"
