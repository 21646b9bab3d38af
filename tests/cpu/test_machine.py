"""The machine a result file records (``sdaccel.cpu.machine``), described in one line."""

from __future__ import annotations

from sdaccel.cpu import machine as B


def test_the_machine_is_described_in_one_line_with_its_isa_tier():
    machine = {
        "cpu": "AMD EPYC",
        "logical_cores": 2,
        "physical_cores": 1,
        "cpu_flags": {"avx2": True, "avx512f": True, "avx512_vnni": True, "avx512_bf16": True},
        "memory_gb": 23.5,
        "openvino": "2026.4.1-22982-e213a147257-releases/2026/4",
        "nncf": "3.4.0",
        "torch": "2.13.0+cpu",
        "python": "3.11.7",
    }
    assert B.describe_machine(machine) == (
        "AMD EPYC, AVX-512 VNNI + BF16, no AMX, 2 logical cores (1 physical), 23.5 GiB; "
        "OpenVINO 2026.4.1, NNCF 3.4.0, PyTorch 2.13.0+cpu, Python 3.11.7"
    )
    assert B.describe_machine(B.machine_info()).startswith(B.machine_info()["cpu"])  # the real one reads too
