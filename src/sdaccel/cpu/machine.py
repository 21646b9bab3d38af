"""The machine a CPU run measured: its CPU, cores, instruction sets, memory and the versions of
OpenVINO, NNCF and PyTorch that ran (:func:`machine_info`, stamped into every result file), and
that record as one line a reader takes in (:func:`describe_machine`)."""

from __future__ import annotations

import platform

import psutil

from sdaccel.core.env import cpu_features, cpu_model
from sdaccel.cpu.families import isa_tier


def machine_info() -> dict:
    """The machine a run measured: the CPU, its cores and instruction sets, memory, and versions."""
    import nncf
    import openvino as ov
    import torch

    flags = cpu_features()  # the CPU as sdaccel.core.env reads it (x86 flags or ARM features)
    return {
        "cpu": cpu_model(),
        "logical_cores": psutil.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "avx512_vnni": flags.get("avx512_vnni", False),
        "avx512_bf16": flags.get("avx512_bf16", False),
        "amx": flags.get("amx_tile", False),
        "cpu_flags": flags,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "openvino": ov.get_version(),
        "nncf": nncf.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def describe_machine(machine: dict) -> str:
    """:func:`machine_info` as one line a reader takes in: the CPU and its ISA tier, cores, memory
    and the versions that ran (the JSON keeps every field)."""
    return (
        f"{machine['cpu']}, {isa_tier(machine['cpu_flags'])}, {machine['logical_cores']} logical cores "
        f"({machine['physical_cores']} physical), {machine['memory_gb']} GiB; OpenVINO "
        f"{machine['openvino'].split('-')[0]}, NNCF {machine['nncf']}, PyTorch {machine['torch']}, "
        f"Python {machine['python']}"
    )
