"""The toy's INT8 recipes replayed on a real-size UNet of the same layout.

An accuracy-controlled search (:mod:`sdaccel.toy.accuracy_control`) or a sensitivity ranking
(:mod:`sdaccel.toy.sensitivity_quality`) on the real SD 1.5 UNet would take hours on 2 cores:
every step scores images. On the trained SD 1.5-layout toy they take minutes, and what they find
is a list of layers to keep in float. The real UNet has the toy's layers under the same names
(the same layout, exported by :mod:`sdaccel.cpu.export`), so the list replays there as plain
post-training INT8 with those layers ignored::

    from sdaccel.cpu.quantize_parts import quantize_ir
    from sdaccel.toy import replayed_recipes

    found = replayed_recipes.found_file("full_int8_accuracy_control", "benchmarks/results")
    knobs = replayed_recipes.knobs("full_int8_accuracy_control", found)
    replayed_recipes.check(unet_xml, "full_int8_accuracy_control", knobs)   # before any work
    quantize_ir(unet_xml, dst_xml, replayed_recipes.RECIPE, calibration, samples, **knobs)

The replayed UNet's speed is the real one; its picture is the toy's, in the file it was found in
(and in ``python -m sdaccel.toy.whole_image_quality``'s rows of the same names).

``full_int8_accuracy_control``
    full INT8 with the operations the search gave back to float, SmoothQuant off as the search
    ran (:func:`sdaccel.cpu.accuracy_control.replay_ignored`);
``full_int8_sensitive_<k>``
    full INT8 with the ``k`` costliest layer groups of the ranking in float
    (:func:`sdaccel.cpu.sensitivity.float_group_patterns`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sdaccel.cpu.accuracy_control import replay_ignored
from sdaccel.cpu.quantize import SENSITIVE_LAYER_PATTERNS, unmatched_patterns
from sdaccel.cpu.sensitivity import float_group_patterns

#: The recipe every replayed one starts from.
RECIPE = "full_int8"
#: The accuracy-controlled recipe's name.
ACCURACY_CONTROL = "full_int8_accuracy_control"
#: The prefix of the sensitivity recipes' names (``full_int8_sensitive_4``: the 4 costliest groups).
SENSITIVE_PREFIX = "full_int8_sensitive_"
#: The replayed recipes of the benchmarks.
NAMES = (ACCURACY_CONTROL, f"{SENSITIVE_PREFIX}4")
#: Where each kind is found by default (in ``benchmarks/results``) and the command that made it. The
#: accuracy control is the 31-prompt search on a CPU with AMX: it met the bound on its 31 judging
#: prompts (1.000, f32 1.000), where the earlier 24-prompt search on AVX2 lost one of 24 when
#: replayed with AMX (``accuracy_control_replay_tiny-shapes-sd15_xeon_amx.json``).
FOUND_IN = {
    ACCURACY_CONTROL: (
        "accuracy_control_31_tiny-shapes-sd15_xeon_amx.json",
        "python -m sdaccel.toy.accuracy_control --checkpoint checkpoints/tiny-shapes-sd15 --prompts 31",
    ),
    SENSITIVE_PREFIX: (
        "sensitivity_tiny-shapes-sd15.json",
        "python -m sdaccel.toy.sensitivity_quality checkpoints/tiny-shapes-sd15",
    ),
}


def kind(name: str) -> str:
    """``name``'s kind, a key of :data:`FOUND_IN`; a clear error for any other name."""
    if name == ACCURACY_CONTROL:
        return ACCURACY_CONTROL
    tail = name[len(SENSITIVE_PREFIX) :] if name.startswith(SENSITIVE_PREFIX) else ""
    if tail.isdigit() and int(tail) >= 1:
        return SENSITIVE_PREFIX
    raise ValueError(
        f"{name!r} is not a replayed recipe: name {ACCURACY_CONTROL!r} or "
        f"'{SENSITIVE_PREFIX}<k>' with k >= 1 (the k costliest groups of the ranking)."
    )


def is_replayed(name: str) -> bool:
    """Whether ``name`` names a replayed recipe."""
    try:
        kind(name)
    except ValueError:
        return False
    return True


def found_file(name: str, results_dir: str | os.PathLike) -> Path:
    """The committed result ``name`` replays by default, in ``results_dir``."""
    return Path(results_dir) / FOUND_IN[kind(name)][0]


def read_found(name: str, path: str | os.PathLike) -> dict:
    """The result at ``path`` that ``name`` replays, checked to be of its kind: a search's
    (``search.reverted``) or a ranking's (``ranking``). A missing file names the command that
    makes it."""
    which = kind(name)
    path = Path(path)
    command = FOUND_IN[which][1]
    if not path.is_file():
        raise FileNotFoundError(
            f"{name} replays {path}, which is not there: make it with `{command} --out {path}`."
        )
    found = json.loads(path.read_text())
    needs = ("search", "reverted") if which == ACCURACY_CONTROL else ("ranking",)
    value = found
    for key in needs:
        if not isinstance(value, dict) or key not in value:
            raise ValueError(f"{path} has no {'.'.join(needs)}: {name} replays a result of `{command}`.")
        value = value[key]
    return found


def knobs(name: str, path: str | os.PathLike) -> dict:
    """The :func:`sdaccel.cpu.quantize_parts.quantize_ir` knobs of recipe :data:`RECIPE` that replay
    ``name`` from the result at ``path``: ``{"ignored": [...]}``, with ``"smooth_quant_alpha":
    None`` for the accuracy control (as its search ran)."""

    found = read_found(name, path)
    if kind(name) == ACCURACY_CONTROL:
        return {"ignored": replay_ignored(found["search"]["reverted"]), "smooth_quant_alpha": None}
    k = int(name[len(SENSITIVE_PREFIX) :])
    return {"ignored": [*SENSITIVE_LAYER_PATTERNS, *float_group_patterns(found["ranking"], k)]}


def kept_in_float(recipe_knobs: dict) -> list[str]:
    """The patterns ``recipe_knobs`` keeps in float beyond the sensitive layers every full INT8
    keeps: the toy's own layers."""

    return [p for p in recipe_knobs["ignored"] if p not in SENSITIVE_LAYER_PATTERNS]


def check(ir, name: str, recipe_knobs: dict) -> None:
    """Refuse to replay ``name`` on ``ir`` (an ``ov.Model`` or an IR path) when the UNet lacks the
    toy's float layers (a UNet of another layout, such as SDXL's, whose first block has no
    attention): an ignored scope would pass over them and quantize everything."""

    missing = unmatched_patterns(ir, kept_in_float(recipe_knobs))
    if missing:
        more = f", nor {len(missing) - 1} more of them" if len(missing) > 1 else ""
        raise ValueError(
            f"{name} keeps in float layers found on the SD 1.5-layout toy; this UNet has no layer "
            f"matching {missing[0]!r}{more}: replay it on a UNet of that layout (SD 1.5)."
        )


def title(name: str, recipe_knobs: dict) -> str:
    """A row title for the replayed recipe: what it keeps in float."""
    n = len(kept_in_float(recipe_knobs))
    if kind(name) == ACCURACY_CONTROL:
        return f"full INT8, accuracy control's {n} operation{'s' * (n != 1)} in float"
    return f"full INT8, {n} most sensitive group{'s' * (n != 1)} in float"
