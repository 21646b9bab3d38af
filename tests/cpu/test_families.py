"""The CPU-family reference tables of notebook 06 (``sdaccel.cpu.families``)."""

import pytest

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
        ({}, "unknown (no /proc/cpuinfo)"),
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
    assert families.family_of("Intel Xeon", {**AVX512_BF16, "amx_tile": True, "amx_bf16": True}) is None
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
