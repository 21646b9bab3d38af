"""The ending that every measuring command of the toy world shares: the result records the
machine it ran on (with the CPU's ISA tier) and the command that made it, its JSON is written whole
(or not at all, if the run is stopped while it writes), and its table is printed.

Used by the ``main()`` of :mod:`~sdaccel.toy.accuracy_control`, :mod:`~sdaccel.toy.sensitivity_quality`,
:mod:`~sdaccel.toy.deepcache_quality`, :mod:`~sdaccel.toy.tome_quality` and
:mod:`~sdaccel.toy.stack_quality`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from sdaccel.core import env
from sdaccel.core.staging import replace_json, update_json
from sdaccel.cpu.families import isa_tier
from sdaccel.cpu.machine import machine_info


def finish(
    result: dict,
    out: str | Path,
    table: str,
    module: str,
    argv: Sequence[str] | None = None,
    per_checkpoint: bool = False,
) -> dict:
    """Stamp ``result`` with ``"machine"`` and ``"command"`` (``python -m <module> <argv>``, the
    process's own arguments when ``argv`` is None), write it to ``out`` and print ``table``.

    ``per_checkpoint``: ``out`` holds ``{"models": {<checkpoint name>: result, ...}}`` and only this
    checkpoint's entry is replaced (the others are kept); otherwise ``out`` is ``result``."""

    # 1. where and how it was measured
    result["machine"] = {**machine_info(), "isa": isa_tier(env.cpu_features())}
    result["command"] = " ".join(["python -m", module, *(sys.argv[1:] if argv is None else argv)])
    # 2. the JSON, whole or not at all
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if per_checkpoint:
        name = Path(result["checkpoint"]).name
        update_json(out, lambda every: every["models"].update({name: result}), {"models": {}})
    else:
        replace_json(out, result)
    # 3. the table
    print(table)
    print(f"wrote {out}")
    return result
