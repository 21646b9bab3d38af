"""Installs this course on Colab: what the first code cell of every notebook runs there.

The setup cell (:data:`sdaccel.course.notebook.SETUP_CELL`) first asks whether ``sdaccel`` can be
imported. Where it can (``make setup``, a TPU VM set up as the README says, CI) the cell stops there:
nothing is fetched or run. Where it cannot, the cell cannot import this module either, so it fetches
this one file from the repository on GitHub (:data:`INSTALLER_URL`) and runs it in the notebook's
kernel as ``__main__``, which calls :func:`install`. That is why this file imports nothing but the
standard library.

Fetching this file rather than ``pip install``-ing the package first lets it look where it runs before
anything is installed:

- not on Colab (:func:`on_colab`): it raises :data:`NOT_INSTALLED`, the README's fix, and changes
  nothing (no clone, no pip);
- on Colab: it clones the repository into :data:`CHECKOUT` (notebook 06 runs ``benchmarks/`` from
  there), pip-installs ``requirements-colab.txt`` with the package from that clone (plus ``jax[tpu]``
  of the pinned JAX version on a TPU runtime, :func:`on_tpu`), and, when the install replaced a
  package whose modules the kernel had already imported (:func:`versions` before and after), restarts
  the runtime: the kernel kills itself, Colab starts a fresh one, and Run all again finds ``sdaccel``
  installed.

Running in the kernel, not in a child process, is what lets it print into the cell itself, see the
modules the kernel has loaded, and restart that kernel.
``python -m sdaccel.course.colab`` runs the same steps from a terminal on Colab; a notebook kernel
that was already running then has to be restarted by hand (Runtime > Restart session).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

#: The repository (equal to :data:`sdaccel.course.notebook.REPOSITORY_URL`; this file imports no
#: module of the package, since the setup cell runs it before the package is installed).
REPOSITORY = "https://github.com/sdaccel/sd-fast-tutorial"

#: This file on GitHub: what the setup cell fetches and runs where ``sdaccel`` is not installed.
INSTALLER_URL = f"{REPOSITORY}/raw/main/src/sdaccel/course/colab.py"

#: Where the repository is cloned on Colab (notebook 06 finds ``benchmarks/`` there).
CHECKOUT = Path("/content/sd-fast-tutorial")

#: What :func:`install` raises outside Colab, before doing anything.
NOT_INSTALLED = (
    "The sdaccel package is not installed in this kernel, and this is not Colab, where the setup cell "
    "would install it. Follow the README's 'Where to run' (make setup, then make lab; or "
    "pip install -r requirements-cpu.txt -e .), then run the notebook in that environment's kernel."
)


def on_colab() -> bool:
    """Whether this runs on a Colab runtime: in its kernel (which imports ``google.colab``) or in a
    process started there (Colab sets ``COLAB_RELEASE_TAG``)."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def on_tpu() -> bool:
    """Whether this runtime has a TPU: the device file of one, ``/dev/accel0`` or ``/dev/vfio/0``."""
    return os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")


def tpu_extra(requirements: Path) -> str:
    """``jax[tpu]`` pinned to the JAX version of ``requirements`` (the extra pulls the matching libtpu)."""
    pin = re.search(r"^jax==([^\s;#]+)", Path(requirements).read_text(), re.MULTILINE)
    if pin is None:
        raise ValueError(f"{requirements} pins no jax version")
    return f"jax[tpu]=={pin.group(1)}"


def clone_command(checkout: Path) -> list[str]:
    """The shallow clone of the repository into ``checkout``."""
    return ["git", "clone", "--depth", "1", REPOSITORY, str(checkout)]


def pip_command(checkout: Path, tpu: bool) -> list[str]:
    """One pip install of the clone's ``requirements-colab.txt``, ``jax[tpu]`` of its JAX pin when
    ``tpu``, and the package from ``checkout``."""
    requirements = checkout / "requirements-colab.txt"
    extra = [tpu_extra(requirements)] if tpu else []
    return [sys.executable, "-m", "pip", "install", "-q", "-r", str(requirements), *extra, str(checkout)]


def loaded_distributions(modules: Iterable[str]) -> list[str]:
    """The installed distributions that provide ``modules`` (dotted names count as their top level);
    standard-library modules have none."""
    providers = importlib.metadata.packages_distributions()
    tops = {name.partition(".")[0] for name in modules} & providers.keys()
    return sorted({dist for top in tops for dist in providers[top]})


def versions(distributions: Iterable[str]) -> dict[str, str | None]:
    """The installed version of each of ``distributions`` (``None``: not installed), read afresh."""
    importlib.invalidate_caches()
    found: dict[str, str | None] = {}
    for dist in distributions:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


def run(command: list[str]) -> None:
    """Run ``command`` quietly; on failure raise with the end of its output, so that the cell shows why."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise RuntimeError(f"{' '.join(command)} failed with exit status {done.returncode}:\n{output}")


def restart(stale: list[str]) -> None:
    """Restart the Colab runtime from its kernel: the kernel kills itself and Colab starts a fresh one."""
    print(
        f"Installed; restarting the runtime, since the install replaced {', '.join(stale)}, which this "
        "kernel had already imported. Then choose Run all again.",
        flush=True,
    )
    time.sleep(1)  # let the message reach the notebook before the kernel goes
    os.kill(os.getpid(), signal.SIGKILL)


def install(checkout: Path | None = None) -> list[str]:
    """Install this course on Colab, as the module's docstring says; anywhere else raise
    :data:`NOT_INSTALLED` before running anything. Returns the distributions the install replaced
    while this process had them imported; in a notebook's kernel, when there are any, it restarts
    the runtime instead of returning. ``checkout``: where to clone (default :data:`CHECKOUT`)."""
    if not on_colab():
        raise RuntimeError(NOT_INSTALLED)
    checkout = CHECKOUT if checkout is None else Path(checkout)
    print(f"Installing this course from {REPOSITORY} (about 2 minutes) ...", flush=True)
    if not checkout.is_dir():
        run(clone_command(checkout))
    loaded = loaded_distributions(list(sys.modules))
    before = versions(loaded)
    run(pip_command(checkout, tpu=on_tpu()))
    after = versions(loaded)
    stale = [dist for dist in loaded if after[dist] != before[dist]]
    in_kernel = "ipykernel" in sys.modules
    if stale and in_kernel:
        restart(stale)
    elif in_kernel:
        print("Installed sdaccel and requirements-colab.txt; no restart needed.")
    else:
        print("Installed. Restart any notebook kernel that was already running (Runtime > Restart session).")
    return stale


def main() -> None:
    install()


if __name__ == "__main__":
    main()  # no SystemExit: in a notebook's kernel IPython would show it as an error
