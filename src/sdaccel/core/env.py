"""What is installed and what hardware this is: the facts notebook 00 prints.

The CPU is read in one place, :func:`cpuinfo_text`, so that its name (:func:`cpu_model`) and its
instruction sets (:func:`cpu_features`) always come from the same source. Linux has
``/proc/cpuinfo``; x86 names the CPU in its ``model name`` field, ARM boards in ``Model`` (a
Raspberry Pi) or only by the codes ``CPU implementer`` and ``CPU part``, which ``lscpu`` turns into
a name (``Neoverse-N1``). macOS and Windows have neither, and fall back on
``platform.processor()``. Each reader takes the text it parses, so that tests can give it another
machine's.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
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

#: Where Linux describes its CPUs.
CPUINFO = "/proc/cpuinfo"

#: The fields of /proc/cpuinfo that name the CPU, in order of preference: x86 (and 32-bit ARM)
#: ``model name``, an ARM board's ``Model``.
CPUINFO_NAME_FIELDS = ("model name", "Model")


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    """Installed version of each package, or None where it is not installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpuinfo_text(path: str | os.PathLike = CPUINFO) -> str | None:
    """The text of ``/proc/cpuinfo`` (or of ``path``), or ``None`` where there is none (macOS,
    Windows)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def lscpu_text() -> str:
    """What ``lscpu`` prints (in the C locale, so its field names are English), or ``""`` where
    there is no ``lscpu`` or it fails."""
    try:
        return subprocess.run(
            ["lscpu"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
            env={**os.environ, "LC_ALL": "C"},
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The ``name : value`` lines of a ``/proc/cpuinfo`` or ``lscpu`` text, the first value of each
    name (the first CPU's, where every CPU repeats them), names and values stripped."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon:
            found.setdefault(name.strip(), value.strip())
    return found


def model_from_cpuinfo(text: str) -> str:
    """The CPU's name in a ``/proc/cpuinfo`` text (:data:`CPUINFO_NAME_FIELDS`), or ``""``."""
    found = cpuinfo_fields(text)
    return next((found[name] for name in CPUINFO_NAME_FIELDS if found.get(name)), "")


def model_from_lscpu(text: str) -> str:
    """The ``Model name`` of an ``lscpu`` text, or ``""`` (also where ``lscpu`` prints ``-`` for a
    CPU it does not know)."""
    name = cpuinfo_fields(text).get("Model name", "")
    return "" if name == "-" else name


def arm_part_from_cpuinfo(text: str) -> str:
    """An ARM CPU by its codes, ``"ARM CPU part 0xd0c (implementer 0x41)"``, where a
    ``/proc/cpuinfo`` text gives only those; else ``""``."""
    found = cpuinfo_fields(text)
    part, implementer = found.get("CPU part"), found.get("CPU implementer")
    if not part:
        return ""
    return f"ARM CPU part {part} (implementer {implementer})" if implementer else f"ARM CPU part {part}"


def cpu_model(cpuinfo: str | os.PathLike = CPUINFO, lscpu: Callable[[], str] = lscpu_text) -> str:
    """The CPU's name (``"AMD EPYC 7B13"``, ``"Neoverse-N1"``), from the first source that has one:

    1. ``/proc/cpuinfo`` (or the file ``cpuinfo``): its ``model name`` or ``Model`` field;
    2. ``lscpu``'s ``Model name`` (which decodes an ARM CPU's part number); ``lscpu`` is the
       function that returns its text, called only when step 1 found nothing;
    3. ``/proc/cpuinfo``'s ARM ``CPU part`` and ``CPU implementer`` codes;
    4. ``platform.processor()`` (``"arm"`` or ``"i386"`` on macOS; may be ``""``)."""
    text = cpuinfo_text(cpuinfo) or ""
    return (
        model_from_cpuinfo(text) or model_from_lscpu(lscpu()) or arm_part_from_cpuinfo(text)
    ) or platform.processor()


def cpu_features(cpuinfo: str | os.PathLike = CPUINFO) -> dict[str, bool]:
    """Which of :data:`CPU_FLAGS` this CPU reports, from the ``flags`` of ``/proc/cpuinfo`` (or of
    the file ``cpuinfo``), the source :func:`cpu_model` reads first; empty where there is none
    (macOS, Windows). An ARM CPU lists none of these x86 sets: all ``False``."""
    text = cpuinfo_text(cpuinfo)
    if text is None:
        return {}
    flags = cpuinfo_fields(text).get("flags", "").split()
    return {name: name in flags for name in CPU_FLAGS}


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
