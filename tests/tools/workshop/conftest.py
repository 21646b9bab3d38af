"""Fixtures of the notebook runner's tests: throw-away notebooks and their smoke settings."""

import nbformat
import pytest

from sdaccel.course import run_profiles


@pytest.fixture
def smoke_settings_of_test_notebooks(monkeypatch):
    """The smoke profile of the throw-away notebooks of these tests (``run_profiles.SMOKE`` is keyed by
    stem)."""
    smoke = dict(run_profiles.SMOKE)
    for stem in ("01_x", "01_good", "02_bad", "01_results", "01_memory", "01_retry"):
        smoke[stem] = {}
    monkeypatch.setattr(run_profiles, "SMOKE", smoke)
    return smoke


@pytest.fixture
def make_notebook():
    """``make_notebook(path, body)`` writes a notebook with a parameters cell and one code cell per
    source of ``body``, and returns ``path``."""
    return _make_notebook


def _make_notebook(path, body):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('OUTPUT_DIR = "out"\nMODEL_ID = "org/real-model"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *(nbformat.v4.new_code_cell(src) for src in body)]
    nbformat.write(nb, path)
    return path
