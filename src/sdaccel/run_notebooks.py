"""Execute every notebook in order through papermill, with a named profile.

    python -m sdaccel.run_notebooks --profile smoke          # tiny checkpoints, 8 simulated devices
    python -m sdaccel.run_notebooks --profile full           # the notebooks' own defaults
    python -m sdaccel.run_notebooks --profile smoke --only 01 --only 02

Profiles:

- ``smoke``: every notebook's own smoke overrides, kept in its metadata under
  ``sdaccel.profiles.smoke`` (small images, few steps, and a small checkpoint: ``{checkpoints}/...``
  names the random-weight ones that ``sdaccel.tiny`` builds, ``{repo}/...`` a folder of this
  repository such as the trained ``checkpoints/tiny-shapes-sdxl``), and a kernel that sees 8
  simulated CPU devices. It is what CI and the tests run.
- ``full``: no overrides: the real models, on whatever hardware this is.

Executed copies go to ``build/<profile>/`` (never into ``notebooks/``), and each notebook writes
its measurements to ``build/<profile>/outputs/<notebook>/results.json``. A notebook whose
executed copy already exists is re-run, and the old copy is kept as ``<name>.previous.ipynb`` so
that a re-run never destroys a result without saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
PROFILES = ("smoke", "full")

#: Environment of the notebook kernels, per profile.
PROFILE_ENV = {
    "smoke": {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "agg",
    },
    "full": {},
}


class NotebookFailed(RuntimeError):
    """A cell raised: the message names the notebook and the cell."""


@dataclass
class Run:
    notebook: Path
    executed: Path
    output_dir: Path
    seconds: float


def discover(notebook_dir: Path = NOTEBOOKS) -> list[Path]:
    """All notebooks, in the order of their number prefix (``00_``, ``01_``...)."""
    return sorted(p for p in notebook_dir.glob("[0-9][0-9]_*.ipynb"))


def select(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    if not only:
        return notebooks
    chosen = [nb for nb in notebooks if any(nb.stem == o or nb.stem.startswith(o + "_") for o in only)]
    missing = [o for o in only if not any(nb.stem == o or nb.stem.startswith(o + "_") for nb in notebooks)]
    if missing:
        raise SystemExit(f"No notebook matches {missing}; the notebooks are {[nb.stem for nb in notebooks]}.")
    return chosen


def profile_parameters(notebook: Path, profile: str, checkpoints: Path, output_dir: Path) -> dict:
    """The papermill parameters of ``notebook`` under ``profile``."""
    if profile not in PROFILES:
        raise SystemExit(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    meta = json.loads(notebook.read_text()).get("metadata", {}).get("sdaccel", {})
    overrides = meta.get("profiles", {}).get(profile, {}) if profile != "full" else {}

    def fill(value):
        if isinstance(value, str):
            return value.replace("{checkpoints}", str(checkpoints)).replace("{repo}", str(REPO))
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    params = {key: fill(value) for key, value in overrides.items()}
    params["OUTPUT_DIR"] = str(output_dir)
    return params


def needed_tiny_checkpoints(notebooks: list[Path]) -> set[str]:
    names: set[str] = set()
    for nb in notebooks:
        names |= set(re.findall(r"\{checkpoints\}/([\w\-]+)", nb.read_text()))
    return names


def _failed_cell(executed: Path) -> str:
    """Index and first line of the cell that raised, read from papermill's executed copy."""
    try:
        nb = json.loads(executed.read_text())
    except (OSError, json.JSONDecodeError):
        return "an unknown cell"
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                first = "".join(cell.get("source", "")).strip().splitlines()
                return f"cell {i} ({first[0][:80] if first else 'empty'!r}): {out.get('ename')}: {out.get('evalue')}"
    return "an unknown cell"


def execute(
    notebook: Path,
    profile: str,
    build_dir: Path,
    checkpoints: Path,
    timeout: int | None = None,
) -> Run:
    """Run one notebook with papermill; raise :class:`NotebookFailed` naming the cell on error."""
    import papermill

    out_dir = build_dir / profile
    executed = out_dir / notebook.name
    output_dir = out_dir / "outputs" / notebook.stem
    params = profile_parameters(notebook, profile, checkpoints, output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if executed.exists():
        previous = executed.with_suffix(".previous.ipynb")
        shutil.copy2(executed, previous)
        print(f"  (kept the earlier executed copy as {previous.relative_to(build_dir.parent)})")
    env_backup = dict(os.environ)
    os.environ.update(PROFILE_ENV[profile])
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(notebook),
            str(executed),
            parameters=params,
            cwd=str(notebook.parent),
            kernel_name="python3",
            progress_bar=False,
            execution_timeout=timeout,
        )
    except Exception as err:  # papermill raises PapermillExecutionError; anything else is also a failure
        raise NotebookFailed(
            f"{notebook.name} failed in {_failed_cell(executed)} (executed copy: {executed})"
        ) from err
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    return Run(notebook, executed, output_dir, time.perf_counter() - start)


def run_all(
    profile: str, only: list[str] | None = None, build_dir: Path | None = None, keep_going: bool = False
):
    build_dir = Path(build_dir or REPO / "build")
    if profile not in PROFILES:
        raise SystemExit(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    notebooks = select(discover(), only)
    checkpoints = build_dir / "checkpoints"
    if profile == "smoke":
        from sdaccel.tiny import ensure_tiny

        for name in sorted(needed_tiny_checkpoints(notebooks)):
            ensure_tiny(checkpoints, name)
    runs, failures = [], []
    for nb in notebooks:
        print(f"[{profile}] {nb.name} ...", flush=True)
        try:
            run = execute(nb, profile, build_dir, checkpoints)
        except NotebookFailed as err:
            print(f"  FAILED: {err}", flush=True)
            failures.append(str(err))
            if not keep_going:
                break
            continue
        runs.append(run)
        print(f"  ok in {run.seconds:.0f} s -> {run.executed.relative_to(build_dir.parent)}", flush=True)
    return runs, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default="smoke", help=f"one of {', '.join(PROFILES)} (default smoke)")
    parser.add_argument("--only", action="append", help="a notebook number or stem, e.g. 01 (repeatable)")
    parser.add_argument("--build-dir", type=Path, default=REPO / "build")
    parser.add_argument("--keep-going", action="store_true", help="run the rest after a failure")
    args = parser.parse_args(argv)
    runs, failures = run_all(args.profile, args.only, args.build_dir, args.keep_going)
    total = sum(r.seconds for r in runs)
    print(f"\n{len(runs)} notebooks ran in {total:.0f} s; {len(failures)} failed.")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
