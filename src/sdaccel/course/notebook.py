"""Small helpers that every notebook uses: where results go, and the shared setup cell.

Each notebook writes what it measured to ``OUTPUT_DIR/results.json`` through :class:`Results`,
as soon as it is measured. The tests read that file, so they assert on what the notebook
really computed. Within one Jupyter session, re-running a cell updates the file key by key. A new
run by ``sdaccel.tools.workshop.run_notebooks`` starts with an empty ``OUTPUT_DIR`` (the earlier one is kept as
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

from sdaccel.core.env import quiet_jax_without_tpu
from sdaccel.course.colab import CHECKOUT, INSTALLER_URL, REPOSITORY

#: The repository's address: the installer clones it on Colab, the README's "Open in Colab" badges
#: point at it, and pyproject.toml's ``[project.urls]`` names it (a test keeps the three equal).
#: Defined in :mod:`sdaccel.course.colab`, which runs before the package is installed.
REPOSITORY_URL = REPOSITORY

#: The first code cell of every notebook (a test checks that they are all this exact text). Where
#: ``sdaccel`` can be imported it does nothing: no network, nothing run. Where it cannot, it fetches
#: the installer :mod:`sdaccel.course.colab` (one file, standard library only) from GitHub and runs it
#: in the kernel: on Colab that installs the course and restarts the runtime when it must; anywhere
#: else it raises an error naming the README's steps and changes nothing.
SETUP_CELL = f"""\
# Setup. On Colab: installs this course (about 2 minutes); if it restarts the runtime, choose Run all again.
# Where sdaccel is installed it does nothing. What it runs on Colab: src/sdaccel/course/colab.py.
from importlib.util import find_spec
from urllib.request import urlopen

INSTALLER = "{INSTALLER_URL}"
if not find_spec("sdaccel"):
    exec(urlopen(INSTALLER).read(), {{"__name__": "__main__"}})"""


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
    - Where libtpu is installed but no TPU is here, JAX stays on the CPU, so that its first call
      does not print libtpu's search for chips (:func:`sdaccel.core.env.quiet_jax_without_tpu`).

    Calling it again adds nothing.
    """
    os.environ["TTY_COMPATIBLE"] = "0"
    quiet_jax_without_tpu()
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


def repository_root() -> Path:
    """The repository's folder, which holds ``benchmarks/`` beside the package: above the installed
    package (``make setup``, an editable install), or the Colab installer's clone
    (:data:`sdaccel.course.colab.CHECKOUT`). A package installed without its repository raises an
    error that says how to get one."""
    package = Path(__file__).resolve().parents[1]  # src/sdaccel
    for root in (package.parents[1], CHECKOUT):
        if (root / "benchmarks").is_dir():
            return root
    raise FileNotFoundError(
        f"No benchmarks/ folder of {REPOSITORY_URL} above {package}: clone the repository and "
        "install it as the README's 'Where to run' says (pip install -e .)."
    )


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
