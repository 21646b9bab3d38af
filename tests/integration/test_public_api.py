"""Notebooks import only the public API of each room: every name a notebook imports from
``sdaccel.<room>`` (or from one of its modules) is named in that room's docstring or ``__all__``,
where the room lists its public API under short headings."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOMS = ("core", "tpu", "cpu", "toy", "course")


def public_names(room: str) -> set[str]:
    """Every name the room's ``__init__`` lists: ``__all__``, and each name its docstring quotes
    (``name``, ``module.name``, :func:`~sdaccel.room.module.name`)."""
    package = importlib.import_module(f"sdaccel.{room}")
    quoted = re.findall(r"`+~?([\w.]+)`+", package.__doc__ or "")
    names = set(package.__all__)
    for text in quoted:
        names |= set(text.split("."))
    return names


def notebook_imports(path: Path) -> list[tuple[str, str]]:
    """(room, name) of every ``from sdaccel.<room>[.<module>] import name`` in the notebook's code."""
    code = "\n".join(
        line
        for cell in json.loads(path.read_text())["cells"]
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if not line.lstrip().startswith(("%", "!"))
    )
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sdaccel"):
            parts = node.module.split(".")
            assert len(parts) >= 2 and parts[1] in ROOMS, f"{path.name}: imports {node.module}"
            out += [(parts[1], alias.name) for alias in node.names]
    return out


@pytest.mark.parametrize("room", ROOMS)
def test_every_room_lists_its_public_api_under_headings(room):
    package = importlib.import_module(f"sdaccel.{room}")
    assert package.__doc__ and "\n## " in package.__doc__, f"sdaccel.{room} has no headings"
    assert package.__all__ and len(package.__all__) == len(set(package.__all__))


@pytest.mark.parametrize("notebook", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem[:2])
def test_notebooks_import_only_public_names(notebook):
    imports = notebook_imports(notebook)
    assert imports, "the notebook imports nothing from sdaccel: the parser is broken"
    private = [(room, name) for room, name in imports if name not in public_names(room)]
    assert private == [], f"{notebook.name} imports names its rooms do not list as public"


def test_the_check_fails_on_a_name_a_room_does_not_list(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": ["from sdaccel.cpu.export import _already_exported\n"]}]}
    (tmp_path / "x.ipynb").write_text(json.dumps(nb))
    assert notebook_imports(tmp_path / "x.ipynb") == [("cpu", "_already_exported")]
    assert "_already_exported" not in public_names("cpu")
