"""sdaccel.core.env: the CPU's name and instruction sets read from one source (/proc/cpuinfo, then
lscpu, then the platform), for an x86 and an ARM machine and one without /proc/cpuinfo; the
installed versions; the summary of notebook 00."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np

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
    assert env.cpu_features(write(tmp_path, X86)) == dict.fromkeys(env.CPU_FLAGS, True)
    avx2 = env.cpu_features(write(tmp_path, X86_AVX2))
    assert avx2 == {name: name == "avx2" for name in env.CPU_FLAGS}


def test_cpu_features_read_the_flags_field_not_vmx_flags(tmp_path):
    text = "model name\t: X\nvmx flags\t: avx2 amx_tile\nflags\t\t: fpu avx512f\n"
    assert env.cpu_features(write(tmp_path, text)) == {name: name == "avx512f" for name in env.CPU_FLAGS}


def test_cpu_features_of_an_arm_machine_are_all_false(tmp_path):
    assert env.cpu_features(write(tmp_path, ARM_SERVER)) == dict.fromkeys(env.CPU_FLAGS, False)
    assert env.cpu_features(write(tmp_path, ARM_BOARD)) == dict.fromkeys(env.CPU_FLAGS, False)


def test_cpu_features_without_proc_cpuinfo_are_empty(tmp_path):
    assert env.cpu_features(tmp_path / "no-such-file") == {}
    assert env.cpuinfo_text(tmp_path / "no-such-file") is None


def test_this_machine_reads_proc_cpuinfo_for_both():
    text = env.cpuinfo_text()
    if text is None:
        assert env.cpu_features() == {}
    else:
        assert text == Path(env.CPUINFO).read_text()
        assert env.cpu_features() == env.cpu_features(env.CPUINFO) and set(env.cpu_features()) == set(
            env.CPU_FLAGS
        )
        if env.model_from_cpuinfo(text):
            assert env.cpu_model() == env.model_from_cpuinfo(text)


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
