"""The public API of ``sdaccel.cpu`` (its docstring, its table of names and ``__all__``), and that
importing it is cheap."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys

import pytest

import sdaccel.cpu

#: One docstring line per module: ``- :mod:`name`: ``a``, ``b``, ...`` (continued on indented lines).
ENTRY = re.compile(r"^- :mod:`(\w+)`:(.*?)(?=^- |^## |\Z)", re.MULTILINE | re.DOTALL)


def documented() -> dict[str, list[str]]:
    """Module -> the public names the package docstring lists for it."""
    return {module: re.findall(r"``(\w+)``", text) for module, text in ENTRY.findall(sdaccel.cpu.__doc__)}


def test_the_docstring_lists_every_module_and_the_names_of_all():
    modules = {m.name for m in pkgutil.iter_modules(sdaccel.cpu.__path__)}
    assert sorted(sdaccel.cpu.MODULES) == sorted(modules)
    assert set(documented()) == modules
    listed = {(module, name) for module, names in documented().items() for name in names}
    assert listed == {(module, name) for name, module in sdaccel.cpu.PUBLIC_NAMES.items()}
    assert sdaccel.cpu.__all__ == list(sdaccel.cpu.PUBLIC_NAMES)


@pytest.mark.parametrize("module", sorted(documented()))
def test_every_listed_name_resolves(module):
    if module == "torch_modules":
        pytest.importorskip("torch")
    names = documented()[module]
    assert names, f"the docstring lists no names for {module}"
    loaded = importlib.import_module(f"sdaccel.cpu.{module}")
    missing = [name for name in names if not hasattr(loaded, name)]
    assert not missing, f"sdaccel.cpu.{module} has no {missing}"
    assert all(getattr(sdaccel.cpu, name) is getattr(loaded, name) for name in names)


def test_importing_the_room_imports_neither_torch_nor_openvino():
    code = (
        "import sys, sdaccel.cpu\n"
        "print(sorted(m for m in ('torch', 'openvino', 'openvino_genai', 'nncf', 'diffusers') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["export", "deepcache", "tome", "quantize", "precision", "random_unet"])
def test_the_exporters_import_torch_only_when_they_convert(module):
    code = f"import sys, sdaccel.cpu.{module}\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
