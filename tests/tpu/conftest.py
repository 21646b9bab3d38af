"""Fixtures of the JAX track's tests: several local JAX processes that form one multi-process run
(CPU collectives), as the processes of a multi-host TPU slice would; and the tiny plan's programs,
compiled once for the plan's tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _report(procs: Sequence[subprocess.Popen], outputs: Sequence[tuple[str, str]]) -> str:
    return "\n".join(
        f"--- process {pid} (exit code {p.returncode})\nstdout:\n{out[-2000:]}\nstderr:\n{err[-4000:]}"
        for pid, (p, (out, err)) in enumerate(zip(procs, outputs, strict=True))
    )


@pytest.fixture
def jax_processes(tmp_path):
    """``run(argv, n=2, timeout=120, xla_flags="")``: ``n`` processes of ``python *argv`` joined by
    the ``SDACCEL_*`` variables that :func:`sdaccel.tpu.distributed.initialize` reads; returns
    their ``CompletedProcess`` es.

    The test fails, with every process's output, as soon as one process fails (the others would
    wait for it for ever in a collective), or at ``timeout``. A process still running then is
    sent SIGABRT first, so that Python's fault handler prints where each of its threads was.
    Their output goes to files (a pipe nobody reads while they run could fill and stop them).
    """

    def run(argv: Sequence[str], n: int = 2, timeout: float = 120, xla_flags: str = ""):
        port = _free_port()
        logs = [(tmp_path / f"process{pid}.out", tmp_path / f"process{pid}.err") for pid in range(n)]
        procs = []
        for pid, (out, err) in enumerate(logs):
            env = {
                **os.environ,
                "SDACCEL_COORDINATOR_ADDRESS": f"localhost:{port}",
                "SDACCEL_NUM_PROCESSES": str(n),
                "SDACCEL_PROCESS_ID": str(pid),
                "JAX_PLATFORMS": "cpu",
                "XLA_FLAGS": xla_flags,
                "PYTHONFAULTHANDLER": "1",
            }
            with out.open("w") as stdout, err.open("w") as stderr:
                procs.append(subprocess.Popen([sys.executable, *argv], env=env, stdout=stdout, stderr=stderr))
        # 1. wait for all, or for the first failure, or for the time limit
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(p.poll() == 0 for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
        # 2. stop what still runs, each thread's stack on its stderr
        failed = [pid for pid, p in enumerate(procs) if p.poll() not in (None, 0)]
        running = [p for p in procs if p.poll() is None]
        for p in running:
            p.send_signal(signal.SIGABRT)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # 3. all passed, or the report of each
        if failed or running:
            outputs = [(out.read_text(), err.read_text()) for out, err in logs]
            why = (
                f"JAX process {failed[0]} of {n} failed"
                if failed
                else f"{len(running)} of {n} JAX processes still ran after {timeout} s"
            )
            pytest.fail(f"{why}; the others were stopped.\n{_report(procs, outputs)}", pytrace=False)
        return [
            subprocess.CompletedProcess(p.args, p.returncode, out.read_text(), err.read_text())
            for p, (out, err) in zip(procs, logs, strict=True)
        ]

    return run


#: The tiny plan's case (test_plan.py and test_plan_compile.py): small enough that the tiny config's
#: 128x128 kernels are split over "model" (the real rules' threshold, 2**20 elements, leaves every
#: tiny weight replicated); latents 16x8, 128-token self-attention in the UNet and the VAE.
PLAN_MIN_SHARD = 2**14
PLAN_HEIGHT, PLAN_WIDTH, PLAN_STEPS = 32, 16, 2


@pytest.fixture(scope="session")
def tiny_plans():
    """``compiled(mesh)``: ``(row, compiled)`` of the tiny v5e-4 case on ``mesh`` with splash
    attention, compiled once per session (both plan test files are one xdist group, on one worker:
    tests/conftest.py)."""
    from sdaccel.tpu import plan_compile  # JAX: only the plan's tests load it

    done: dict[str, tuple] = {}

    def compiled(mesh: str) -> tuple:
        if mesh not in done:
            case = plan_compile.Case(
                "v5e-4", mesh, "splash", 1, PLAN_HEIGHT, PLAN_WIDTH, PLAN_STEPS, min_shard_size=PLAN_MIN_SHARD
            )
            done[mesh] = plan_compile.compile_case(case, "tiny")
        return done[mesh]

    return compiled
