"""The exports of the CPU benchmarks (``sdaccel.tools.measure.exports``; the exports themselves run
in children, exercised by the benchmarks): an IR's parameter count."""

from __future__ import annotations

import numpy as np
import pytest

from sdaccel.tools.measure import exports


def test_ir_parameters_counts_the_float_constants(tmp_path):
    ov = pytest.importorskip("openvino")
    from openvino import opset13 as ops

    x = ops.parameter([1, 3], np.float32, name="x")
    weight = ops.constant(np.ones((3, 4), np.float32))
    shape = ops.constant(np.array([1, 4], np.int64))  # an integer constant is not a parameter
    out = ops.reshape(ops.matmul(x, weight, False, False), shape, False)
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([out], [x]), str(xml), compress_to_fp16=False)
    assert exports.ir_parameters(xml) == 12
