"""sdaccel.core.env: the CPU's name and instruction sets read from one source (/proc/cpuinfo, else
macOS's sysctl; then lscpu, then the platform), for x86 and ARM Linux machines, Apple silicon and
Intel Macs, and a machine with neither; the installed versions; the summary of notebook 00; and JAX
kept off libtpu's search for chips where no TPU is here."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sdaccel.core import env

#: The first processor of an Intel Sapphire Rapids machine (abridged; a second CPU repeats it).
X86 = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
stepping\t: 8
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
vmx flags\t: vnmi preemption_timer posted_intr
bugs\t\t: spectre_v1

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Another name that must not be read
flags\t\t: fpu
"""

#: An AMD machine without AMX or VNNI.
X86_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx avx2\n"

#: A 64-bit ARM server (AWS Graviton 2): no name, only the codes of the CPU.
ARM_SERVER = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 243.75
CPU implementer\t: 0x41
CPU part\t: 0xd0c
"""

#: An AWS Graviton 3 (Neoverse V1): FP16, dot product, I8MM, BF16 and SVE.
GRAVITON3 = """\
processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma \
lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp \
svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""

#: What ``sysctl`` reports on an Apple M1 (macOS 14): FP16 and the dot product, no BF16 or I8MM.
M1 = {
    "machdep.cpu.brand_string": "Apple M1",
    "hw.optional.AdvSIMD": "1",
    "hw.optional.neon": "1",
    "hw.optional.neon_fp16": "1",
    "hw.optional.arm.FEAT_FP16": "1",
    "hw.optional.arm.FEAT_DotProd": "1",
    "hw.optional.arm.FEAT_BF16": "0",
    "hw.optional.arm.FEAT_I8MM": "0",
}
#: An Apple M2 (ARMv8.6): BF16 and I8MM too.
M2 = {
    **M1,
    "machdep.cpu.brand_string": "Apple M2",
    "hw.optional.arm.FEAT_BF16": "1",
    "hw.optional.arm.FEAT_I8MM": "1",
}
#: An Intel Mac: its x86 feature lists.
INTEL_MAC = {
    "machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz",
    "machdep.cpu.features": "FPU VME DE PSE SSE SSE2 AVX1.0 FMA",
    "machdep.cpu.leaf7_features": "SMEP ERMS AVX2 BMI2 INVPCID",
}

#: A Raspberry Pi 4 running a 64-bit kernel: the board's name in ``Model`` at the end.
ARM_BOARD = """\
processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU part\t: 0xd08

Hardware\t: BCM2835
Revision\t: c03114
Serial\t\t: 100000002ec0ba5b
Model\t\t: Raspberry Pi 4 Model B Rev 1.4
"""

#: What ``lscpu`` prints on the ARM server.
LSCPU_ARM = """\
Architecture:                    aarch64
CPU op-mode(s):                  32-bit, 64-bit
Vendor ID:                       ARM
Model name:                      Neoverse-N1
Model:                           1
Flags:                           fp asimd evtstrm aes pmull
"""


def no_sysctl() -> dict:
    raise AssertionError("sysctl must not run where /proc/cpuinfo describes the CPU")


def write(tmp_path, text: str):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


def no_lscpu() -> str:
    raise AssertionError("lscpu must not run when /proc/cpuinfo names the CPU")


# ----------------------------------------------------------------------------------------------
# cpu_model
# ----------------------------------------------------------------------------------------------


def test_cpu_model_of_an_x86_machine_is_its_first_model_name(tmp_path):
    assert (
        env.cpu_model(write(tmp_path, X86), lscpu=no_lscpu) == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    )
    assert env.model_from_cpuinfo(X86_AVX2) == "AMD EPYC 7B12"


def test_cpu_model_of_an_arm_board_is_its_model_field(tmp_path):
    assert env.cpu_model(write(tmp_path, ARM_BOARD), lscpu=no_lscpu) == "Raspberry Pi 4 Model B Rev 1.4"


def test_cpu_model_of_an_arm_server_comes_from_lscpu(tmp_path):
    assert env.model_from_cpuinfo(ARM_SERVER) == ""
    assert env.cpu_model(write(tmp_path, ARM_SERVER), lscpu=lambda: LSCPU_ARM) == "Neoverse-N1"


def test_without_lscpu_an_arm_server_is_named_by_its_codes(tmp_path, monkeypatch):
    monkeypatch.setattr(platform, "processor", lambda: "aarch64")
    expected = "ARM CPU part 0xd0c (implementer 0x41)"
    assert env.cpu_model(write(tmp_path, ARM_SERVER), lscpu=lambda: "") == expected
    # lscpu's "-" is a CPU it does not know, not a name
    assert env.cpu_model(write(tmp_path, ARM_SERVER), lscpu=lambda: "Model name: -\n") == expected
    assert env.arm_part_from_cpuinfo("CPU part\t: 0xd40\n") == "ARM CPU part 0xd40"
    assert env.arm_part_from_cpuinfo(X86) == ""


def test_without_proc_cpuinfo_lscpu_then_the_platform_names_the_cpu(tmp_path, monkeypatch):
    missing = tmp_path / "no-such-file"
    monkeypatch.setattr(platform, "processor", lambda: "arm")  # macOS on Apple silicon
    assert env.cpu_model(missing, lscpu=lambda: "") == "arm"
    assert env.cpu_model(missing, lscpu=lambda: LSCPU_ARM) == "Neoverse-N1"
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert env.cpu_model(missing, lscpu=lambda: "") == ""


def test_an_empty_model_name_falls_through(tmp_path, monkeypatch):
    monkeypatch.setattr(platform, "processor", lambda: "x86_64")
    assert env.cpu_model(write(tmp_path, "model name\t:\nflags\t: avx2\n"), lscpu=lambda: "") == "x86_64"


def test_lscpu_text_is_empty_where_there_is_no_lscpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no lscpu on the path
    assert env.lscpu_text() == ""


def test_lscpu_text_runs_lscpu_in_the_c_locale(monkeypatch, tmp_path):
    fake = tmp_path / "lscpu"
    fake.write_text('#!/bin/sh\necho "Model name: $LC_ALL"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    assert env.lscpu_text() == "Model name: C\n"
    assert env.model_from_lscpu(env.lscpu_text()) == "C"


def test_a_failing_lscpu_gives_no_text(monkeypatch, tmp_path):
    fake = tmp_path / "lscpu"
    fake.write_text("#!/bin/sh\necho 'Model name: half'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert env.lscpu_text() == ""


def test_cpuinfo_fields_keep_the_first_cpus_values():
    found = env.cpuinfo_fields(X86)
    assert found["model name"] == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert found["model"] == "143" and found["processor"] == "0"
    assert found["vmx flags"] == "vnmi preemption_timer posted_intr"
    assert env.cpuinfo_fields(ARM_SERVER)["CPU architecture"] == "8"
    assert env.cpuinfo_fields("no colon here\n\n") == {}


# ----------------------------------------------------------------------------------------------
# cpu_features: the same source
# ----------------------------------------------------------------------------------------------


def test_cpu_features_of_x86_machines(tmp_path):
    assert env.cpu_features(write(tmp_path, X86), sysctl=no_sysctl) == dict.fromkeys(env.X86_FLAGS, True)
    avx2 = env.cpu_features(write(tmp_path, X86_AVX2))
    assert avx2 == {name: name == "avx2" for name in env.X86_FLAGS}
    assert env.architecture(avx2) == "x86"


def test_cpu_features_read_the_flags_field_not_vmx_flags(tmp_path):
    text = "model name\t: X\nvmx flags\t: avx2 amx_tile\nflags\t\t: fpu avx512f\n"
    assert env.cpu_features(write(tmp_path, text)) == {name: name == "avx512f" for name in env.X86_FLAGS}


def test_cpu_features_of_arm_linux_machines_come_from_their_features_field(tmp_path):
    graviton3 = env.cpu_features(write(tmp_path, GRAVITON3), sysctl=no_sysctl)
    assert graviton3 == dict.fromkeys(env.ARM_FLAGS, True) and env.architecture(graviton3) == "arm"
    graviton2 = env.cpu_features(write(tmp_path, ARM_SERVER))  # abridged: no asimddp listed
    assert graviton2 == {name: name in ("asimd", "fp16") for name in env.ARM_FLAGS}
    pi4 = env.features_from_cpuinfo(ARM_BOARD)  # Cortex-A72: NEON only
    assert pi4 == {name: name == "asimd" for name in env.ARM_FLAGS}
    # a 32-bit kernel calls NEON "neon"; "fphp" (scalar) alone is not FP16 vector arithmetic
    assert env.features_from_cpuinfo("Features\t: half thumb neon fphp\n")["asimd"] is True
    assert env.features_from_cpuinfo("Features\t: half thumb neon fphp\n")["fp16"] is False
    assert not any(name in graviton3 for name in env.X86_FLAGS)


def test_a_cpuinfo_of_another_architecture_has_no_features():
    assert env.features_from_cpuinfo("processor\t: 0\ncpu\t\t: POWER9, altivec supported\n") == {}
    assert env.architecture({}) == ""


def test_cpu_features_without_proc_cpuinfo_are_empty(tmp_path):
    assert env.cpu_features(tmp_path / "no-such-file") == {}
    assert env.cpuinfo_text(tmp_path / "no-such-file") is None


def test_this_machine_reads_proc_cpuinfo_for_both():
    text = env.cpuinfo_text()
    if text is None:
        assert env.cpu_features() == {}
    else:
        assert text == Path(env.CPUINFO).read_text()
        assert env.cpu_features() == env.cpu_features(env.CPUINFO)
        assert set(env.cpu_features()) in (set(env.X86_FLAGS), set(env.ARM_FLAGS), set())
        if env.model_from_cpuinfo(text):
            assert env.cpu_model() == env.model_from_cpuinfo(text)


# ----------------------------------------------------------------------------------------------
# macOS: sysctl, the source where there is no /proc/cpuinfo
# ----------------------------------------------------------------------------------------------


def test_apple_silicon_is_read_from_sysctl(tmp_path):
    missing = tmp_path / "no-such-file"
    m1 = env.cpu_features(missing, sysctl=lambda: M1)
    assert m1 == {name: name in ("asimd", "fp16", "dotprod") for name in env.ARM_FLAGS}
    m2 = env.cpu_features(missing, sysctl=lambda: M2)
    assert m2 == {name: name != "sve" for name in env.ARM_FLAGS}  # Apple silicon has no SVE
    assert env.architecture(m2) == "arm"
    assert env.cpu_model(missing, lscpu=no_lscpu, sysctl=lambda: M2) == "Apple M2"
    assert env.cpu_source(missing, sysctl=lambda: M2) == ("sysctl", M2)


def test_older_macos_names_and_an_intel_mac(tmp_path):
    old = {"hw.optional.neon": "1", "hw.optional.neon_fp16": "1"}  # before the FEAT_ names
    assert env.features_from_sysctl(old) == {name: name in ("asimd", "fp16") for name in env.ARM_FLAGS}
    intel = env.cpu_features(tmp_path / "no-such-file", sysctl=lambda: INTEL_MAC)
    assert intel == {name: name == "avx2" for name in env.X86_FLAGS}
    assert env.features_from_sysctl({"machdep.cpu.brand_string": "?"}) == {}
    assert env.features_from_sysctl({"hw.optional.arm.FEAT_FP16": "x"})["fp16"] is False


def test_proc_cpuinfo_comes_first_and_without_either_nothing_is_known(tmp_path, monkeypatch):
    assert env.cpu_source(write(tmp_path, X86), sysctl=no_sysctl) == ("cpuinfo", X86)
    missing = tmp_path / "no-such-file"
    assert env.cpu_source(missing, sysctl=dict) == ("none", None)  # Windows
    assert env.cpu_features(missing, sysctl=dict) == {}
    monkeypatch.setattr(platform, "processor", lambda: "Intel64 Family 6")
    assert env.cpu_model(missing, lscpu=lambda: "", sysctl=dict) == "Intel64 Family 6"


def test_sysctl_values_runs_sysctl_on_macos_only(monkeypatch, tmp_path):
    fake = tmp_path / "sysctl"
    fake.write_text(
        '#!/bin/sh\necho "machdep.cpu.brand_string: Apple M2"\necho "hw.optional.arm.FEAT_FP16: 1"\n'
        "echo \"sysctl: unknown oid 'hw.optional.arm.FEAT_SVE'\" >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    assert env.sysctl_values() == {}
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    assert env.sysctl_values() == {"machdep.cpu.brand_string": "Apple M2", "hw.optional.arm.FEAT_FP16": "1"}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no sysctl at all
    assert env.sysctl_values() == {}


def test_every_flag_has_a_label_and_a_source():
    assert env.CPU_FLAGS == {**env.X86_FLAGS, **env.ARM_FLAGS}
    assert set(env.ARM_CPUINFO_WORDS) == set(env.ARM_SYSCTL_NAMES) == set(env.ARM_FLAGS)
    assert set(env.X86_SYSCTL_WORDS) == set(env.X86_FLAGS)


# ----------------------------------------------------------------------------------------------
# package_versions and summary
# ----------------------------------------------------------------------------------------------


def test_package_versions_name_installed_and_missing_packages():
    versions = env.package_versions(("numpy", "no-such-package-sdaccel"))
    assert versions == {"numpy": np.__version__, "no-such-package-sdaccel": None}
    assert list(env.package_versions()) == list(env.PACKAGES)
    assert env.package_versions()["sdaccel"] is not None  # this package is installed


def test_summary_has_python_platform_cpu_cores_and_memory(monkeypatch):
    monkeypatch.setattr(env, "cpu_model", lambda: "Test CPU")
    summary = env.summary()
    assert list(summary) == ["python", "platform", "cpu", "cores", "memory_gib"]
    assert summary["python"] == platform.python_version() and summary["platform"] == platform.platform()
    assert summary["cpu"] == "Test CPU" and summary["cores"] == os.cpu_count()
    assert isinstance(summary["memory_gib"], float) and summary["memory_gib"] > 0


# ----------------------------------------------------------------------------------------------
# tpu_present and quiet_jax_without_tpu
# ----------------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def test_a_tpu_is_present_by_its_device_files_or_a_variable_naming_it(tmp_path):
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()  # the control file every Linux machine with VFIO has
    none = (str(tmp_path / "accel*"), str(tmp_path / "vfio/[0-9]*"))
    assert not env.tpu_present({}, none)
    assert not env.tpu_present({"TPU_SKIP_MDS_QUERY": "1", "TPU_NAME": ""}, none)  # neither names one
    assert env.tpu_present({"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, none)  # GKE's pods
    (tmp_path / "vfio" / "0").touch()  # a v5e chip
    assert env.tpu_present({}, none)
    assert env.tpu_present({}, (str(tmp_path / "accel*"),)) is False
    (tmp_path / "accel0").touch()  # a v4 chip
    assert env.tpu_present({}, (str(tmp_path / "accel*"),))


def test_jax_stays_on_the_cpu_only_where_libtpu_is_installed_and_no_tpu_is_here(tmp_path, monkeypatch):
    none = (str(tmp_path / "accel*"),)
    monkeypatch.setattr(env, "find_spec", lambda name: object() if name == "libtpu" else None)
    environ: dict[str, str] = {}
    assert env.quiet_jax_without_tpu(environ, none) and environ == {"JAX_PLATFORMS": "cpu"}
    for chosen in ({"JAX_PLATFORMS": ""}, {"JAX_PLATFORMS": "tpu"}, {"TPU_WORKER_HOSTNAMES": "a,b"}):
        kept = dict(chosen)
        assert not env.quiet_jax_without_tpu(kept, none) and kept == chosen  # a choice is left alone
    (tmp_path / "accel0").touch()
    assert not env.quiet_jax_without_tpu(environ := {}, none) and environ == {}  # a TPU VM
    monkeypatch.setattr(env, "find_spec", lambda name: None)
    assert not env.quiet_jax_without_tpu(environ := {}, ()) and environ == {}  # no libtpu: no search
    monkeypatch.setattr(env, "find_spec", lambda name: object())  # a GPU's JAX plugin
    assert not env.quiet_jax_without_tpu(environ := {}, ()) and environ == {}


@pytest.mark.skipif(env.tpu_present(), reason="a TPU is here: JAX is meant to find it")
def test_a_full_profile_kernel_on_a_machine_without_a_tpu_starts_jax_quietly(tmp_path):
    """A notebook's kernel in the full profile (no JAX_PLATFORMS, no SDACCEL_PROFILE): its profile
    cell, then JAX's first call. With libtpu installed (requirements-cpu.txt) and no TPU, JAX
    would print libtpu's search for chips on stderr; it stays on the CPU instead, and compiling for
    a TPU topology still works."""
    kernel = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "SDACCEL_PROFILE")}
    kernel = {k: v for k, v in kernel.items() if not k.startswith("TPU_") and k != "XLA_FLAGS"}
    code = (
        "from sdaccel.course.run_profiles import start\n"
        "profile = start('01_sdxl_in_jax', globals())\n"
        "import jax\n"
        "print(jax.default_backend(), len(jax.devices()))\n"
        "from importlib.util import find_spec\n"
        "if find_spec('libtpu'):\n"
        "    from sdaccel.tpu.topology import tpu_devices\n"
        "    print('compile-only TPU devices:', len(tpu_devices('v5e-4')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO / "notebooks",
        env=kernel,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert proc.stdout.splitlines()[0].startswith("Profile full")
    lines = proc.stdout.splitlines()
    assert "cpu 1" in lines
    if importlib.util.find_spec("libtpu"):
        assert lines[-1] == "compile-only TPU devices: 4"
    assert "TPU" not in proc.stderr and proc.stderr.strip() == "", proc.stderr
