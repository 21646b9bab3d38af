"""Small helpers that every notebook uses: where results go, and the shared setup cell.

Each notebook writes what it measured to ``OUTPUT_DIR/results.json`` through :class:`Results`,
as soon as it is measured. The tests read that file, so they assert on what the notebook
really computed. Within one Jupyter session, re-running a cell updates the file key by key. A new
run by ``sdaccel.course.run_notebooks`` starts with an empty ``OUTPUT_DIR`` (the earlier one is kept as
``<OUTPUT_DIR>.previous``), so no key of an earlier run can pass for a new result.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import warnings
from pathlib import Path

#: The repository's address: the setup cell clones it on Colab, the README's "Open in Colab"
#: badges point at it, and pyproject.toml's ``[project.urls]`` names it (a test keeps the three equal).
REPOSITORY_URL = "https://github.com/sdaccel/sd-fast-tutorial"

#: The first code cell of every notebook (a test checks that they are all this exact text). It runs
#: before this package is installed, so it repeats :data:`REPOSITORY_URL` as text. On Colab it
#: installs the package and ``requirements-colab.txt`` and, when that replaced a module Colab had
#: already imported, restarts the runtime itself (Colab's known pattern: the kernel kills itself
#: and Colab starts a fresh one). Where ``sdaccel`` is installed it does nothing; anywhere else it
#: names the README's steps.
SETUP_CELL = f"""\
# Setup: on Colab, install this repository's package and requirements-colab.txt (about 2 minutes).
# Where sdaccel is already installed (make setup, a TPU VM set up as in the README) it does nothing.
import importlib
import importlib.util
import os
import subprocess
import sys

REPOSITORY = "{REPOSITORY_URL}"
if importlib.util.find_spec("sdaccel") is None:
    if "google.colab" not in sys.modules:
        raise RuntimeError(
            "The sdaccel package is not installed in this kernel. Follow the README's 'Where to run' "
            "(make setup, then make lab; or pip install -r requirements-cpu.txt -e .)."
        )
    root = "/content/sd-fast-tutorial"
    if not os.path.isdir(root):
        subprocess.run(["git", "clone", "--depth", "1", REPOSITORY, root], check=True)
    on_tpu = os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")
    extra = ["jax[tpu]==0.10.2"] if on_tpu else []
    reqs = [sys.executable, "-m", "pip", "install", "-q", "-r", f"{{root}}/requirements-colab.txt"]
    subprocess.run([*reqs, *extra, root], check=True)
    importlib.invalidate_caches()
    replaced = {{"jax", "jaxlib", "flax", "transformers", "diffusers", "huggingface_hub"}} & set(sys.modules)
    if replaced:  # a module imported before the install is stale: restart once, then Run all again
        print(f"Installed; restarting the runtime ({{sorted(replaced)}} were loaded). Run all again.")
        os.kill(os.getpid(), 9)
    print("Installed sdaccel and requirements-colab.txt; no restart needed.")"""


#: Messages of our libraries that a notebook cannot act on, silenced by :func:`quiet` (by exact
#: text, nothing broader): (logger name or ``"warnings"``, the message's fixed start).
KNOWN_NOISE = (
    # OpenVINO's convert_model walks every property of a transformers model while tracing it,
    # including this deprecated alias; our code never calls it.
    ("warnings", "`is_gradient_checkpointing` is deprecated and will be removed in v6."),
    # the same walk reads `loss_function` of CLIP's text model, which has no loss
    ("transformers.modeling_utils", "`loss_type=None` was set in the config but it is unrecognized."),
    # diffusers' pipeline modules import CLIP's and SigLIP's image processors; we use neither,
    # and torchvision is left out on purpose (PyPI's build fails beside the CPU torch 2.13.0)
    ("transformers.utils.import_utils", "`CLIPImageProcessor` requires torchvision (not installed)"),
    ("transformers.utils.import_utils", "`SiglipImageProcessor` requires torchvision (not installed)"),
    # AutoencoderTiny's config keeps `block_out_channels` (our exporter reads it), and diffusers
    # warns, when it reads such a config back, that the class takes no argument of that name
    ("diffusers.configuration_utils", "The config attributes {'block_out_channels': "),
)


class _DropMessages(logging.Filter):
    def __init__(self, starts: list[str]):
        super().__init__()
        self.starts = tuple(starts)

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.starts)


def quiet() -> None:
    """Keep the notebooks' outputs to what a reader needs (the profile cell of every notebook calls it).

    - Child processes (quantization and timing in ``sdaccel.core.processes``) inherit the kernel's
      ``FORCE_COLOR=1``, which ipykernel sets, and would draw rich's live progress bars (NNCF's)
      as escape codes into the cell; ``TTY_COMPATIBLE=0`` tells rich that their output is no
      terminal, so each bar prints once, finished.
    - The messages of :data:`KNOWN_NOISE`, which no code of ours can avoid, are dropped by exact
      text. Every other warning still shows.

    Calling it again adds nothing.
    """
    os.environ["TTY_COMPATIBLE"] = "0"
    by_logger: dict[str, list[str]] = {}
    for where, start in KNOWN_NOISE:
        if where == "warnings":
            warnings.filterwarnings("ignore", message=re.escape(start))
        else:
            by_logger.setdefault(where, []).append(start)
    for name, starts in by_logger.items():
        logger = logging.getLogger(name)
        logger.filters = [f for f in logger.filters if not isinstance(f, _DropMessages)]
        logger.addFilter(_DropMessages(starts))


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
