"""Cutting a UNet IR into parts of about equal weight and stitching them back
(``sdaccel.cpu.ir_parts``, the pieces of ``quantize_in_parts``)."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from sdaccel.cpu import quantize as Q  # noqa: E402


def test_balanced_groups_minimise_the_largest_part():
    from sdaccel.cpu.ir_parts import balanced_groups

    assert balanced_groups([5, 1, 1, 1, 5], 3) == [1, 4]  # 5 | 1 1 1 | 5
    assert balanced_groups([1, 1, 1, 1], 2) == [2]
    assert balanced_groups([3, 1, 1, 1, 1, 1], 2) == [2]  # 3 1 | 1 1 1 1: largest 4
    assert balanced_groups([7], 1) == []
    with pytest.raises(ValueError, match="Cannot split 2 blocks into 3 parts"):
        balanced_groups([1, 2], 3)


def test_cut_parts_run_chained_and_stitch_back_exactly(unet_ir, tmp_path):
    """The parts, run one after the other in f32, and the stitched model give the whole UNet's
    output; every block lands in one part, in order, and the skip connections cross the cuts."""
    from sdaccel.cpu import ir_parts
    from sdaccel.cpu.quality import compile_f32

    _, xml, inputs = unet_ir
    model = Q.read_model(xml)
    blocks = ir_parts.units(model)
    assert blocks[0].startswith("down_blocks.0.") and blocks[-1].startswith("up_blocks.")
    plan = ir_parts.plan_parts(model, 3)
    assert [b for part in plan.blocks for b in part] == blocks and all(plan.blocks)
    assert sum(plan.weight_bytes) == sum(ir_parts.unit_weight_bytes(model).values())
    parts = ir_parts.cut(model, plan)
    assert len(parts) == 3 and plan.outputs[-1] == ["out_sample"]
    # a down block's output is read by an up block two cuts later
    assert set(plan.outputs[0]) & set(plan.inputs[2]) - {"encoder_hidden_states"}
    expected = compile_f32(xml)(inputs[1])[0]
    values = dict(inputs[1])
    for k, part in enumerate(parts):
        compiled = compile_f32(part)
        result = compiled({name: values[name] for name in plan.inputs[k]})
        values.update({ir_parts.tensor_name(o): result[o] for o in compiled.outputs})
    np.testing.assert_allclose(values["out_sample"], expected, rtol=0, atol=1e-5)
    for k, part in enumerate(parts):  # through disk, as the quantized parts travel
        ov.save_model(part, str(tmp_path / f"p{k}.xml"), compress_to_fp16=False)
    names = [p.get_friendly_name() for p in Q.read_model(xml).get_parameters()]
    whole = ir_parts.stitch([Q.read_model(str(tmp_path / f"p{k}.xml")) for k in range(3)], names)
    assert [i.get_any_name() for i in whole.inputs] == names
    assert [o.get_any_name() for o in whole.outputs] == ["out_sample"]
    np.testing.assert_allclose(compile_f32(whole)(inputs[1])[0], expected, rtol=0, atol=1e-5)
