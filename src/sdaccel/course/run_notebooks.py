"""Execute every notebook in order through papermill, with a named profile.

    python -m sdaccel.course.run_notebooks --profile smoke          # tiny checkpoints, 8 simulated devices
    python -m sdaccel.course.run_notebooks --profile full           # the notebooks' own defaults
    python -m sdaccel.course.run_notebooks --profile smoke --only 01 --only 02

Profiles (``sdaccel.course.run_profiles``, the one place that defines them, also for ``make lab``):

- ``smoke``: each notebook's smoke overrides (:data:`sdaccel.course.run_profiles.SMOKE`: small images, few
  steps, and the trained 1 M-parameter checkpoints ``checkpoints/tiny-shapes-*``), injected by
  papermill, and a kernel that sees 8 simulated CPU devices. It is what CI and the tests run.
- ``full``: no overrides: the real models, on whatever hardware this is.

Executed copies go to ``build/<profile>/`` (never into ``notebooks/``), and each notebook writes
its measurements to ``build/<profile>/outputs/<notebook>/results.json``.

Every run starts from an empty output folder, so a key that a notebook no longer writes cannot
survive from an earlier run. Nothing is lost either: a re-run keeps the earlier executed copy as
``<name>.previous.ipynb`` and moves the earlier output folder whole to ``outputs/<notebook>.previous/``.
Only the folders in :data:`REUSED` come back into the new folder. The OpenVINO exports that
notebooks 04-06 share are not in any notebook's folder but in ``outputs/openvino/`` (one per
checkpoint and weight precision, :func:`sdaccel.cpu.export.default_export_dir`): a re-run finds
them and reuses them, and ``export_pipeline`` refuses one made from another checkpoint.

The executed copies keep no ipywidgets state: each progress bar is replaced by its final text
(:func:`drop_widget_state`).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sdaccel.core.staging import replace_text
from sdaccel.course import run_profiles

REPO = run_profiles.REPO
NOTEBOOKS = REPO / "notebooks"
PROFILES = run_profiles.PROFILES

#: Environment of the notebook kernels, per profile.
PROFILE_ENV = run_profiles.KERNEL_ENV


#: Subfolders of a notebook's output folder that a re-run reuses: an OpenVINO export kept there
#: (``EXPORT_DIR`` set to one), which ``export_pipeline`` reuses only when complete and exported
#: from the same source (and re-exports otherwise). Everything else starts empty on every run.
REUSED = ("openvino",)


#: Standard-error text that an executed notebook may show (each an exact start). Everything else
#: on stderr is noise that a reader has to ignore, and :func:`noisy_outputs` reports it.
ALLOWED_STDERR: tuple[str, ...] = ()
#: Terminal control other than colours (``ESC[...m``, which Jupyter and the docs render, e.g. in
#: ``jax.debug.visualize_array_sharding``): cursor moves and line erases of live progress bars.
_CONTROL = re.compile(r"\x1b\[(?![\d;]*m)")
_WARNING = re.compile(r"\b[A-Z]\w*Warning\b|^WARNING\b|warnings\.warn\(", re.M)

#: Phrases of development notes that have no place in a notebook a reader runs (a test checks the
#: notebooks and their executed copies; lower case, matched case-insensitively).
BANNED_PHRASES = (
    "the issue",
    "issue's",
    "target (",
    "speed target",
    "load average",
    "development vm",
    "development machine",
    "shared with other jobs",
    "this project's machine",
    "shared 2-core vm",
    "this machine",
)

#: Where Jupyter saves the state of ipywidgets (tqdm's and rich's live progress bars), and the
#: output that shows one of them.
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def noisy_outputs(nb: dict) -> list[str]:
    """Outputs of an executed notebook (as JSON) that a reader would have to ignore: standard error
    outside :data:`ALLOWED_STDERR`, terminal control codes (live progress bars), warning text, and
    saved widget state (:func:`saved_widget_state`: without a widget manager it reads "Loading
    widget..."; the runner replaces it by text). One line each."""
    problems = saved_widget_state(nb)
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                text = "".join(out.get("data", {}).get("text/plain", ""))
            else:
                continue
            if out.get("name") == "stderr" and text.strip() and not text.lstrip().startswith(ALLOWED_STDERR):
                problems.append(f"cell {i}: stderr {text.strip()[:160]!r}")
            elif _CONTROL.search(text):
                problems.append(f"cell {i}: terminal control codes {text.strip()[:80]!r}")
            elif _WARNING.search(text):
                problems.append(f"cell {i}: warning {text.strip()[:160]!r}")
    return problems


def cells_without_figures(nb: dict) -> list[int]:
    """Indices of the code cells that call ``plt.show()`` at their top level but have no
    ``image/png`` output (the figure was drawn but not shown inline)."""
    missing = []
    for i, cell in enumerate(nb.get("cells", [])):
        src = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "code" and re.search(r"^plt\.show\(\)", src, re.M):
            if not any("image/png" in out.get("data", {}) for out in cell.get("outputs", [])):
                missing.append(i)
    return missing


def banned_phrases(nb: dict) -> list[str]:
    """``cell i: phrase`` for each :data:`BANNED_PHRASES` in a notebook's sources and text outputs."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        texts = ["".join(cell.get("source", ""))]
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            for kind in ("text/plain", "text/markdown", "text/html"):
                texts.append("".join(out.get("data", {}).get(kind, "")))
        lowered = "\n".join(texts).lower()
        found += [f"cell {i}: {phrase!r}" for phrase in BANNED_PHRASES if phrase in lowered]
    return found


def saved_widget_state(nb: dict) -> list[str]:
    """What an executed notebook (as JSON) keeps of ipywidgets: saved widget state in its metadata,
    and outputs that only a widget manager can draw. One line each; an empty list when clean."""
    found = ["metadata: saved widget state"] if nb.get("metadata", {}).get("widgets") else []
    for i, cell in enumerate(nb.get("cells", [])):
        if any(WIDGET_VIEW in out.get("data", {}) for out in cell.get("outputs", [])):
            found.append(f"cell {i}: widget output")
    return found


def _widget_text(model_id: str, state: dict) -> list[dict] | None:
    """The outputs that stand for one widget, as text, from its saved final state: a tqdm bar
    (an HBox of label, progress and counter) as tqdm prints it in a terminal; a rich live display
    (an Output widget) as the outputs it captured. ``None`` for any other widget."""
    model = state.get(model_id, {})
    fields = model.get("state", {})
    if model.get("model_name") == "OutputModel":
        return [dict(out) for out in fields.get("outputs", [])]
    if model.get("model_name") != "HBoxModel":
        return None
    parts = [state.get(c.removeprefix("IPY_MODEL_"), {}) for c in fields.get("children", [])]
    if [p.get("model_name") for p in parts] != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, bar, right = (p.get("state", {}) for p in parts)
    total, value = bar.get("max") or 0, bar.get("value") or 0
    filled = int(10 * value / total) if total else 0
    text = f"{left.get('value', '')}|{'█' * filled}{' ' * (10 - filled)}|{right.get('value', '')}"
    text = html.unescape(text).replace("\u2007", " ")
    return [{"output_type": "display_data", "data": {"text/plain": text}, "metadata": {}}]


def drop_widget_state(nb: dict) -> dict:
    """An executed notebook (as JSON) without saved widget state, each widget output replaced by
    its final state as text (:func:`_widget_text`), or by its own ``text/plain`` where that cannot
    be read. The state (up to 130 KB of progress bars per notebook) needs a widget manager's
    JavaScript to show at all; the text shows everywhere, in the docs as a literal block. Empty
    outputs that rich leaves behind (``<pre></pre>`` with no text) go too."""
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.get("cells", []):
        outputs = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                text = _widget_text(data[WIDGET_VIEW].get("model_id", ""), state)
                if text is None:
                    plain = {k: v for k, v in data.items() if k == "text/plain"}
                    text = [{**out, "data": plain}] if plain else []
                outputs += text
            elif (
                out.get("output_type") == "display_data"
                and not "".join(data.get("text/plain", "")).strip()
                and re.fullmatch(r"\s*<pre[^>]*>\s*</pre>\s*", "".join(data.get("text/html", "")) or "x")
            ):
                continue
            else:
                outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


def _drop_widget_state_in(executed: Path) -> None:
    """:func:`drop_widget_state` of an executed copy on disk (rewritten atomically)."""
    try:
        nb = json.loads(executed.read_text())
    except (OSError, json.JSONDecodeError):
        return
    replace_text(executed, json.dumps(drop_widget_state(nb), indent=1, ensure_ascii=False) + "\n")


class NotebookFailed(RuntimeError):
    """A cell raised: the message names the notebook and the cell."""


@dataclass
class Run:
    notebook: Path
    executed: Path
    output_dir: Path
    seconds: float
    started: float = 0.0  #: wall-clock time (``time.time()``) when the execution began


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
    """The papermill parameters of ``notebook`` under ``profile``: :func:`sdaccel.course.run_profiles.overrides`
    and the output folder."""
    if profile not in PROFILES:
        raise SystemExit(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    params = run_profiles.overrides(notebook.stem, profile, checkpoints)
    params["OUTPUT_DIR"] = str(output_dir)
    return params


def needed_tiny_checkpoints(notebooks: list[Path]) -> set[str]:
    names: set[str] = set()
    for nb in notebooks:
        names |= run_profiles.tiny_checkpoints_needed(nb.stem)
    return names


def fresh_output_dir(output_dir: Path) -> Path | None:
    """Empty ``output_dir`` for a new run without losing the last one's results.

    An existing folder is moved whole to ``<output_dir>.previous`` (replacing an older one), and
    the reusable exports of :data:`REUSED` are moved back. Returns the previous folder, or
    ``None`` when there was none. Within one Jupyter session, ``Results`` still updates
    ``results.json`` key by key; only a new run by this runner starts empty.
    """
    previous = output_dir.with_name(output_dir.name + ".previous")
    if not output_dir.exists():
        output_dir.mkdir(parents=True)
        return None
    shutil.rmtree(previous, ignore_errors=True)
    output_dir.rename(previous)
    output_dir.mkdir()
    for name in REUSED:
        if (previous / name).exists():
            (previous / name).rename(output_dir / name)
    return previous


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
    previous_outputs = fresh_output_dir(output_dir)
    if previous_outputs is not None:
        print(f"  (moved the earlier outputs to {previous_outputs.relative_to(build_dir.parent)})")
    env_backup = dict(os.environ)
    # the kernel's profile cell (sdaccel.course.run_profiles.start) reads the same profile and checkpoints
    os.environ.update({**PROFILE_ENV[profile], run_profiles.CHECKPOINTS_VAR: str(checkpoints)})
    started, start = time.time(), time.perf_counter()
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
        _drop_widget_state_in(executed)  # the executed copy is documentation: text, not widget state
    return Run(notebook, executed, output_dir, time.perf_counter() - start, started)


def run_all(
    profile: str, only: list[str] | None = None, build_dir: Path | None = None, keep_going: bool = False
):
    build_dir = Path(build_dir or REPO / "build")
    if profile not in PROFILES:
        raise SystemExit(f"Unknown profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    notebooks = select(discover(), only)
    checkpoints = build_dir / "checkpoints"
    if profile == "smoke":
        from sdaccel.toy.random_checkpoints import ensure_tiny

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
        executed = json.loads(run.executed.read_text())
        for problem in noisy_outputs(executed) + [
            f"cell {i}: no inline figure" for i in cells_without_figures(executed)
        ]:
            print(f"  note: {problem}", flush=True)
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
