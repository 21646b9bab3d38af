"""sdaccel.core.faults: a point does nothing unless the environment names it, and then fails the
named way at the named time."""

import errno
import os
import signal
import subprocess
import sys

import pytest

from sdaccel.core import faults


def test_a_point_does_nothing_unless_named(monkeypatch):
    monkeypatch.delenv(faults.FAULT_ENV, raising=False)
    faults.fault_point("anything")
    monkeypatch.setenv(faults.FAULT_ENV, "elsewhere:enospc")
    faults.fault_point("anything")


def test_the_nth_time_and_the_kind(monkeypatch):
    monkeypatch.setattr(faults, "_reached", faults.Counter())
    monkeypatch.setenv(faults.FAULT_ENV, "step#3:enospc")
    faults.fault_point("step")
    faults.fault_point("step")
    with pytest.raises(OSError) as caught:
        faults.fault_point("step")
    assert caught.value.errno == errno.ENOSPC
    faults.fault_point("step")  # only the third time
    monkeypatch.setenv(faults.FAULT_ENV, "step#5:interrupt")
    with pytest.raises(KeyboardInterrupt):
        faults.fault_point("step")


def test_kill_is_a_real_sigkill():
    env = {**os.environ, faults.FAULT_ENV: "here:kill"}
    code = "from sdaccel.core.faults import fault_point; fault_point('here'); print('survived')"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL and "survived" not in done.stdout


@pytest.mark.parametrize("spec", ["", ":kill", "p:explode", "p#x:kill", "p#0:kill"])
def test_a_malformed_spec_names_the_form(spec):
    with pytest.raises(ValueError, match="expected '<point>\\[#<n>\\]:<kind>'"):
        faults.parse_fault(spec)
    assert faults.parse_fault("p#2:interrupt") == ("p", 2, "interrupt")
    assert faults.parse_fault("p") == ("p", 1, "kill")
