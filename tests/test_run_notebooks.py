"""The notebook runner: profiles, selection, failures that name the cell, re-runs that keep results."""

import json

import nbformat
import pytest

from sdaccel import run_notebooks
from sdaccel.run_notebooks import NotebookFailed, execute, profile_parameters, select


def make_notebook(path, body, smoke=None):
    nb = nbformat.v4.new_notebook()
    nb.metadata["sdaccel"] = {"profiles": {"smoke": smoke or {}}}
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


def test_smoke_parameters_fill_the_checkpoint_folder(tmp_path):
    from sdaccel.run_notebooks import REPO

    smoke = {"MODEL_ID": "{checkpoints}/tiny-sdxl", "STEPS": 2, "OTHER": "{repo}/checkpoints/x"}
    nb = make_notebook(tmp_path / "01_x.ipynb", ["1"], smoke=smoke)
    params = profile_parameters(nb, "smoke", tmp_path / "ckpt", tmp_path / "out")
    assert params == {
        "MODEL_ID": f"{tmp_path}/ckpt/tiny-sdxl",
        "STEPS": 2,
        "OTHER": f"{REPO}/checkpoints/x",
        "OUTPUT_DIR": str(tmp_path / "out"),
    }
    assert profile_parameters(nb, "full", tmp_path, tmp_path / "o") == {"OUTPUT_DIR": str(tmp_path / "o")}


def test_only_selects_by_number_and_names_unknown(tmp_path):
    nbs = [tmp_path / "00_a.ipynb", tmp_path / "01_b.ipynb"]
    assert select(nbs, ["01"]) == [nbs[1]]
    with pytest.raises(SystemExit, match="No notebook matches"):
        select(nbs, ["07"])


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
