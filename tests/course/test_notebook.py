"""sdaccel.course.notebook: the results file every notebook writes, and the known noise it drops."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sdaccel.course.notebook import SETUP_CELL, Results


def test_results_are_written_after_every_key(tmp_path):
    results = Results(tmp_path / "out" / "01_x")
    results["compile_s"] = np.float32(1.5)
    on_disk = json.loads((tmp_path / "out" / "01_x" / "results.json").read_text())
    assert on_disk == {"compile_s": 1.5}
    results.update(path=Path("a/b"), sizes=(1, 2), grid=np.arange(3), nan=math.nan, nested={3: [np.int64(4)]})
    on_disk = json.loads(results.path.read_text())
    assert on_disk == {
        "compile_s": 1.5,
        "path": "a/b",
        "sizes": [1, 2],
        "grid": [0, 1, 2],
        "nan": None,
        "nested": {"3": [4]},
    }
    assert results["sizes"] == [1, 2]
    assert not results.path.with_suffix(".tmp").exists()  # written whole, then moved into place


def test_results_reopen_the_file_key_by_key(tmp_path):
    Results(tmp_path)["a"] = 1
    again = Results(tmp_path)
    again["b"] = 2
    assert json.loads((tmp_path / "results.json").read_text()) == {"a": 1, "b": 2}


def test_save_image_goes_beside_the_results(tmp_path):
    results = Results(tmp_path / "out")
    path = results.save_image("grid.png", Image.new("RGB", (4, 4)))
    assert path == tmp_path / "out" / "grid.png" and Image.open(path).size == (4, 4)


def test_the_setup_cell_is_python():
    compile(SETUP_CELL, "setup", "exec")


def test_quiet_drops_only_the_known_messages(monkeypatch, caplog):
    import logging
    import warnings

    from sdaccel.course.notebook import quiet

    monkeypatch.setenv("FORCE_COLOR", "1")  # what ipykernel sets, and children inherit
    quiet()
    quiet()  # twice adds nothing
    import os

    assert os.environ["TTY_COMPATIBLE"] == "0"
    logger = logging.getLogger("transformers.utils.import_utils")
    assert len(logger.filters) == 1
    with caplog.at_level(logging.WARNING):
        logger.warning("`CLIPImageProcessor` requires torchvision (not installed); falling back to ...")
        logger.warning("`CLIPImageProcessor` something else")
    assert [r.getMessage() for r in caplog.records] == ["`CLIPImageProcessor` something else"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet()
        warnings.warn(
            "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use x",
            FutureWarning,
            stacklevel=1,
        )
        warnings.warn("another deprecation", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["another deprecation"]


def test_the_repository_is_found_beside_the_package_or_in_the_colab_clone(monkeypatch, tmp_path):
    from sdaccel.course import notebook

    root = notebook.repository_root()
    assert (root / "benchmarks" / "bench_openvino.py").is_file() and (root / "src" / "sdaccel").is_dir()
    # a package installed without its repository: the Colab clone, then a clear error
    monkeypatch.setattr(notebook, "__file__", str(tmp_path / "site" / "sdaccel" / "course" / "notebook.py"))
    monkeypatch.setattr(notebook, "CHECKOUT", tmp_path / "clone")
    with pytest.raises(FileNotFoundError, match="clone the repository and install it"):
        notebook.repository_root()
    (tmp_path / "clone" / "benchmarks").mkdir(parents=True)
    assert notebook.repository_root() == tmp_path / "clone"
