"""The TPU plan's files: written whole, read back only when they can be trusted.

A plan file is JSON (:func:`plan_document`): the rows of :func:`sdaccel.tpu.plan_compile.compile_case`,
each under its :func:`plan_key`, with the command that made them, the layout (:data:`PLAN_SCHEMA`)
and the versions of JAX, jaxlib and libtpu. It is written through
:func:`sdaccel.core.staging.replace_text` (:func:`write_plan_file`): a reader finds the old file or
the new one, never a part, and a writer killed in the middle leaves a hidden ``.NAME.*.partial``
that the next writer of the file removes (:func:`partial_patterns`). A file that is cut short, of
another layout, JAX or libtpu, or of another case is never reused (:func:`reusable_rows`): its cases
are compiled again, and it says so. The notebooks keep such files in their plan cache
(:func:`sdaccel.tpu.plan.predict`); ``python -m sdaccel.tools.measure.tpu_plan`` writes the
committed ones (``benchmarks/results/tpu_plan_*.json``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import jax

from sdaccel.core.staging import replace_text
from sdaccel.tpu.plan_compile import ANCHORS, SPARE_BYTES, Case, read_configs

#: The layout of a plan file. A file of another layout is not reused: its cases are compiled again.
PLAN_SCHEMA = 2

#: The end of the name of a plan file's temporary file (``.NAME.<random>.partial``).
PARTIAL = ".partial"

#: The code a compiled plan depends on, beside the configs, the case and the compiler versions.
_PLAN_CODE = (
    "plan_compile.py",
    "topology.py",
    "pipeline.py",
    "sharding.py",
    "schedulers.py",
    "text.py",
    "models",
)


class PlanFileError(ValueError):
    """A plan file that cannot be read: not whole JSON, or not a plan of this package."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(
            f"{path} {reason}: make it again with python -m sdaccel.tools.measure.tpu_plan (the command "
            f"that made it, with --out {path}), or leave it out."
        )


def environment() -> dict:
    """The versions a compiled plan depends on: JAX, jaxlib and libtpu."""

    return {"jax": jax.__version__, "jaxlib": version("jaxlib"), "libtpu": version("libtpu")}


def plan_key(case: Case, source: str | os.PathLike) -> str:
    """A name for the plan of ``case`` on ``source``: a hash of the case, the model configs, the
    JAX and libtpu versions and this package's model and pipeline code. Another of any of them
    is another key, so a cached plan is never stale."""
    package = Path(__file__).parent
    files = sorted(
        f
        for name in _PLAN_CODE
        for f in ([package / name] if name.endswith(".py") else (package / name).rglob("*.py"))
    )
    digest = hashlib.sha256()
    for part in (dataclasses.asdict(case), read_configs(source), environment()):
        digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    for f in files:
        digest.update(f.read_bytes())
    return f"{case.topology}-b{case.batch}-{digest.hexdigest()[:20]}"


def write_plan_file(path: str | os.PathLike, text: str) -> None:
    """Write the plan file (or its Markdown table) ``path`` whole: through a hidden
    ``.NAME.<random>.partial`` beside it, on disk before the rename
    (:func:`sdaccel.core.staging.replace_text`). One that a killed process left is removed by the
    next writer of ``path`` (:func:`partial_patterns`)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, text, suffix=PARTIAL, fault="plan.partial-written", sync=True)


def partial_patterns(*paths: str | os.PathLike) -> tuple[str, ...]:
    """Glob patterns of the temporary files that writes of ``paths`` leave when killed (for
    :func:`sdaccel.core.staging.clear_leftovers`), older versions' ``NAME.partial`` included."""
    names = [Path(p).name for p in paths]
    return tuple(pattern for name in names for pattern in (f".{name}.*{PARTIAL}", f"{name}{PARTIAL}"))


def plan_document(rows: list[dict], command: str) -> dict:
    """What a plan file holds: the rows, the command that made them, the layout and the versions."""
    return {
        "schema": PLAN_SCHEMA,
        "command": command,
        "environment": environment(),
        "anchors": ANCHORS,
        "spare_bytes": SPARE_BYTES,
        "rows": rows,
    }


def as_stored(row: dict) -> dict:
    """``row`` as a plan file gives it back (JSON types), so that a fresh row and a reused one are equal."""
    return json.loads(json.dumps(row, default=str))


def load_plan(path: str | os.PathLike) -> dict:
    """The plan file ``path``, or :class:`PlanFileError` naming it, what is wrong and the fix when
    it is not whole JSON or holds no list of rows."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise PlanFileError(
            path, f"is not whole JSON ({err.msg} at line {err.lineno}): a write of it stopped part-way"
        ) from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if isinstance(data, dict) and rows is None and "topology" in data:
        raise PlanFileError(path, "is of an earlier layout: one bare row, with no versions or key")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise PlanFileError(path, "is not a TPU plan of this package: it holds no list of rows")
    return data


def _versions(env) -> str:
    if not isinstance(env, dict):
        return "unrecorded versions of JAX and libtpu"
    return ", ".join(f"{name} {value}" for name, value in sorted(env.items()))


def reusable_rows(path: str | os.PathLike, want: str | None = None) -> dict[str, dict]:
    """The rows of the plan file ``path`` that may stand for a compile, by :func:`plan_key`.

    None when the file is missing, or when it cannot be trusted: not whole JSON, another layout
    than :data:`PLAN_SCHEMA`, made with another JAX or libtpu, or (``want``: the one key the
    caller needs) without that key. Then one line on stderr names the file and says why its cases
    are compiled again."""
    path = Path(path)
    if not path.is_file():
        return {}
    # 1. Whole, of this layout and these versions
    why, rows = None, {}
    try:
        data = load_plan(path)
    except PlanFileError as err:
        why = err.reason
    else:
        if data.get("schema") != PLAN_SCHEMA:
            why = f"is of another layout (schema {data.get('schema')}; this sdaccel reads {PLAN_SCHEMA})"
        elif data.get("environment") != environment():
            why = f"was made with {_versions(data.get('environment'))}, not {_versions(environment())}"
        else:
            rows = {r["plan_key"]: r for r in data["rows"] if isinstance(r.get("plan_key"), str)}
    # 2. Of the case asked for
    if why is None and want is not None and want not in rows:
        why = f"holds the plan of another case ({', '.join(rows) or 'no key'}), not of {want}"
    if why is not None:
        print(
            f"Not reusing {path}, which {why}; its cases are compiled again and the file is replaced.",
            file=sys.stderr,
        )
        return {}
    return rows
