"""Notebooks use only the public API of each room: every name a notebook imports from
``sdaccel.<room>`` (or from one of its modules), and every attribute it reads off a module of a room
(``from sdaccel.tpu import sharding as sh`` then ``sh.spec_for``), is in that room's ``__all__``
(or, for a name several modules define, the room's ``SHARED_NAMES`` table under that module). Every room
keeps its names in a table, name -> module, that resolves. And the CPU track's notebooks (04 to 06)
import no JAX."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sdaccel.tools.workshop.reach import notebook_code

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
ROOMS = ("core", "tpu", "cpu", "toy", "course")
#: The rooms whose names are imported on first use (``PUBLIC_NAMES``: name -> module).
LAZY_ROOMS = ("core", "tpu", "cpu", "toy", "course")
#: The CPU track: OpenVINO only (07 compares both tracks and runs JAX too).
CPU_TRACK = ("04", "05", "06")


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` (``sdaccel.cpu.quality``) is a module or package of src/, read from disk."""
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def notebook_uses(source: str) -> list[tuple[str, str, str]]:
    """(room, module, name) of every name the code takes from sdaccel: ``from sdaccel.<room> import
    name`` gives ``(room, "", name)``; ``from sdaccel.<room>.<module> import name`` and an attribute
    read off a module bound by an import (``quality.compare_images``, ``sh.spec_for``) give
    ``(room, module, name)``, ``module`` relative to the room (``models.weights``). An imported
    module is bound, not listed."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the sdaccel module it is
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname: a.name for a in node.names if a.name.startswith("sdaccel.") and a.asname}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sdaccel"):
            parts = node.module.split(".")
            assert len(parts) >= 2 and parts[1] in ROOMS, f"imports {node.module}"
            for alias in node.names:
                if is_module(f"{node.module}.{alias.name}"):
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                else:
                    out.append((parts[1], ".".join(parts[2:]), alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            parts = bound[node.value.id].split(".")
            if len(parts) >= 3:  # a module of a room, not the room itself
                out.append((parts[1], ".".join(parts[2:]), node.attr))
    return out


def room_table(room: str) -> dict[str, str]:
    """Public name -> the module of the room it comes from (relative: ``models.weights``): the
    room's ``PUBLIC_NAMES``, and the names its ``__init__`` imports from its modules."""
    package = importlib.import_module(f"sdaccel.{room}")
    table = dict(getattr(package, "PUBLIC_NAMES", {}))
    for node in ast.parse(Path(package.__file__).read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"sdaccel.{room}."):
            table |= {alias.name: node.module.split(".", 2)[2] for alias in node.names}
    return table


def is_public(room: str, module: str, name: str) -> bool:
    """``from sdaccel.<room> import name``: ``name`` is in the room's ``__all__``. ``module.name``:
    the room lists ``name`` as public from that module, or its ``SHARED_NAMES`` lists ``name``
    under ``module`` (a name several modules define)."""
    package = importlib.import_module(f"sdaccel.{room}")
    if not module:
        return name in package.__all__
    if module in getattr(package, "SHARED_NAMES", {}).get(name, ()):
        return True
    return name in package.__all__ and room_table(room).get(name) == module


@pytest.mark.parametrize("room", ROOMS)
def test_every_room_lists_its_public_api_under_headings(room):
    package = importlib.import_module(f"sdaccel.{room}")
    assert package.__doc__ and "\n## " in package.__doc__, f"sdaccel.{room} has no headings"
    assert package.__all__ and len(package.__all__) == len(set(package.__all__))


@pytest.mark.parametrize("room", LAZY_ROOMS)
def test_every_name_of_the_table_resolves_from_the_room_and_its_module(room):
    package = importlib.import_module(f"sdaccel.{room}")
    assert set(package.PUBLIC_NAMES) <= set(package.__all__)
    for name, module in package.PUBLIC_NAMES.items():
        defined = importlib.import_module(f"sdaccel.{room}.{module}")
        assert getattr(package, name) is getattr(defined, name), f"sdaccel.{room}.{name}"
    for name, modules in getattr(package, "SHARED_NAMES", {}).items():
        assert name not in package.PUBLIC_NAMES
        for module in modules:
            assert hasattr(importlib.import_module(f"sdaccel.{room}.{module}"), name), f"{module}.{name}"
    assert set(package.PUBLIC_NAMES) <= set(dir(package))


@pytest.mark.parametrize("room", ("core", "cpu", "toy", "course"))
def test_the_table_knows_every_module_of_the_room(room):
    package = importlib.import_module(f"sdaccel.{room}")
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert set(package.MODULES) == modules
    assert not set(package.__all__) & modules, "the room's __all__ lists names, not its modules"
    listed = set(package.PUBLIC_NAMES.values()) | {
        m for ms in getattr(package, "SHARED_NAMES", {}).values() for m in ms
    }
    assert listed <= modules


@pytest.mark.parametrize(
    "notebook", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem.split("_")[0]
)
def test_notebooks_use_only_public_names(notebook):
    uses = notebook_uses(notebook_code(notebook))
    assert uses, "the notebook uses nothing from sdaccel: the parser is broken"
    private = sorted({use for use in uses if not is_public(*use)})
    assert private == [], f"{notebook.name} uses names its rooms do not list as public"


def test_the_check_fails_on_a_name_a_room_does_not_list():
    source = (
        "from sdaccel.cpu.export import _already_exported\n"
        "from sdaccel.cpu import quality\n"
        "from sdaccel.tpu import sharding as sh\n"
        "import sdaccel.toy.dataset as ds\n"
        "quality._planted(quality.compare_images)\n"
        "sh.spec_for, ds.make_dataset, ds.evaluate\n"
    )
    uses = notebook_uses(source)
    assert sorted(uses) == [
        ("cpu", "export", "_already_exported"),
        ("cpu", "quality", "_planted"),
        ("cpu", "quality", "compare_images"),
        ("toy", "dataset", "evaluate"),
        ("toy", "dataset", "make_dataset"),
        ("tpu", "sharding", "spec_for"),
    ]
    assert [use for use in uses if not is_public(*use)] == [
        ("cpu", "export", "_already_exported"),
        ("cpu", "quality", "_planted"),
        ("toy", "dataset", "evaluate"),  # public, but from sdaccel.toy.adherence, not from here
    ]


def cpu_track_imports() -> list[str]:
    """Every ``sdaccel`` import statement of notebooks 04 to 06, as written there."""
    statements = []
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        if path.name[:2] in CPU_TRACK:
            for node in ast.walk(ast.parse(notebook_code(path))):
                if isinstance(node, ast.ImportFrom | ast.Import) and ast.unparse(node).split()[1].startswith(
                    "sdaccel"
                ):
                    statements.append(ast.unparse(node))
    return sorted(set(statements))


def test_the_cpu_track_notebooks_import_no_jax():
    statements = cpu_track_imports()
    assert any("sdaccel.cpu" in s for s in statements) and any("sdaccel.core" in s for s in statements)
    code = "\n".join(
        [*statements, "import sys", "print(sorted(m for m in ('jax', 'jaxlib', 'flax') if m in sys.modules))"]
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_the_api_pages_document_the_rooms_and_leave_the_tools_out():
    pages = [REPO / "docs" / "api.md", *sorted((REPO / "docs" / "api").glob("*.md"))]
    targets = [t for page in pages for t in re.findall(r"^\.\. auto\w+:: ([\w.]+)", page.read_text(), re.M)]
    assert targets and not [t for t in targets if not t.startswith(tuple(f"sdaccel.{r}." for r in ROOMS))]
    assert not [page.name for page in pages if "sdaccel.tools" in page.read_text()]
    missing = [t for t in targets if not is_module(t.rsplit(".", 1)[0])]
    assert missing == [], "the API pages name modules that are not there"
