"""A benchmark's results composed (``sdaccel.tools.measure.speedups``): speed-ups, seconds per image,
and lever ``stack``'s steps from the UNets timed side by side."""

from __future__ import annotations

import pytest

from sdaccel.tools.measure import speedups as B
from sdaccel.tools.measure import tables


def test_speedups_and_seconds_per_image():
    row = {"ok": True}
    result = {
        "variants": {
            "torch_fp32": {**row, "s_per_step": 4.0, "cpu_s_per_step": 8.0},
            "ov_bf16": {**row, "s_per_step": 2.0, "cpu_s_per_step": 4.0},
            "full_int8": {**row, "s_per_step": 1.0, "cpu_s_per_step": 2.0},
        },
        "best_float": {"chosen": "bf16", "variant": "ov_bf16"},
        "levers": {
            "vae_int8": {
                "rows": {
                    "torch_fp32": {**row, "s_per_step": 3.0},
                    "bf16": {**row, "s_per_step": 1.0},
                    "full_int8": {**row, "s_per_step": 0.5},
                }
            }
        },
    }
    B.add_speedups(result)
    assert result["speedup"]["full_int8"]["vs_torch_fp32"] == 4.0
    assert result["speedup"]["full_int8"]["vs_best_float"] == 2.0
    assert result["speedup"]["full_int8"]["cpu_vs_ov_bf16"] == 2.0
    B.add_whole_image(result, steps=10)
    rows = result["whole_image"]["rows"]
    assert rows["torch_fp32"]["s_per_image"] == 43.0 and rows["ov_bf16"]["s_per_image"] == 21.0
    assert rows["full_int8 + vae full_int8"]["s_per_image"] == 10.5
    assert rows["full_int8"]["vs_best_float"] == 21.0 / 11.0


def _arm(s: float, cpu: float) -> dict:
    return {"s_per_call": s, "cpu_s_per_call": cpu}


STACK_ARMS = {
    "full": _arm(4.0, 8.0),
    "shallow": _arm(2.0, 4.0),
    "merged": _arm(3.0, 6.0),
    "merged shallow": _arm(1.0, 2.0),
}


def test_the_stack_composes_each_step_from_the_unets_timed_side_by_side():
    rows = B.compose_stack(STACK_ARMS, 0.5, [2, 3], torch_fp32={"s_per_step": 12.0, "cpu_s_per_step": 16.0})
    assert list(rows) == [
        "static shapes",
        "+ DeepCache N=2",
        "+ DeepCache N=3",
        "+ token merging 0.5",
        "+ token merging 0.5 + DeepCache N=2",
        "+ token merging 0.5 + DeepCache N=3",
    ]
    assert rows["static shapes"] == {
        "levers": ["static shapes"],
        "s_per_step": 4.0,
        "cpu_s_per_step": 8.0,
        "x_best_float": 1.0,
        "cpu_x_best_float": 1.0,
        "x_torch_fp32": 3.0,
        "cpu_x_torch_fp32": 2.0,
    }
    assert rows["+ DeepCache N=2"]["s_per_step"] == 3.0  # (4 + 2) / 2
    assert rows["+ token merging 0.5 + DeepCache N=3"]["levers"] == [
        "static shapes",
        "token merging 0.5",
        "DeepCache N=3",
    ]
    assert rows["+ token merging 0.5 + DeepCache N=3"]["cpu_s_per_step"] == 10.0 / 3  # (6 + 2 * 2) / 3
    assert rows["+ token merging 0.5 + DeepCache N=3"]["cpu_x_best_float"] == 8.0 / (10.0 / 3)
    without_torch = B.compose_stack(STACK_ARMS, 0.5, [2])
    assert "x_torch_fp32" not in without_torch["static shapes"]
    with pytest.raises(ValueError, match=r"missing \['merged shallow'\]"):
        B.compose_stack({k: v for k, v in STACK_ARMS.items() if k != "merged shallow"}, 0.5, [2])


def test_the_stack_adds_int8_alone_and_with_deepcache_when_both_int8_arms_were_timed():
    arms = {**STACK_ARMS, "int8": _arm(2.0, 5.0), "int8 shallow": _arm(1.0, 3.0)}
    rows = B.compose_stack(arms, 0.5, [2, 3])
    assert list(rows)[-3:] == ["+ INT8", "+ INT8 + DeepCache N=2", "+ INT8 + DeepCache N=3"]
    assert rows["+ INT8"]["levers"] == ["static shapes", "INT8"]
    assert rows["+ INT8"]["cpu_x_best_float"] == 8.0 / 5.0
    assert rows["+ INT8 + DeepCache N=3"]["levers"] == ["static shapes", "INT8", "DeepCache N=3"]
    assert rows["+ INT8 + DeepCache N=3"]["cpu_s_per_step"] == (5.0 + 2 * 3.0) / 3
    assert not any("INT8" in name for name in B.compose_stack(STACK_ARMS, 0.5, [2]))
    with pytest.raises(ValueError, match=r"need the arms \['int8', 'int8 shallow'\]; got only \['int8'\]"):
        B.compose_stack({**STACK_ARMS, "int8": _arm(2.0, 5.0)}, 0.5, [2])


def test_the_stack_adds_the_layer_cut_where_its_shallow_unets_were_timed():
    arms = {
        **STACK_ARMS,
        "int8": _arm(2.0, 4.0),
        "int8 shallow": _arm(1.2, 2.4),
        "layer shallow": _arm(0.5, 1.0),
    }
    rows = B.compose_stack(arms, 0.5, [2, 3])
    layer = rows["+ INT8 + DeepCache N=2 (layer cut)"]
    assert layer["levers"] == ["static shapes", "INT8", "DeepCache N=2 (layer cut)"]
    # the INT8 UNet on full steps, the layer cut's float shallow UNet between them
    assert layer["cpu_s_per_step"] == pytest.approx((4.0 + 1.0) / 2)
    assert rows["+ DeepCache N=3 (layer cut)"]["cpu_s_per_step"] == pytest.approx(
        (STACK_ARMS["full"]["cpu_s_per_call"] + 2 * 1.0) / 3
    )
    # without the INT8 arms the layer cut is timed in float only
    float_only = B.compose_stack({**STACK_ARMS, "layer shallow": _arm(0.5, 1.0)}, 0.5, [2])
    assert "+ DeepCache N=2 (layer cut)" in float_only and not any("INT8" in n for n in float_only)


def test_the_stack_has_its_lines_in_the_table():
    rows = B.compose_stack(STACK_ARMS, 0.5, [2])
    stack = {"ok": True, "precision_asked": "f32", "rounds": 2, "latent": 64, "rows": rows}
    lines = tables.stack_lines("sd15", stack)
    assert lines[0].startswith("sd15       lever stack (f32, 2 rounds, 64x64 latents")
    assert lines[-1].split() == [
        "+", "token", "merging", "0.5", "+", "DeepCache", "N=2", "2.000", "s", "cpu", "4.000", "s",
        "x", "2.00", "best", "float", "(cpu)",
    ]  # fmt: skip
    assert tables.stack_lines("sd15", {"ok": False, "error": "export failed"}) == [
        "sd15       lever stack: failed: export failed"
    ]
    assert tables.stack_lines("sd15", None) == []
