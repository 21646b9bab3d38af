"""The summary of a profile's runs, beside its executed copies: one row per notebook in
``build/<profile>/summary.json`` (status, wall time, peak memory, what it found from earlier runs,
the machine), and the same rows as a Markdown table in ``summary.md``."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import psutil

from sdaccel.core import env
from sdaccel.core.staging import replace_text, update_json
from sdaccel.course import run_profiles
from sdaccel.cpu.families import isa_tier
from sdaccel.tools.workshop.discovery import REPO
from sdaccel.tools.workshop.execute import Run
from sdaccel.tools.workshop.memory_watch import MemoryPeaks

#: the same rows as a table (Markdown).
SUMMARY_JSON, SUMMARY_TABLE = "summary.json", "summary.md"


def summary_row(run: Run, profile: str, status: str) -> dict:
    """A notebook's row of the summary: status, wall minutes, peak GiB, and the overrides used."""
    memory = MemoryPeaks(**(run.memory or {}))
    gib = 2**30
    return {
        "notebook": run.notebook.stem,
        "status": status,
        "started": round(run.started, 1),
        "wall_min": round(run.seconds / 60, 2),
        "kernel_peak_gib": round(memory.kernel_bytes / gib, 2),
        "largest_child_peak_gib": round(memory.largest_child_bytes / gib, 2),
        "tree_peak_gib": round(memory.tree_bytes / gib, 2),
        "kernel_anon_gib": round(memory.kernel_anon_bytes / gib, 2),
        "largest_child_anon_gib": round(memory.largest_child_anon_bytes / gib, 2),
        "tree_anon_gib": round(memory.tree_anon_bytes / gib, 2),
        "children": memory.children,
        "peak_cells": run.cells,
        "found_from_earlier": run.found,
        "overrides": _profile_table(profile).get(run.notebook.stem, {}),  # as written ({repo}, {checkpoints})
        **machine_row(),  # per row: a profile's rows may come from runs on different machines
    }


def machine_row() -> dict:
    """What ran a notebook: the CPU's model and ISA tier (every CPU time is named by them), its
    cores, and the commit of this repository (``-dirty`` after it where files had changed since;
    ``None`` outside a git checkout)."""

    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],  # "-dirty": with changes not committed
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no git, or not in time
        commit = ""
    return {
        "cpu": env.cpu_model(),
        "isa_tier": isa_tier(env.cpu_features()),
        "cpus": os.cpu_count(),
        "commit": commit or None,
    }


def _profile_table(profile: str) -> dict:
    return {"smoke": run_profiles.SMOKE, "rehearsal": run_profiles.REHEARSAL}.get(profile, {})


def format_summary(rows: list[dict]) -> str:
    """The rows as a Markdown table: wall minutes and the peaks of the kernel, its largest child
    and the whole tree, in GiB, each with its anonymous part in brackets (``-`` where a row was
    recorded without it), the cell during which the tree held the most anonymous memory (its "In
    [n]" and GiB; ``-`` for a row recorded without it), what it started with from earlier runs
    (:func:`~sdaccel.tools.workshop.run_files.found_from_earlier`, counted per folder: a row that did
    is not a first run's time; "not recorded" for a row recorded without it), and the CPU that ran
    it."""
    lines = [
        "| notebook | status | wall min | kernel GiB (anonymous) | largest child GiB (anonymous) "
        "| tree GiB (anonymous) | children | cell with the most (GiB) | started with, from earlier runs "
        "| CPU (ISA tier), cores |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        cpu = f"{r.get('cpu', '?')} ({r.get('isa_tier', '?')}), {r.get('cpus', '?')}"
        lines.append(
            f"| {r['notebook']} | {r['status']} | {r['wall_min']:.1f} | {_peak(r, 'kernel')} | "
            f"{_peak(r, 'largest_child')} | {_peak(r, 'tree')} | {r['children']} | {_top_cell(r)} | "
            f"{_found(r)} | {cpu} |"
        )
    return "\n".join(lines)


def _found(row: dict) -> str:
    if row.get("found_from_earlier") is None:
        return "not recorded"
    folders = Counter(path.rsplit("/", 1)[0] for path in row["found_from_earlier"])
    return ", ".join(f"{folder}/: {n}" for folder, n in sorted(folders.items())) or "nothing"


def _top_cell(row: dict) -> str:
    cells = row.get("peak_cells")
    return f"In [{cells[0]['cell']}] ({cells[0]['tree_anon_gib']:.2f})" if cells else "-"


def _peak(row: dict, part: str) -> str:
    anon = row.get(f"{part}_anon_gib")
    return f"{row[f'{part}_peak_gib']:.2f} ({'-' if anon is None else f'{anon:.2f}'})"


def write_summary(build_dir: Path, profile: str, rows: list[dict]) -> Path:
    """Add ``rows`` to ``build/<profile>/summary.json`` (a notebook run again replaces its row; the
    others stay), then write all of its rows as ``summary.md``. Returns the JSON's path."""
    folder = Path(build_dir) / profile
    path = folder / SUMMARY_JSON

    def merge(data: dict) -> None:
        data["profile"] = profile
        data.setdefault("machine", {}).update(cpus=os.cpu_count(), memory_gib=_memory_gib())
        notebooks = data.setdefault("notebooks", {})
        notebooks.update({r["notebook"]: r for r in rows})
        data["notebooks"] = dict(sorted(notebooks.items()))

    data = update_json(path, merge)
    replace_text(folder / SUMMARY_TABLE, format_summary(list(data["notebooks"].values())) + "\n")
    return path


def _memory_gib() -> float:

    return round(psutil.virtual_memory().total / 2**30, 1)
