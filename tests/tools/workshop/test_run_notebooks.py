"""The notebook runner: profile parameters, selection, failures that name the cell, re-runs that start
empty and keep the earlier results (the profiles themselves: test_run_profiles.py)."""

import json

import nbformat
import pytest

from sdaccel.core import env
from sdaccel.course import run_profiles
from sdaccel.cpu.families import isa_tier
from sdaccel.tools.workshop import run_notebooks
from sdaccel.tools.workshop.run_notebooks import (
    NotebookFailed,
    execute,
    fresh_output_dir,
    profile_parameters,
    select,
)


@pytest.fixture(autouse=True)
def smoke_settings_of_test_notebooks(monkeypatch):
    """The smoke profile of the throw-away notebooks below (``run_profiles.SMOKE`` is keyed by stem)."""
    smoke = dict(run_profiles.SMOKE)
    for stem in ("01_x", "01_good", "02_bad", "01_results", "01_memory", "01_retry"):
        smoke[stem] = {}
    monkeypatch.setattr(run_profiles, "SMOKE", smoke)
    return smoke


def make_notebook(path, body):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('OUTPUT_DIR = "out"\nMODEL_ID = "org/real-model"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *(nbformat.v4.new_code_cell(src) for src in body)]
    nbformat.write(nb, path)
    return path


def test_unknown_profile_is_refused(tmp_path):
    nb = make_notebook(tmp_path / "01_x.ipynb", ["1"])
    with pytest.raises(SystemExit, match="Unknown profile 'fast'.*smoke, full"):
        profile_parameters(nb, "fast", tmp_path, tmp_path / "out")


def test_smoke_parameters_fill_the_checkpoint_folder(tmp_path, smoke_settings_of_test_notebooks):
    from sdaccel.tools.workshop.run_notebooks import REPO

    smoke = {"MODEL_ID": "{checkpoints}/tiny-sdxl", "STEPS": 2, "OTHER": "{repo}/checkpoints/x"}
    smoke_settings_of_test_notebooks["01_x"] = smoke
    nb = make_notebook(tmp_path / "01_x.ipynb", ["1"])
    params = profile_parameters(nb, "smoke", tmp_path / "ckpt", tmp_path / "out")
    assert params == {
        "MODEL_ID": f"{tmp_path}/ckpt/tiny-sdxl",
        "STEPS": 2,
        "OTHER": f"{REPO}/checkpoints/x",
        "OUTPUT_DIR": str(tmp_path / "out"),
    }
    assert profile_parameters(nb, "full", tmp_path, tmp_path / "o") == {"OUTPUT_DIR": str(tmp_path / "o")}
    assert run_notebooks.needed_tiny_checkpoints([nb]) == {"tiny-sdxl"}


def test_only_selects_by_number_and_names_unknown(tmp_path):
    nbs = [tmp_path / "00_a.ipynb", tmp_path / "01_b.ipynb"]
    assert select(nbs, ["01"]) == [nbs[1]]
    with pytest.raises(SystemExit, match="No notebook matches"):
        select(nbs, ["07"])


def test_only_a_kernel_that_ran_no_cell_counts_as_not_started(tmp_path):
    from papermill.exceptions import PapermillExecutionError

    working = make_notebook(tmp_path / "01_x.ipynb", ["1", "2"])
    late = RuntimeError("Kernel didn't respond in 60 seconds")
    assert run_notebooks.kernel_did_not_start(late, working)
    assert run_notebooks.kernel_did_not_start(late, tmp_path / "not-written.ipynb")
    cell_error = PapermillExecutionError(1, 1, "boom", "ValueError", "boom", [])
    assert not run_notebooks.kernel_did_not_start(cell_error, working)
    nb = nbformat.read(working, as_version=4)
    nb.cells[1].execution_count = 1  # a cell ran: its effects may be on disk, so no second kernel
    nbformat.write(nb, working)
    assert not run_notebooks.kernel_did_not_start(late, working)


@pytest.mark.slow
def test_a_kernel_that_does_not_start_is_started_again_once(tmp_path, monkeypatch, capsys):
    """The kernel's ports can be taken between their choice and its bind ("Address already in
    use"): papermill then waits for a kernel that died. The run starts one more, and only one."""
    import papermill

    real, calls = papermill.execute_notebook, []

    def first_kernel_dies(notebook, working, **kwargs):
        calls.append(working)
        if len(calls) == 1:
            nbformat.write(nbformat.read(notebook, as_version=4), working)  # papermill writes it first
            raise RuntimeError("Kernel didn't respond in 60 seconds")
        return real(notebook, working, **kwargs)

    monkeypatch.setattr(papermill, "execute_notebook", first_kernel_dies)
    nb = make_notebook(tmp_path / "01_retry.ipynb", ["print('ran')"])
    run = execute(nb, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    assert len(calls) == 2 and "ran" in run.executed.read_text()
    assert (
        "the kernel did not start: Kernel didn't respond in 60 seconds; starting another"
        in capsys.readouterr().out
    )

    def never_starts(notebook, working, **kwargs):
        calls.append(working)
        raise RuntimeError("Kernel didn't respond in 60 seconds")

    monkeypatch.setattr(papermill, "execute_notebook", never_starts)
    calls.clear()
    with pytest.raises(NotebookFailed, match="failed before it ran a cell"):
        execute(nb, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    assert len(calls) == run_notebooks.KERNEL_START_TRIES == 2


@pytest.mark.slow
def test_failure_names_notebook_and_cell_and_rerun_keeps_old_copy(tmp_path):
    good = make_notebook(
        tmp_path / "01_good.ipynb",
        ["import json, os\nos.makedirs(OUTPUT_DIR, exist_ok=True)\nprint('hello')"],
    )
    run = execute(good, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    assert run.executed.is_file()
    execute(good, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    assert run.executed.with_suffix(".previous.ipynb").is_file(), "a re-run must keep the earlier copy"

    bad = make_notebook(tmp_path / "02_bad.ipynb", ["x = 1", "raise ValueError('boom')"])
    with pytest.raises(
        NotebookFailed, match=r"02_bad.ipynb failed in cell \d+ \([\"']raise ValueError.*ValueError: boom"
    ):
        execute(bad, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)


def test_discover_orders_by_number():
    found = run_notebooks.discover()
    assert [p.name for p in found] == sorted(p.name for p in found)
    assert all(json.loads(p.read_text())["nbformat"] == 4 for p in found)


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


@pytest.mark.slow
def test_a_stale_key_does_not_survive_a_run(tmp_path):
    def notebook_writing(key):
        return make_notebook(
            tmp_path / "01_results.ipynb",
            [
                f"from sdaccel.course.notebook import Results\nresults = Results(OUTPUT_DIR)\nresults[{key!r}] = 1"
            ],
        )

    build = tmp_path / "build"
    first = execute(notebook_writing("old_key"), "smoke", build, tmp_path / "ckpt", timeout=120)
    assert json.loads((first.output_dir / "results.json").read_text()) == {"old_key": 1}
    second = execute(notebook_writing("new_key"), "smoke", build, tmp_path / "ckpt", timeout=120)
    assert json.loads((second.output_dir / "results.json").read_text()) == {"new_key": 1}
    previous = second.output_dir.with_name("01_results.previous")
    assert json.loads((previous / "results.json").read_text()) == {"old_key": 1}


#: A notebook whose kernel holds about 150 MB and starts a child that holds about 300 MB.
MEMORY_CELLS = [
    "kernel_block = bytearray(150 * 2**20)\nimport time\ntime.sleep(1.5)  # long enough to be sampled",
    "import subprocess, sys\n"
    "subprocess.run([sys.executable, '-c', 'import time; b = bytearray(300 * 2**20); time.sleep(2)'], check=True)",
]


@pytest.mark.slow
def test_the_runner_records_wall_time_and_peak_memory(tmp_path, smoke_settings_of_test_notebooks, capsys):
    smoke_settings_of_test_notebooks["01_memory"] = {}
    nb = make_notebook(tmp_path / "01_memory.ipynb", MEMORY_CELLS)
    run = execute(nb, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    memory = run_notebooks.MemoryPeaks(**run.memory)
    assert memory.samples > 2 and memory.children >= 1
    assert memory.kernel_bytes > 150 * 2**20, "the kernel's own high-water mark"
    assert memory.largest_child_bytes > 300 * 2**20 > memory.kernel_bytes - 150 * 2**20
    assert memory.tree_bytes > 300 * 2**20
    # the bytearray is anonymous memory: the child's anonymous peak holds it, the kernel's does not
    assert memory.largest_child_anon_bytes > 290 * 2**20 > memory.kernel_anon_bytes - 150 * 2**20
    assert memory.largest_child_bytes >= memory.largest_child_anon_bytes
    assert memory.tree_anon_bytes >= memory.largest_child_anon_bytes
    assert run.seconds > 2
    # the cell that started the 300 MB child is named first, by its "In [n]" and first line of code
    top = run.cells[0]
    assert (top["cell"], top["line"]) == (4, "import subprocess, sys") and top["tree_anon_gib"] > 0.29
    assert run.cells[1]["cell"] == 3 and run.cells[1]["tree_anon_gib"] < 0.29, run.cells

    row = run_notebooks.summary_row(run, "smoke", "ok")
    assert row["peak_cells"] == run.cells
    assert row["wall_min"] == round(run.seconds / 60, 2) and row["largest_child_peak_gib"] >= 0.29
    assert row["cpu"] == env.cpu_model() and row["isa_tier"] == isa_tier(env.cpu_features())
    path = run_notebooks.write_summary(tmp_path / "build", "smoke", [row])
    assert path == tmp_path / "build" / "smoke" / "summary.json"
    other = {**row, "notebook": "00_other", "status": "failed"}
    run_notebooks.write_summary(tmp_path / "build", "smoke", [other])  # another run: both rows stay
    data = json.loads(path.read_text())
    assert list(data["notebooks"]) == ["00_other", "01_memory"] and data["machine"]["cpus"] >= 1
    table = (path.parent / "summary.md").read_text().splitlines()
    assert table[0].startswith("| notebook | status | wall min | kernel GiB (anonymous) | largest child GiB")
    assert f"| {row['largest_child_peak_gib']:.2f} ({row['largest_child_anon_gib']:.2f}) |" in table[3]
    assert f"| In [4] ({top['tree_anon_gib']:.2f}) |" in table[3]
    assert row["found_from_earlier"] == [] and "| nothing |" in table[3]  # a first run
    assert table[2].startswith("| 00_other | failed |") and table[3].startswith("| 01_memory | ok |")


def test_a_failed_notebook_keeps_its_time_and_memory(tmp_path):
    nb = make_notebook(tmp_path / "02_bad.ipynb", ["raise ValueError('boom')"])
    with pytest.raises(NotebookFailed) as failed:
        execute(nb, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    assert failed.value.run is not None and failed.value.run.seconds > 0
    assert run_notebooks.MemoryPeaks(**failed.value.run.memory).kernel_bytes > 0


def test_the_memory_watch_ignores_processes_of_other_runs(monkeypatch):
    import subprocess
    import sys

    env = {**__import__("os").environ, run_notebooks.RUN_MARKER: "another-run"}
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], env=env)
    try:
        watch = run_notebooks.MemoryWatch("this-run")
        watch.sample()
        assert watch.peaks == run_notebooks.MemoryPeaks(samples=1)
        mine = run_notebooks.MemoryWatch("another-run")
        mine.sample()
        assert mine.peaks.kernel_bytes > 0, "a marked child of this process is the kernel"
    finally:
        other.kill()
        other.wait()


def cell(source: str, start: str | None, outputs=()) -> dict:
    """A code cell as papermill leaves it: its start time (``None``: not started) and outputs."""
    meta = {"papermill": {"start_time": start, "status": "completed"}}
    return {
        "cell_type": "code",
        "source": source,
        "metadata": meta,
        "outputs": list(outputs),
        "execution_count": 7,
    }


def test_a_failure_is_placed_at_the_cell_that_raised_or_else_the_last_one_started(tmp_path):
    executed = tmp_path / "nb.ipynb"
    raised = {"output_type": "error", "ename": "ValueError", "evalue": "bad size"}
    cells = [cell("a = 1", "2026-12-06T07:11:00"), cell("b = a / 0\nmore", "2026-12-06T07:11:33", [raised])]
    executed.write_text(json.dumps({"cells": [*cells, cell("c = 3", None)]}))
    assert run_notebooks.failed_cell(executed) == "cell 1 ('b = a / 0'): ValueError: bad size"
    # a kernel killed (for memory, say) leaves no error output: the last cell that started is named
    cells = [cell("load()", "2026-12-06T07:11:00"), cell("# one UNet call\nrun()", "2026-12-06T07:11:33")]
    executed.write_text(json.dumps({"cells": [*cells, cell("after()", None)]}))
    said = run_notebooks.failed_cell(executed, RuntimeError("Kernel died"))
    assert said.startswith("cell 1 (In [7], '# one UNet call'), the last one that started")
    assert "(RuntimeError: Kernel died)" in said
    assert run_notebooks.failed_cell(tmp_path / "missing.ipynb") == "an unknown cell"


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
    before = run_notebooks.cache_entries(outputs, "01_x", stems)
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
    after = run_notebooks.cache_entries(outputs, "01_x", stems)
    found = run_notebooks.found_from_earlier(before, after)
    assert found == ["01_x/openvino/lesson", "openvino/sd15-fp32", "tpu-plan/v5e-1-b1-bbbb.json"]
    row = {"notebook": "01_x", "status": "ok", "wall_min": 1.0, "children": 0, "found_from_earlier": found}
    row.update({f"{part}_peak_gib": 1.0 for part in ("kernel", "largest_child", "tree")})
    assert "| 01_x/openvino/: 1, openvino/: 1, tpu-plan/: 1 |" in run_notebooks.format_summary([row])
    del row["found_from_earlier"]  # a row recorded before the runner kept it
    assert "| not recorded |" in run_notebooks.format_summary([row])
    assert run_notebooks.cache_entries(tmp_path / "none", "01_x", stems) == {}
