"""The toy room's public API: every name its docstring lists resolves, and importing the package
imports none of its modules (nor PyTorch, diffusers, OpenVINO or JAX)."""

import importlib
import re
import subprocess
import sys

import pytest

import sdaccel.toy

LISTED = sorted(set(re.findall(r"``(\w+)\.(\w+)``", sdaccel.toy.__doc__)))


def test_the_docstring_lists_names_of_every_module():
    assert {module for module, _ in LISTED} == set(sdaccel.toy.MODULES)
    tabled = {(module, name) for name, module in sdaccel.toy.PUBLIC_NAMES.items()}
    shared = {(module, name) for name, modules in sdaccel.toy.SHARED_NAMES.items() for module in modules}
    assert set(LISTED) == tabled | shared
    assert sdaccel.toy.__all__ == list(sdaccel.toy.PUBLIC_NAMES)
    for heading in (
        "## The shapes data set",
        "## Adherence",
    ):
        assert heading in sdaccel.toy.__doc__


@pytest.mark.parametrize("module, name", LISTED, ids=[f"{m}.{n}" for m, n in LISTED])
def test_every_listed_name_resolves(module, name):
    assert hasattr(importlib.import_module(f"sdaccel.toy.{module}"), name)
    if name in sdaccel.toy.PUBLIC_NAMES:
        assert getattr(sdaccel.toy, name) is getattr(importlib.import_module(f"sdaccel.toy.{module}"), name)


def test_importing_the_package_is_light():
    code = (
        "import sys, sdaccel.toy; "
        "heavy = [m for m in ('torch', 'diffusers', 'openvino', 'jax', 'transformers') if m in sys.modules]; "
        "mine = [m for m in sys.modules if m.startswith('sdaccel.toy.')]; "
        "print(heavy, mine)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] []"
