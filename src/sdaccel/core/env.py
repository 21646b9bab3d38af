"""What is installed and what hardware this is: the facts notebook 00 prints."""

from __future__ import annotations

import os
import platform
from importlib import metadata

#: The packages whose versions the notebooks depend on.
PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "numpy",
    "torch",
    "diffusers",
    "transformers",
    "openvino",
    "openvino-genai",
    "nncf",
    "papermill",
    "sdaccel",
)

#: CPU instruction sets that decide how fast OpenVINO's bf16 and INT8 kernels run.
CPU_FLAGS = {
    "avx2": "AVX2",
    "avx512f": "AVX-512",
    "avx512_vnni": "AVX-512 VNNI (INT8 dot products)",
    "avx512_bf16": "AVX-512 BF16",
    "amx_tile": "AMX tiles",
    "amx_int8": "AMX INT8",
    "amx_bf16": "AMX BF16",
}


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    """Installed version of each package, or None where it is not installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_features() -> dict[str, bool]:
    """Which of :data:`CPU_FLAGS` this CPU reports (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return {}
    return {name: name in flags for name in CPU_FLAGS}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def summary() -> dict:
    """Python, OS, CPU, core count and memory, in one dict."""
    import psutil

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
    }
