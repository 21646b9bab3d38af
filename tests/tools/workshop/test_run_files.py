"""Where a run writes: the output folder set aside for a new run (only the reusable exports carry
over), and what a run found from earlier runs."""

import json

from sdaccel.tools.workshop import run_files, run_summary
from sdaccel.tools.workshop.run_files import fresh_output_dir


def test_fresh_output_dir_moves_the_last_run_aside(tmp_path):
    out = tmp_path / "outputs" / "05_x"
    assert fresh_output_dir(out) is None and out.is_dir() and not any(out.iterdir())
    (out / "results.json").write_text(json.dumps({"stale_key": 1}))
    (out / "grid.png").write_bytes(b"png")
    (out / "openvino" / "tiny").mkdir(parents=True)
    (out / "openvino" / "tiny" / "manifest.json").write_text("{}")

    previous = fresh_output_dir(out)
    assert previous == tmp_path / "outputs" / "05_x.previous"
    assert sorted(p.name for p in out.iterdir()) == ["openvino"], "only the reusable exports come back"
    assert (out / "openvino" / "tiny" / "manifest.json").read_text() == "{}"
    assert json.loads((previous / "results.json").read_text()) == {"stale_key": 1}, "no result is lost"
    assert (previous / "grid.png").read_bytes() == b"png"

    (out / "results.json").write_text(json.dumps({"newer": 2}))
    fresh_output_dir(out)  # a third run: the second becomes the previous one
    assert json.loads((previous / "results.json").read_text()) == {"newer": 2}
    assert not (previous / "grid.png").exists() and not (out / "results.json").exists()


def test_what_a_run_started_with_from_earlier_runs_is_named_per_row(tmp_path):
    """The shared caches (exports, plans) and the notebook's own reusable folders that a run found
    and left as they were: a row that read them back is not a first run's time."""
    import os

    outputs = tmp_path / "outputs"
    for path in (
        "openvino/sd15-fp32/unet.xml",
        "tpu-plan/v5e-4-b1-aaaa.json",
        "tpu-plan/v5e-1-b1-bbbb.json",
        "01_x/openvino/lesson/model.xml",
        "01_x/results.json",  # the notebook's own outputs: made again by every run
        "01_x.previous/results.json",
        "02_y/jax-cache/entry",
        ".01_x.earlier/results.json",
    ):
        (outputs / path).parent.mkdir(parents=True, exist_ok=True)
        (outputs / path).write_text("x")
    stems = ["01_x", "02_y"]
    before = run_files.cache_entries(outputs, "01_x", stems)
    assert sorted(before) == [
        "01_x/openvino/lesson",
        "openvino/sd15-fp32",
        "tpu-plan/v5e-1-b1-bbbb.json",
        "tpu-plan/v5e-4-b1-aaaa.json",
    ]
    # the run compiles one plan again (a new file in its place) and adds another
    plan = outputs / "tpu-plan" / "v5e-4-b1-aaaa.json"
    os.utime(plan, (plan.stat().st_atime, plan.stat().st_mtime + 10))
    (outputs / "tpu-plan" / "v5e-4-b1-cccc.json").write_text("x")
    after = run_files.cache_entries(outputs, "01_x", stems)
    found = run_files.found_from_earlier(before, after)
    assert found == ["01_x/openvino/lesson", "openvino/sd15-fp32", "tpu-plan/v5e-1-b1-bbbb.json"]
    row = {"notebook": "01_x", "status": "ok", "wall_min": 1.0, "children": 0, "found_from_earlier": found}
    row.update({f"{part}_peak_gib": 1.0 for part in ("kernel", "largest_child", "tree")})
    assert "| 01_x/openvino/: 1, openvino/: 1, tpu-plan/: 1 |" in run_summary.format_summary([row])
    del row["found_from_earlier"]  # a row recorded before the runner kept it
    assert "| not recorded |" in run_summary.format_summary([row])
    assert run_files.cache_entries(tmp_path / "none", "01_x", stems) == {}
