"""A benchmark's results as a text table (``sdaccel.tools.measure.tables``)."""

from __future__ import annotations

from sdaccel.tools.measure import speedups
from sdaccel.tools.measure import tables as B


def test_the_results_table_has_a_row_per_variant_and_the_composed_images():
    row = {"ok": True}
    result = {
        "variants": {
            "torch_fp32": {**row, "s_per_step": 4.0, "cpu_s_per_step": 8.0, "precision": "f32"},
            "ov_bf16": {**row, "s_per_step": 2.0, "cpu_s_per_step": 4.0, "precision": "bf16"},
        },
        "quantization": {"full_int8": {"ok": False, "error": "stopped above the limit"}},
        "best_float": {"chosen": "bf16", "variant": "ov_bf16", "why": "measured"},
    }
    speedups.add_speedups(result)
    lines = B.results_table({"models": {"sd15": result}}).splitlines()
    assert "wall clock, median" in lines[0] and lines[1].split()[:4] == ["model", "variant", "prec", "s/step"]
    assert lines[3].split()[:6] == ["sd15", "ov_bf16", "bf16", "2.00", "2.00", "1.00"]
    assert "sd15       full_int8                      quantization failed: stopped above the limit" in lines
    assert lines[-1] == "sd15       best float: bf16 (measured)"
    assert B.fmt(None, 5) == "    -" and B.fmt(1.234, 6, 1) == "   1.2"
