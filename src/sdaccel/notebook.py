"""Small helpers that every notebook uses: where results go, and the shared setup cell.

Each notebook writes what it measured to ``OUTPUT_DIR/results.json`` through :class:`Results`,
as soon as it is measured. The tests read that file, so they assert on what the notebook
really computed; a re-run updates the file key by key and never silently drops earlier keys.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

#: The first code cell of every notebook (a test checks that they are all this exact text).
#: On Colab or a fresh TPU VM it installs this repository's package and requirements; where
#: ``sdaccel`` is already importable (a set-up checkout, CI) it does nothing.
SETUP_CELL = """\
# Setup: on Colab or a fresh Cloud TPU VM, install this repo's helper package and its pinned
# requirements; where they are already installed (a set-up checkout, CI) this cell does nothing.
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("sdaccel") is None:
    root = next((p for p in (".", "..") if os.path.exists(os.path.join(p, "pyproject.toml"))), None)
    if root is None:  # opened on its own (Colab): fetch the repository first
        root = "sd-fast-tutorial"
        repo = os.environ.get("SDACCEL_REPO", "https://github.com/sdaccel/sd-fast-tutorial.git")
        subprocess.run(["git", "clone", "--depth", "1", repo, root], check=True)
    on_tpu = os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")
    reqs = os.path.join(root, "requirements-tpu.txt" if on_tpu else "requirements-cpu.txt")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", reqs, "-e", root], check=True)
    print("Installed sdaccel; on Colab, restart the runtime once (Runtime > Restart) and run on.")"""


def _jsonable(value):
    """numpy / jax scalars and arrays, Paths and tuples -> plain JSON values (NaN -> None)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return str(value)
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Results:
    """A results file that is rewritten after every ``results[key] = value``.

    >>> results = Results("outputs/01_sdxl_in_jax")
    >>> results["compile_s"] = 12.3
    """

    def __init__(self, output_dir: str | os.PathLike, name: str = "results.json"):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / name
        self.data: dict = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def __setitem__(self, key: str, value) -> None:
        self.data[key] = _jsonable(value)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True))
        tmp.replace(self.path)  # atomic: an interrupted run never leaves half a file

    def __getitem__(self, key: str):
        return self.data[key]

    def update(self, **values) -> None:
        for key, value in values.items():
            self[key] = value

    def save_image(self, name: str, image) -> Path:
        """Save a PIL image next to the results and return its path."""
        path = self.dir / name
        image.save(path)
        return path
