"""sdaccel.course's public API: its docstring names each public name by its module, every one of
them resolves, ``__all__`` lists those names (``PUBLIC_NAMES`` each one's module), and importing
the package loads no accelerator framework and none of its modules (most are command lines)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import sdaccel.course as course

ROOM = Path(course.__file__).parent


def test_the_table_knows_every_module_of_the_room():
    assert list(course.MODULES) == sorted(p.stem for p in ROOM.glob("*.py") if p.stem != "__init__")
    assert course.__all__ == list(course.PUBLIC_NAMES)
    for module in course.MODULES:
        assert importlib.import_module(f"sdaccel.course.{module}").__name__ == f"sdaccel.course.{module}"


def test_every_name_the_docstring_lists_resolves():
    doc = course.__doc__
    headings = [
        "## In a notebook",
        "## Running the notebooks",
        "## Before a workshop",
        "## Reports of notebooks 06 and 07",
        "## The demo of notebook 07",
    ]
    assert [doc.index(h) for h in headings] == sorted(doc.index(h) for h in headings)
    named = re.findall(r"`~?sdaccel\.course\.(\w+)\.(\w+)`", doc)
    assert len(named) > 30, "the docstring lists the public names as :func:`~sdaccel.course.<module>.<name>`"
    for module, name in named:
        assert hasattr(importlib.import_module(f"sdaccel.course.{module}"), name), f"{module}.{name}"
    assert set(named) == {(module, name) for name, module in course.PUBLIC_NAMES.items()}


def test_importing_the_package_loads_no_framework_and_none_of_its_modules():
    code = (
        "import json, sys; import sdaccel.course; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'torch', 'openvino')"
        " or m.startswith('sdaccel.course.'))))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []
