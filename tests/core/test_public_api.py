"""sdaccel.core's public API: every name of ``__all__`` resolves to its module's object and is named
in the package docstring under its heading, and importing the package pulls in no deep-learning
framework."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import sdaccel.core as core

HEADINGS = (
    "## The pipeline contract",
    "## Checkpoints",
    "## LoRA files",
    "## Writing safely",
    "## Child processes",
    "## The environment",
    "## Measuring and reporting",
    "## A room's public names",
)

#: What ``import sdaccel.core`` must not import: the frameworks of the two tracks.
FRAMEWORKS = (
    "jax",
    "jaxlib",
    "flax",
    "torch",
    "openvino",
    "openvino_genai",
    "nncf",
    "diffusers",
    "transformers",
)


def test_every_public_name_resolves():
    assert core.__all__ and len(core.__all__) == len(set(core.__all__))
    missing = [name for name in core.__all__ if not hasattr(core, name)]
    assert missing == []


def test_every_public_name_is_its_modules_own_object():
    for name in core.__all__:
        obj = getattr(core, name)
        module = getattr(obj, "__module__", None)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert module.startswith("sdaccel.core."), (name, module)
            assert getattr(importlib.import_module(module), name) is obj, name


def test_the_docstring_names_every_public_name_under_its_headings():
    doc = core.__doc__
    positions = [doc.index(heading) for heading in HEADINGS]
    assert positions == sorted(positions)  # in this order
    unnamed = [name for name in core.__all__ if f"`{name}`" not in doc]
    assert unnamed == []


def test_the_submodules_stay_reachable_by_name():
    from sdaccel.core import checkpoint, contract, env, lora_files, processes, staging, tables, timing

    assert env.cpu_model is core.cpu_model and timing.time_calls is core.time_calls
    assert all(inspect.ismodule(m) for m in (checkpoint, contract, lora_files, processes, staging, tables))


def test_importing_sdaccel_core_imports_no_framework():
    code = (
        "import sys, sdaccel.core\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.strip() == "[]", proc.stdout
