"""The CPU-family reference tables of notebook 06 (``sdaccel.cpu.families``), the instruction-set
tiers of x86 and ARM CPUs, and what each recipe is expected to do on them."""

import json
from pathlib import Path

import pytest

from sdaccel.core import env
from sdaccel.cpu import families

AVX512_BF16 = {"avx2": True, "avx512f": True, "avx512_vnni": True, "avx512_bf16": True}


@pytest.mark.parametrize(
    "flags, tier",
    [
        ({**AVX512_BF16, "amx_tile": True, "amx_bf16": True, "amx_int8": True}, "AMX"),
        (AVX512_BF16, "AVX-512 VNNI + BF16, no AMX"),
        ({"avx2": True, "avx512f": True, "avx512_vnni": True}, "AVX-512 VNNI, no BF16"),
        ({"avx2": True, "avx512f": True}, "AVX-512, no VNNI"),
        ({"avx2": True, "avx512f": False}, "AVX2 only"),
        ({"avx2": False}, "no AVX2"),
        ({}, families.UNKNOWN),
    ],
)
def test_isa_tier(flags, tier):
    assert families.isa_tier(flags) == tier


def test_every_reference_is_complete_and_consistent():
    refs = families.reference()
    assert len(refs) >= 2
    for family in refs:
        assert families.isa_tier(family.flags) == family.isa, family.name
        assert family.s_per_step["torch_fp32"] > 0 and family.command.startswith("python benchmarks/")
        assert set(family.s_per_step) <= set(families.VARIANTS)
        assert family.ratio("torch_fp32") == 1.0


def test_the_two_avx512_bf16_cpus_disagree_on_bf16():
    """The reason the pipeline measures: same instruction sets, opposite bf16 outcome."""
    amd = families.family_of("AMD EPYC 9B14", AVX512_BF16)
    intel = families.family_of("Intel(R) Xeon(R) Platinum 8481C CPU", AVX512_BF16)
    assert amd.name != intel.name
    assert amd.best_float() == "ov_bf16" and amd.ratio("ov_bf16") == pytest.approx(26.43 / 9.10)
    assert intel.best_float() == "ov_f32" and intel.ratio("ov_bf16") == pytest.approx(10.01 / 12.22)
    amx = families.family_of("Intel Xeon", {**AVX512_BF16, "amx_tile": True, "amx_bf16": True})
    assert amx.isa == "AMX" and amx.best_float() == "ov_bf16"  # the committed AMX run's tier
    assert families.family_of("AMD EPYC", {**AVX512_BF16, "amx_tile": True, "amx_bf16": True}) is None
    avx2 = families.family_of("AMD EPYC 7B13", {"avx2": True, "avx512f": False})
    assert avx2.best_float() == "ov_f32" and "ov_bf16" not in avx2.s_per_step  # the plugin offers f32 only


def test_reference_table_puts_the_reader_beside_the_references():
    reader = {"torch_fp32": 4.0, "ov_f32": 2.0, "full_int8": 1.0}
    columns, rows = families.reference_table(reader, "this run")
    assert columns[0] == "variant" and columns[-1] == "this run"
    assert len(columns) == len(families.reference()) + 2
    by_name = {row[0]: row for row in rows}
    assert by_name["ov_f32"][-1] == 2.0 and by_name["full_int8"][-1] == 4.0 and by_name["ov_bf16"][-1] is None
    assert [row[0] for row in rows] == [v for v in families.VARIANTS if v in by_name]  # kept in order
    text = families.markdown(columns, rows)
    assert "| ov_f32 |" in text and "2.00x" in text and text.count("\n") == len(rows) + 1
    _, without = families.reference_table()
    assert len(without[0]) == len(families.reference()) + 1


# ----------------------------------------------------------------------------------------------
# ARM tiers: faked ARM CPUs, read as sdaccel.core.env reads them
# ----------------------------------------------------------------------------------------------

#: /proc/cpuinfo "Features" of ARM CPUs (abridged to what decides the tier).
GRAVITON3 = "Features\t: fp asimd fphp asimdhp asimddp sve i8mm bf16 svebf16\nCPU part\t: 0xd40\n"
GRAVITON2 = "Features\t: fp asimd fphp asimdhp asimddp atomics\nCPU part\t: 0xd0c\n"
PI4 = "Features\t: fp asimd evtstrm crc32 cpuid\nCPU part\t: 0xd08\n"
#: macOS sysctl values of Apple M1 and M2.
M1 = {"hw.optional.AdvSIMD": "1", "hw.optional.arm.FEAT_FP16": "1", "hw.optional.arm.FEAT_DotProd": "1"}
M2 = {**M1, "hw.optional.arm.FEAT_BF16": "1", "hw.optional.arm.FEAT_I8MM": "1"}


@pytest.mark.parametrize(
    "flags, tier",
    [
        (env.features_from_cpuinfo(GRAVITON3), "ARM FP16 + I8MM + BF16"),
        (env.features_from_cpuinfo(GRAVITON2), "ARM FP16 + dot product"),
        (env.features_from_cpuinfo(PI4), "ARM NEON, no FP16"),
        (env.features_from_sysctl(M1), "ARM FP16 + dot product"),
        (env.features_from_sysctl(M2), "ARM FP16 + I8MM + BF16"),
        (
            env.features_from_sysctl({"hw.optional.AdvSIMD": "1", "hw.optional.arm.FEAT_FP16": "1"}),
            "ARM FP16",
        ),
        (env.features_from_cpuinfo("Features\t: half thumb vfp\n"), "ARM without NEON"),
    ],
)
def test_arm_cpus_get_arm_tiers(flags, tier):
    assert families.isa_tier(flags) == tier and tier in families.TIERS
    assert families.tier_info(tier).arch == "arm"


def test_every_tier_isa_tier_names_is_described():
    for tier in families.TIERS.values():
        assert tier.note.endswith(".") and tier.default in ("f32", "bf16", "f16")
    assert families.tier_info("ARM FP16 + I8MM").default == "f16"
    assert families.tier_note("ARM FP16 + I8MM").startswith("OpenVINO runs f16 by default; its INT8 kernels")
    assert families.tier_info("ARM NEON, no FP16").default == "f32"
    assert families.tier_info("AMX").default == "bf16" and families.tier_info("AVX2 only").default == "f32"
    with pytest.raises(ValueError, match="unknown instruction-set tier 'Z80'"):
        families.tier_note("Z80")


def test_an_arm_cpu_has_no_family_of_its_kind_yet():
    assert families.family_of("Apple M2", env.features_from_sysctl(M2)) is None
    assert families.vendor("Apple M2") == "Apple" and families.vendor("Neoverse-V1") == "Arm"


# ----------------------------------------------------------------------------------------------
# What to expect of each recipe
# ----------------------------------------------------------------------------------------------


def verdicts(tier, capabilities=None):
    return {r: families.recipe_outlook(r, tier, capabilities).verdict for r in families.RECIPES}


def test_on_arm_f16_is_expected_faster_and_int8_is_not():
    for tier in ("ARM FP16 + I8MM + BF16", "ARM FP16 + dot product", "ARM FP16"):
        assert verdicts(tier) == {
            "torch_fp32": "reference",
            "ov_f32": "maybe",
            "ov_bf16": "unsupported",  # even with BF16 instructions: the plugin's bf16 is x86-only
            "ov_f16": "faster",
            "int8_weights": "no gain",
            "hybrid": "no gain",
            "full_int8": "no gain",
            "full_int8_float_resnets": "no gain",
        }
    full = families.recipe_outlook("full_int8", "ARM FP16 + I8MM")
    assert full.supported and not full.expected_faster
    assert "not expected to beat f16 and can be slower" in full.reason
    assert str(full).startswith("full_int8 on ARM FP16 + I8MM: runs, but no speed-up is expected (")
    no_fp16 = verdicts("ARM NEON, no FP16")
    assert no_fp16["ov_f16"] == "unsupported" and no_fp16["full_int8"] == "no gain"
    assert "beat f32" in families.recipe_outlook("hybrid", "ARM NEON, no FP16").reason


def test_on_x86_the_measured_families_decide():
    vnni = verdicts("AVX-512 VNNI + BF16, no AMX")
    assert vnni["full_int8"] == vnni["hybrid"] == "faster" and vnni["ov_bf16"] == "maybe"
    assert vnni["int8_weights"] == "no gain" and vnni["ov_f32"] == "faster"
    avx2 = verdicts("AVX2 only")
    assert avx2["ov_bf16"] == avx2["ov_f16"] == "unsupported"
    assert avx2["full_int8"] == avx2["hybrid"] == "maybe" and avx2["full_int8_float_resnets"] == "no gain"
    assert verdicts("AMX")["ov_bf16"] == "faster" and verdicts("no AVX2")["full_int8"] == "no gain"
    assert set(verdicts(families.UNKNOWN).values()) == {"reference", "maybe"}


def test_each_measured_family_agrees_with_its_outlook():
    """Where a reference family measured a recipe, "faster" means it beat the best float there."""
    for family in families.reference():
        best = min(family.s_per_step[v] for v in ("ov_f32", "ov_bf16") if v in family.s_per_step)
        for recipe in ("hybrid", "full_int8"):
            if recipe in family.s_per_step and families.recipe_outlook(recipe, family.isa).expected_faster:
                assert family.s_per_step[recipe] < best, (family.name, recipe)


def test_the_plugins_capabilities_overrule_the_tier():
    arm = ["FP32", "FP16", "INT8", "BIN", "EXPORT_IMPORT"]
    assert verdicts("ARM FP16 + I8MM", arm)["ov_f16"] == "faster"
    no_fp16 = families.recipe_outlook("ov_f16", "ARM FP16 + I8MM", ["FP32", "INT8"])
    assert no_fp16.verdict == "unsupported" and "does not list FP16" in no_fp16.reason
    assert families.recipe_outlook("full_int8", "AMX", ["FP32", "BF16"]).verdict == "unsupported"
    # a lever after "+" is judged by its recipe
    assert families.recipe_outlook("full_int8+deepcache(N=3)", "AVX2 only").verdict == "maybe"
    with pytest.raises(ValueError, match="unknown recipe 'int4'"):
        families.recipe_outlook("int4", "AMX")
    with pytest.raises(ValueError, match="unknown instruction-set tier"):
        families.recipe_outlook("full_int8", "ARM")


def test_each_family_with_a_results_file_has_its_seconds():
    """A family that names a committed results file (the AMX tier's) holds that file's seconds per
    step and flags, so the table cannot drift from the run it cites."""
    root = Path(__file__).resolve().parents[2]
    cited = [f for f in families.reference() if f.results]
    assert any(f.isa == "AMX" for f in cited), "the AMX tier comes from a committed AMX run"
    for family in cited:
        run = json.loads((root / family.results).read_text())
        if "sd15" not in run.get("models", {}):  # cpu_levers_*: keyed by its checkpoint's folder
            continue
        speed = run["models"]["sd15"]["speedup"]
        assert families.isa_tier(run["machine"]["cpu_flags"]) == family.isa
        for variant, seconds in family.s_per_step.items():
            assert seconds == round(speed[variant]["s_per_step"], 3), (family.name, variant)


def test_int8_gains_are_read_from_the_families_not_typed():
    amx = families.recipe_outlook("full_int8", "AMX").reason
    vnni = families.recipe_outlook("full_int8", "AVX-512 VNNI + BF16, no AMX").reason
    (family,) = [f for f in families.reference() if f.isa == "AMX"]
    gain = family.s_per_step[family.best_float()] / family.s_per_step["full_int8"]
    assert f"{gain:.2f}x the best float on AMX" in amx
    assert "without AMX" in vnni and "on AMX" not in vnni
    assert families.measured_gain("hybrid", amx=True) is None
