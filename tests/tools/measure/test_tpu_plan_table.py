"""The TPU plan's table, on the committed plans (a compiled row's line is checked in
``tests/tpu/test_plan_compile.py``)."""

import io
import json
from pathlib import Path

from sdaccel.tools.measure import tpu_plan_table

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def test_the_table_of_a_committed_plan():
    rows = json.loads((RESULTS / "tpu_plan_v5e-1_b4.json").read_text())["rows"]
    assert all(len(tpu_plan_table.table_row(r)) == len(tpu_plan_table.COLUMNS) for r in rows)
    md = tpu_plan_table.markdown(rows, "python -m sdaccel.tools.measure.tpu_plan")
    assert md.startswith("# TPU plan\n") and md.count("\n| v5e-1 |") == len(rows)
    printed = io.StringIO()
    tpu_plan_table.print_table(rows, file=printed)
    assert len(printed.getvalue().splitlines()) == len(rows) + 1
