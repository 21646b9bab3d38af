"""What is installed and what hardware this is: the facts notebook 00 prints, and whether a TPU
is here at all (:func:`tpu_present`), so that JAX does not look for one where there is none
(:func:`quiet_jax_without_tpu`).

The CPU is read from one source, :func:`cpu_source`, so that its name (:func:`cpu_model`) and its
instruction sets (:func:`cpu_features`) can never disagree:

* **Linux** has ``/proc/cpuinfo``. x86 lists its instruction sets in ``flags`` and names the CPU in
  ``model name``; ARM lists its features in ``Features`` (``asimd``, ``asimdhp``, ``asimddp``,
  ``i8mm``, ``bf16``, ``sve``) and names the CPU in ``Model`` (a Raspberry Pi) or only by the codes
  ``CPU implementer`` and ``CPU part``, which ``lscpu`` turns into a name (``Neoverse-N1``).
* **macOS** has no ``/proc/cpuinfo``: ``sysctl`` names the CPU (``machdep.cpu.brand_string``) and
  its features (``hw.optional.arm.FEAT_FP16`` and the like on Apple silicon,
  ``machdep.cpu.features`` on an Intel Mac).
* **Windows** has neither: the name falls back on ``platform.processor()``, the features are
  unknown (empty).

Each parser takes the text or the values it parses (:func:`features_from_cpuinfo`,
:func:`features_from_sysctl`), and each reader takes the function or file it reads, so that tests
can give it another machine's.
"""

from __future__ import annotations

import glob
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from importlib.util import find_spec

import psutil

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

#: x86 instruction sets that decide how fast OpenVINO's bf16 and INT8 kernels run (the names of
#: ``/proc/cpuinfo``'s ``flags``).
X86_FLAGS = {
    "avx2": "AVX2",
    "avx512f": "AVX-512",
    "avx512_vnni": "AVX-512 VNNI (INT8 dot products)",
    "avx512_bf16": "AVX-512 BF16",
    "amx_tile": "AMX tiles",
    "amx_int8": "AMX INT8",
    "amx_bf16": "AMX BF16",
}

#: ARM features that decide which precision OpenVINO runs and how fast its INT8 kernels are.
ARM_FLAGS = {
    "asimd": "NEON (Advanced SIMD)",
    "fp16": "FP16 arithmetic",
    "dotprod": "INT8 dot product (SDOT)",
    "i8mm": "INT8 matrix multiply (I8MM)",
    "bf16": "ARM BF16",
    "sve": "SVE",
}

#: Every instruction set :func:`cpu_features` can report, x86 and ARM, with its label. A machine
#: reports the names of its own architecture only.
CPU_FLAGS = {**X86_FLAGS, **ARM_FLAGS}

#: The words of ``/proc/cpuinfo``'s ``Features`` that stand for each of :data:`ARM_FLAGS` (any one
#: suffices: 32-bit kernels say ``neon`` for ``asimd``).
ARM_CPUINFO_WORDS = {
    "asimd": ("asimd", "neon"),
    "fp16": ("asimdhp",),
    "dotprod": ("asimddp",),
    "i8mm": ("i8mm",),
    "bf16": ("bf16",),
    "sve": ("sve",),
}

#: The macOS ``sysctl`` names that stand for each of :data:`ARM_FLAGS` (``1`` where present; older
#: macOS versions know only the first spellings). Apple silicon has no SVE.
ARM_SYSCTL_NAMES = {
    "asimd": ("hw.optional.AdvSIMD", "hw.optional.neon"),
    "fp16": ("hw.optional.arm.FEAT_FP16", "hw.optional.neon_fp16"),
    "dotprod": ("hw.optional.arm.FEAT_DotProd",),
    "i8mm": ("hw.optional.arm.FEAT_I8MM",),
    "bf16": ("hw.optional.arm.FEAT_BF16",),
    "sve": (),
}

#: The words of an Intel Mac's ``machdep.cpu.features`` / ``machdep.cpu.leaf7_features`` (upper
#: case, dots as underscores) for each of :data:`X86_FLAGS`.
X86_SYSCTL_WORDS = {
    "avx2": "AVX2",
    "avx512f": "AVX512F",
    "avx512_vnni": "AVX512VNNI",
    "avx512_bf16": "AVX512BF16",
    "amx_tile": "AMXTILE",
    "amx_int8": "AMXINT8",
    "amx_bf16": "AMXBF16",
}

#: The macOS ``sysctl`` name of the CPU's name, and of the Intel feature lists.
SYSCTL_BRAND = "machdep.cpu.brand_string"
SYSCTL_X86_LISTS = ("machdep.cpu.features", "machdep.cpu.leaf7_features")
#: Every ``sysctl`` name :func:`sysctl_values` asks for.
SYSCTL_NAMES = (
    SYSCTL_BRAND,
    *SYSCTL_X86_LISTS,
    *(name for names in ARM_SYSCTL_NAMES.values() for name in names),
)

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


def sysctl_values(names: tuple[str, ...] = SYSCTL_NAMES) -> dict[str, str]:
    """``name -> value`` of each of ``names`` that macOS's ``sysctl`` knows; empty on any other
    system, where there is no ``sysctl`` or it fails. A name this macOS version does not know is
    left out (``sysctl`` says so on stderr and prints the others)."""
    if platform.system() != "Darwin":
        return {}
    try:
        out = subprocess.run(
            ["sysctl", *names], capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"}
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return sysctl_fields(out)


def sysctl_fields(text: str) -> dict[str, str]:
    """The ``name: value`` lines that ``sysctl name ...`` prints, as a dict."""
    found = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip():
            found[name.strip()] = value.strip()
    return found


def cpu_source(
    cpuinfo: str | os.PathLike = CPUINFO, sysctl: Callable[[], dict[str, str]] = sysctl_values
) -> tuple[str, str | dict[str, str] | None]:
    """Where this machine describes its CPU, and that description: ``("cpuinfo", text)`` where
    ``/proc/cpuinfo`` (or the file ``cpuinfo``) exists; else ``("sysctl", values)`` where ``sysctl``
    (the function that returns :func:`sysctl_values`) answers, on macOS; else ``("none", None)``.
    The one reading that :func:`cpu_model` and :func:`cpu_features` share."""
    text = cpuinfo_text(cpuinfo)
    if text is not None:
        return "cpuinfo", text
    values = sysctl()
    return ("sysctl", values) if values else ("none", None)


def model_from_sysctl(values: dict[str, str]) -> str:
    """The CPU's name among macOS ``sysctl`` values (``"Apple M2"``), or ``""``."""
    return values.get(SYSCTL_BRAND, "")


def cpu_model(
    cpuinfo: str | os.PathLike = CPUINFO,
    lscpu: Callable[[], str] = lscpu_text,
    sysctl: Callable[[], dict[str, str]] = sysctl_values,
) -> str:
    """The CPU's name (``"AMD EPYC 7B13"``, ``"Neoverse-N1"``, ``"Apple M2"``), from the first
    source that has one:

    1. ``/proc/cpuinfo`` (or the file ``cpuinfo``): its ``model name`` or ``Model`` field; where
       there is none, macOS's ``sysctl`` (:func:`cpu_source`): ``machdep.cpu.brand_string``;
    2. ``lscpu``'s ``Model name`` (which decodes an ARM CPU's part number); ``lscpu`` is the
       function that returns its text, called only when step 1 found nothing;
    3. ``/proc/cpuinfo``'s ARM ``CPU part`` and ``CPU implementer`` codes;
    4. ``platform.processor()`` (``"arm"`` or ``"i386"`` on macOS; may be ``""``)."""
    kind, source = cpu_source(cpuinfo, sysctl)
    if kind == "sysctl":
        name = model_from_sysctl(source) or model_from_lscpu(lscpu())
    else:
        text = source or ""
        name = model_from_cpuinfo(text) or model_from_lscpu(lscpu()) or arm_part_from_cpuinfo(text)
    return name or platform.processor()


def features_from_cpuinfo(text: str) -> dict[str, bool]:
    """Which instruction sets a ``/proc/cpuinfo`` text lists: each of :data:`X86_FLAGS` where it has
    x86 ``flags``, each of :data:`ARM_FLAGS` where it has ARM ``Features``
    (:data:`ARM_CPUINFO_WORDS`); empty where it has neither (another architecture)."""
    fields = cpuinfo_fields(text)
    if "flags" in fields:
        flags = set(fields["flags"].split())
        return {name: name in flags for name in X86_FLAGS}
    if "Features" in fields:
        words = set(fields["Features"].split())
        return {name: any(w in words for w in ARM_CPUINFO_WORDS[name]) for name in ARM_FLAGS}
    return {}


def features_from_sysctl(values: dict[str, str]) -> dict[str, bool]:
    """Which instruction sets macOS ``sysctl`` values (name -> value, as :func:`sysctl_values`
    returns) report: each of :data:`ARM_FLAGS` on Apple silicon (:data:`ARM_SYSCTL_NAMES`, ``1``
    for present), each of :data:`X86_FLAGS` on an Intel Mac (its ``machdep.cpu`` feature lists);
    empty where they report neither."""
    if any(name in values for names in ARM_SYSCTL_NAMES.values() for name in names):
        return {name: any(_sysctl_on(values.get(n)) for n in ARM_SYSCTL_NAMES[name]) for name in ARM_FLAGS}
    words = set(" ".join(values.get(n, "") for n in SYSCTL_X86_LISTS).upper().replace(".", "_").split())
    return {name: word in words for name, word in X86_SYSCTL_WORDS.items()} if words else {}


def _sysctl_on(value: str | None) -> bool:
    try:
        return int(value or 0) != 0
    except ValueError:
        return False


def cpu_features(
    cpuinfo: str | os.PathLike = CPUINFO, sysctl: Callable[[], dict[str, str]] = sysctl_values
) -> dict[str, bool]:
    """Which of :data:`CPU_FLAGS` this CPU has, from the source :func:`cpu_model` reads
    (:func:`cpu_source`): ``/proc/cpuinfo`` (or the file ``cpuinfo``), else macOS's ``sysctl``. An
    x86 CPU reports the names of :data:`X86_FLAGS`, an ARM CPU those of :data:`ARM_FLAGS`; empty
    where neither can be read (Windows)."""
    kind, source = cpu_source(cpuinfo, sysctl)
    if kind == "cpuinfo":
        return features_from_cpuinfo(source)
    if kind == "sysctl":
        return features_from_sysctl(source)
    return {}


def architecture(features: dict[str, bool]) -> str:
    """``"arm"`` or ``"x86"``: whose instruction sets ``features`` (:func:`cpu_features`, or a
    stored copy of it) names; ``""`` for none (empty, unread)."""
    if any(name in features for name in ARM_FLAGS):
        return "arm"
    return "x86" if any(name in features for name in X86_FLAGS) else ""


def summary() -> dict:
    """Python, OS, CPU, core count and memory, in one dict."""

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
    }


#: The device files of a TPU VM's chips: ``/dev/accel<n>`` (v2-v4), ``/dev/vfio/<n>`` (v5e, v6e).
TPU_DEVICE_GLOBS = ("/dev/accel*", "/dev/vfio/[0-9]*")

#: Variables that tell libtpu where its TPU is, set by GKE and multi-host launchers (and by
#: :data:`sdaccel.tpu.topology.OFF_CLOUD_ENV` to compile for TPU off one): where one is set, JAX
#: is left to find its TPU as it would.
TPU_VARIABLES = (
    "TPU_NAME",
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "TPU_ACCELERATOR_TYPE",
    "TPU_HOST_BOUNDS",
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_PROCESS_BOUNDS",
)


def tpu_present(environ=None, device_globs: tuple[str, ...] = TPU_DEVICE_GLOBS) -> bool:
    """Whether this machine has TPU chips (their device files) or is told about a TPU
    (:data:`TPU_VARIABLES`)."""
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in TPU_VARIABLES):
        return True
    return any(glob.glob(pattern) for pattern in device_globs)


def quiet_jax_without_tpu(environ=None, device_globs: tuple[str, ...] = TPU_DEVICE_GLOBS) -> bool:
    """Keep JAX on the CPU where libtpu is installed but no TPU is here: ``JAX_PLATFORMS=cpu``.

    ``requirements-cpu.txt`` installs libtpu for the TPU-plan cells (they compile for TPU without
    one, :func:`sdaccel.tpu.topology.tpu_devices`, which works with JAX on the CPU). Without a TPU,
    JAX's first call would still load libtpu to look for chips, and libtpu prints its probe's
    errors on standard error ("could not determine TPU accelerator type", "unexpected worker
    hostname"). The profile cell of every notebook calls this before JAX starts
    (:func:`sdaccel.course.notebook.quiet`).

    It changes nothing where ``JAX_PLATFORMS`` is set (the smoke and rehearsal kernels, a reader's
    own choice), where libtpu is not installed (no probe), where a TPU is present
    (:func:`tpu_present`), or where a JAX plugin (a GPU's) is installed. Where JAX is imported
    already, it sets JAX's configuration too; a backend already started stays as it is. Returns
    whether it kept JAX on the CPU."""
    environ = os.environ if environ is None else environ
    if "JAX_PLATFORMS" in environ or find_spec("libtpu") is None or tpu_present(environ, device_globs):
        return False
    if metadata.entry_points(group="jax_plugins") or find_spec("jax_plugins") is not None:
        return False
    environ["JAX_PLATFORMS"] = "cpu"
    jax = sys.modules.get("jax")
    if jax is not None and environ is os.environ:
        jax.config.update("jax_platforms", "cpu")
    return True
