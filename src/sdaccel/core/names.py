"""A room's public names, imported when first used: each room's ``__init__`` keeps a table, public
name -> the module of the room that defines it, and hands it to :func:`lazy_names`, whose two
functions become the package's ``__getattr__`` and ``__dir__`` (PEP 562). ``import sdaccel.cpu``
then imports none of its modules (and so neither OpenVINO nor PyTorch), while
``from sdaccel.cpu import quantize_ir`` imports ``sdaccel.cpu.quantize`` and returns its
``quantize_ir``. A room's modules stay importable as modules: ``from sdaccel.cpu import quality``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping


def lazy_names(
    package: str, names: Mapping[str, str], modules: Iterable[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``names`` is looked up in its module
    (``package.<module>``) on first use and kept in the package; a name of ``modules`` is that
    submodule; any other name raises :class:`AttributeError`, as a missing attribute does."""
    modules = tuple(modules)
    clash = sorted(set(names) & set(modules))
    if clash:
        raise ValueError(f"{package}: {clash} are both a public name and a module")

    def __getattr__(name: str) -> object:
        namespace = importlib.import_module(package).__dict__
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*importlib.import_module(package).__dict__, *names, *modules})

    return __getattr__, __dir__
