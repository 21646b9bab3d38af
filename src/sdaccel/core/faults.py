"""Named points where a test makes this process fail the way an outside fault would.

Long writes (an export, a quantization in parts, a calibration set streamed to disk, a TPU plan, a
notebook run) call :func:`fault_point` at the moments where a fault from outside would hurt most:
between two renames, after a component is saved, in the middle of a stream. Normally it does
nothing (one dictionary lookup). A test that sets the environment variable :data:`FAULT_ENV` of
the process it starts chooses one point and what happens there:

- ``kill``: ``SIGKILL`` to this process, as the OOM killer or a closed laptop lid would;
- ``interrupt``: ``KeyboardInterrupt``, as Ctrl-C or a notebook's "interrupt kernel" would;
- ``enospc``: ``OSError(ENOSPC)``, as a full disk would.

``SDACCEL_FAULT=export.component-saved:kill`` kills at the first time that point is reached;
``SDACCEL_FAULT=export.component-saved#3:kill`` at the third. The fault suite
(``tests/faults/``) then checks what is left on disk and in the process table.
"""

from __future__ import annotations

import errno
import os
import signal
from collections import Counter

#: The environment variable that names the point and the fault: ``"<point>[#<n>]:<kind>"``.
FAULT_ENV = "SDACCEL_FAULT"
FAULT_KINDS = ("kill", "interrupt", "enospc")

_reached: Counter = Counter()


def parse_fault(spec: str) -> tuple[str, int, str]:
    """``"point#n:kind"`` as ``(point, n, kind)``; ``n`` defaults to 1 and ``kind`` to ``kill``."""
    target, _, kind = spec.partition(":")
    point, _, nth = target.partition("#")
    kind = kind or "kill"
    if not point or kind not in FAULT_KINDS or (nth and not nth.isdigit()) or nth == "0":
        raise ValueError(
            f"{FAULT_ENV}={spec!r}: expected '<point>[#<n>]:<kind>' with kind one of {FAULT_KINDS}, "
            "for example 'export.component-saved#2:kill'."
        )
    return point, int(nth or 1), kind


def fault_point(name: str) -> None:
    """Fail here if :data:`FAULT_ENV` names this point (and this is its n-th time); else nothing."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    point, nth, kind = parse_fault(spec)
    if point != name:
        return
    _reached[name] += 1
    if _reached[name] != nth:
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "interrupt":
        raise KeyboardInterrupt(f"fault injected at {name}")
    raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (fault injected at {name})")
