"""The TPU plan's files: written whole through core.staging, read back only when they can be trusted.

The kills in the middle of a write and the files that lie are in ``tests/faults/test_tpu_faults.py``.
"""

import json
from pathlib import Path

import pytest

from sdaccel.core.staging import clear_leftovers
from sdaccel.tpu import plan_files

TEMPLATE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "tpu_plan_v5e-1_b4.json"


def test_a_plan_file_is_written_whole_and_its_leftovers_are_found(tmp_path):
    path = tmp_path / "plans" / "plan.json"
    plan_files.write_plan_file(path, json.dumps({"rows": []}))
    assert json.loads(path.read_text()) == {"rows": []}
    assert [p.name for p in path.parent.iterdir()] == ["plan.json"]  # no temporary file left
    killed = path.with_name(".plan.json.0123abcd.partial")  # what a writer killed mid-write leaves
    killed.write_text("{")
    clear_leftovers(path, plan_files.partial_patterns(path))
    assert not killed.exists() and path.exists()


def test_a_document_reads_back_and_a_torn_one_names_the_fix(tmp_path):
    path = tmp_path / "plan.json"
    rows = [{"plan_key": "k", "batch": 1}]
    plan_files.write_plan_file(path, json.dumps(plan_files.plan_document(rows, "a test")))
    data = plan_files.load_plan(path)
    assert data["schema"] == plan_files.PLAN_SCHEMA and data["rows"] == rows
    assert plan_files.reusable_rows(path) == {"k": rows[0]}
    path.write_text(path.read_text()[:20])
    with pytest.raises(plan_files.PlanFileError, match="is not whole JSON.*tools.measure.tpu_plan"):
        plan_files.load_plan(path)
    assert plan_files.reusable_rows(path) == {}


def test_the_committed_plans_are_plans_of_this_package():
    data = plan_files.load_plan(TEMPLATE)
    assert data["rows"] and all("plan_key" in r or "topology" in r for r in data["rows"])
