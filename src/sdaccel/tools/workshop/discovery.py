"""Which notebooks the runner executes, in which order, and under which profiles: the notebooks'
folder, their discovery by number prefix, a selection by ``--only``, and the tiny checkpoints a
selection needs. The profiles themselves are :mod:`sdaccel.course.run_profiles`."""

from __future__ import annotations

from pathlib import Path

from sdaccel.course import run_profiles

REPO = run_profiles.REPO
NOTEBOOKS = REPO / "notebooks"
PROFILES = run_profiles.PROFILES

#: Environment of the notebook kernels, per profile.
PROFILE_ENV = run_profiles.KERNEL_ENV


def discover(notebook_dir: Path = NOTEBOOKS) -> list[Path]:
    """All notebooks, in the order of their number prefix (``00_``, ``01_``...; an appendix such as
    ``05b_`` runs right after its notebook ``05_``)."""
    return sorted(p for p in notebook_dir.glob("[0-9][0-9]*_*.ipynb"))


def select(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    if not only:
        return notebooks
    chosen = [nb for nb in notebooks if any(nb.stem == o or nb.stem.startswith(o + "_") for o in only)]
    missing = [o for o in only if not any(nb.stem == o or nb.stem.startswith(o + "_") for nb in notebooks)]
    if missing:
        raise SystemExit(f"No notebook matches {missing}; the notebooks are {[nb.stem for nb in notebooks]}.")
    return chosen


def needed_tiny_checkpoints(notebooks: list[Path]) -> set[str]:
    names: set[str] = set()
    for nb in notebooks:
        names |= run_profiles.tiny_checkpoints_needed(nb.stem)
    return names
