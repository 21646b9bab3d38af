"""One notebook through papermill: profile parameters, a second kernel when the first did not start,
failures that name the cell, and re-runs that start empty and keep the earlier results."""

import json

import nbformat
import pytest

from sdaccel.tools.workshop import discovery, memory_watch
from sdaccel.tools.workshop.discovery import REPO
from sdaccel.tools.workshop.execute import (
    KERNEL_START_TRIES,
    NotebookFailed,
    execute,
    failed_cell,
    kernel_did_not_start,
    profile_parameters,
)

pytestmark = pytest.mark.usefixtures("smoke_settings_of_test_notebooks")


def test_unknown_profile_is_refused(tmp_path, make_notebook):
    nb = make_notebook(tmp_path / "01_x.ipynb", ["1"])
    with pytest.raises(SystemExit, match="Unknown profile 'fast'.*smoke, full"):
        profile_parameters(nb, "fast", tmp_path, tmp_path / "out")


def test_smoke_parameters_fill_the_checkpoint_folder(
    tmp_path, smoke_settings_of_test_notebooks, make_notebook
):
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
    assert discovery.needed_tiny_checkpoints([nb]) == {"tiny-sdxl"}


def test_only_a_kernel_that_ran_no_cell_counts_as_not_started(tmp_path, make_notebook):
    from papermill.exceptions import PapermillExecutionError

    working = make_notebook(tmp_path / "01_x.ipynb", ["1", "2"])
    late = RuntimeError("Kernel didn't respond in 60 seconds")
    assert kernel_did_not_start(late, working)
    assert kernel_did_not_start(late, tmp_path / "not-written.ipynb")
    cell_error = PapermillExecutionError(1, 1, "boom", "ValueError", "boom", [])
    assert not kernel_did_not_start(cell_error, working)
    nb = nbformat.read(working, as_version=4)
    nb.cells[1].execution_count = 1  # a cell ran: its effects may be on disk, so no second kernel
    nbformat.write(nb, working)
    assert not kernel_did_not_start(late, working)


@pytest.mark.slow
def test_a_kernel_that_does_not_start_is_started_again_once(tmp_path, monkeypatch, capsys, make_notebook):
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
    assert len(calls) == KERNEL_START_TRIES == 2


@pytest.mark.slow
def test_failure_names_notebook_and_cell_and_rerun_keeps_old_copy(tmp_path, make_notebook):
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


@pytest.mark.slow
def test_a_stale_key_does_not_survive_a_run(tmp_path, make_notebook):
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


def test_a_failed_notebook_keeps_its_time_and_memory(tmp_path, make_notebook):
    nb = make_notebook(tmp_path / "02_bad.ipynb", ["raise ValueError('boom')"])
    with pytest.raises(NotebookFailed) as failed:
        execute(nb, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    assert failed.value.run is not None and failed.value.run.seconds > 0
    assert memory_watch.MemoryPeaks(**failed.value.run.memory).kernel_bytes > 0


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
    assert failed_cell(executed) == "cell 1 ('b = a / 0'): ValueError: bad size"
    # a kernel killed (for memory, say) leaves no error output: the last cell that started is named
    cells = [cell("load()", "2026-12-06T07:11:00"), cell("# one UNet call\nrun()", "2026-12-06T07:11:33")]
    executed.write_text(json.dumps({"cells": [*cells, cell("after()", None)]}))
    said = failed_cell(executed, RuntimeError("Kernel died"))
    assert said.startswith("cell 1 (In [7], '# one UNet call'), the last one that started")
    assert "(RuntimeError: Kernel died)" in said
    assert failed_cell(tmp_path / "missing.ipynb") == "an unknown cell"
