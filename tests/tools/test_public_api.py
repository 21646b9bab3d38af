"""sdaccel.tools: beside the course, not part of the API a reader walks. Every name its rooms'
docstrings list resolves, importing a room loads none of its modules, and nothing in the course's
rooms imports it."""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import sdaccel.tools.measure
import sdaccel.tools.toys
import sdaccel.tools.workshop

TOYS = sorted(set(re.findall(r"``(\w+)\.(\w+)``", sdaccel.tools.toys.__doc__)))
MEASURE = sorted(set(re.findall(r"``(\w+)\.(\w+)``", sdaccel.tools.measure.__doc__)))
WORKSHOP = sorted(
    set(re.findall(r"`~?sdaccel\.tools\.workshop\.(\w+)\.(\w+)`", sdaccel.tools.workshop.__doc__))
)


def test_each_room_lists_every_module():
    for room, listed in (
        (sdaccel.tools.measure, MEASURE),
        (sdaccel.tools.toys, TOYS),
        (sdaccel.tools.workshop, WORKSHOP),
    ):
        modules = {p.stem for p in Path(room.__file__).parent.glob("*.py") if p.stem != "__init__"}
        assert {module for module, _ in listed} == modules, room.__name__


@pytest.mark.parametrize(
    "room, module, name",
    [("measure", *n) for n in MEASURE] + [("toys", *n) for n in TOYS] + [("workshop", *n) for n in WORKSHOP],
)
def test_every_listed_name_resolves(room, module, name):
    assert hasattr(importlib.import_module(f"sdaccel.tools.{room}.{module}"), name)


def test_importing_the_rooms_is_light():
    code = (
        "import sys, sdaccel.tools.measure, sdaccel.tools.toys, sdaccel.tools.workshop; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'torch', 'openvino') "
        "or m.count('.') > 2 and m.startswith('sdaccel.tools.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_room_of_the_course_imports_the_tools():
    graph = grimp.build_graph("sdaccel")
    course_rooms = [m for m in graph.modules if not m.startswith("sdaccel.tools") and m != "sdaccel"]
    importers = {
        (m, d)
        for m in course_rooms
        for d in graph.find_modules_directly_imported_by(m)
        if d.startswith("sdaccel.tools")
    }
    assert importers == set()
