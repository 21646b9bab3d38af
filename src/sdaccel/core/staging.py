"""Write a folder so that nobody ever sees it half-written, and check an output folder before
long work.

A folder of model files (an OpenVINO export, quantized IRs, calibration data) is built in a
*staging* folder next to its destination (same parent, so the same file system) and published by
renaming (:func:`staged_folder`). If anything fails on the way, the staging folder is deleted and
the destination is exactly as it was: the same files, the same modification times. When a
destination already exists, it is renamed aside, the new folder renamed in, and the old one
deleted, so the destination is always either the old folder or the new one.

A folder that is rebuilt from an older version of itself (an export that adds a component) keeps
the older files by hard links (:func:`link_tree`): no copy of the weights, and the originals are
never written to, because every writer here replaces a file (``os.replace``) rather than writing
into it.

Faults from outside a call are survived too:

- **Two writers of one destination** take turns: :func:`staged_folder` holds :func:`writer_lock`
  (an OS file lock, kept outside ``dst``'s folder, which the kernel releases when its process
  dies, however it dies), and the
  second says that it waits. A caller that can reuse the first writer's result checks for it
  inside ``with writer_lock(dst):``.
- **A writer killed mid-write** (SIGKILL, the OOM killer, a kernel restart) leaves its hidden
  staging folder behind. The next writer of that destination, holding the lock so that no live
  writer owns them, removes such leftovers and says how much it freed (:func:`clear_leftovers`);
  a destination left renamed aside between :func:`publish_folder`'s two renames is put back.
- **A full disk**: :func:`require_free_space` refuses a long write that cannot fit, before it
  starts; ``ENOSPC`` in the middle removes the staging folder like any other failure.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import filelock

from sdaccel.core.faults import fault_point


def check_writable(folder: str | os.PathLike) -> Path:
    """Raise, naming the folder and the fix, if no file can be created in ``folder``, or (when it
    does not exist yet) in the nearest existing folder above it, where it would be created.
    Nothing is left behind; returns ``folder`` as a ``Path``."""
    folder = Path(folder)
    probe = nearest_existing(folder)
    if not probe.is_dir():
        raise NotADirectoryError(
            f"Cannot write to {folder}: {probe} is a file, not a folder. Choose another output folder."
        )
    try:
        handle, name = tempfile.mkstemp(dir=probe, prefix=".sdaccel-write-test-")
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        raise PermissionError(
            f"Cannot write to {folder} ({exc.strerror} in {probe}): choose a writable output folder, "
            "or make it writable."
        ) from exc
    return folder


def lock_path(dst: str | os.PathLike) -> Path:
    """The lock file of the writers of ``dst``: one per destination (named after its resolved
    path) in the temporary folder's ``sdaccel-locks``, so that nothing is added beside ``dst``. The
    empty file stays after use; the lock itself is the kernel's, held only by a live process."""
    dst = Path(dst).resolve()
    key = hashlib.sha256(str(dst).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "sdaccel-locks" / f"{dst.name}-{key}.lock"


@contextlib.contextmanager
def writer_lock(dst: str | os.PathLike) -> Iterator[None]:
    """``with writer_lock(dst):`` be the only writer of ``dst`` among all processes (the lock is
    ``filelock``'s, on :func:`lock_path`). Re-entrant within a thread. When another process holds
    it, say so on stderr and wait."""

    dst = Path(dst)
    path = lock_path(dst)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(path, is_singleton=True)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        print(f"Waiting for another process that is writing {dst.name} ...", file=sys.stderr, flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def leftover_patterns(dst: str | os.PathLike) -> tuple[str, ...]:
    """Glob patterns, in ``dst``'s folder, of what an interrupted writer of ``dst`` leaves behind."""
    name = Path(dst).name
    return (f".{name}.staging-*", f".{name}.old-*")


def clear_leftovers(dst: str | os.PathLike, patterns: Iterable[str] = ()) -> int:
    """Remove what interrupted writers of ``dst`` left beside it (:func:`leftover_patterns`, plus
    ``patterns``), and put back a ``dst`` that was renamed aside and never replaced. Call it while
    holding :func:`writer_lock` (``staged_folder`` does): only then is no live writer using them.
    Says on stderr what it removed; returns the bytes freed."""
    dst = Path(dst)
    parent = dst.parent
    if not parent.is_dir():
        return 0
    old = sorted(parent.glob(f".{dst.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if old and not dst.exists():
        os.rename(old.pop(), dst)
        print(f"Put back {dst.name}, which an interrupted write had renamed aside.", file=sys.stderr)
    found = [p for pattern in (*leftover_patterns(dst), *patterns) for p in parent.glob(pattern)]
    freed = 0
    for path in found:
        freed += disk_bytes(path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if found:
        print(
            f"Removed {len(found)} unfinished file(s) of {dst.name} left by an interrupted write "
            f"({freed / 2**20:.1f} MiB freed).",
            file=sys.stderr,
        )
    return freed


def nearest_existing(path: str | os.PathLike) -> Path:
    """``path``, or the nearest folder above it that exists (a cache or output folder may not be
    made yet: its disk is that folder's)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the file system that holds ``path`` (or the nearest existing folder above it)."""
    return shutil.disk_usage(nearest_existing(path)).free


def require_free_space(folder: str | os.PathLike, need_bytes: int, what: str) -> None:
    """Raise ``OSError(ENOSPC)``, naming what needs how much and the fix, if the file system of
    ``folder`` has less than ``need_bytes`` free. Call it before a long write, not after."""
    free = free_bytes(folder)
    if free < need_bytes:
        raise OSError(
            errno.ENOSPC,
            f"Not enough free disk for {what}: it needs about {need_bytes / 2**30:.2f} GiB in {folder}, "
            f"and {free / 2**30:.2f} GiB is free. Free some space (old exports and build/ folders are "
            "safe to delete) or choose an output folder on another disk.",
        )


@contextlib.contextmanager
def staged_folder(dst: str | os.PathLike, leftovers: Iterable[str] = ()) -> Iterator[Path]:
    """``with staged_folder(dst) as stage:`` write everything into the empty ``stage``; when the
    block ends normally, ``stage`` replaces ``dst`` (:func:`publish_folder`); when it raises, ``stage``
    is deleted and ``dst`` is left as it was. ``stage`` is a hidden folder next to ``dst``.

    The block runs under :func:`writer_lock`, after :func:`clear_leftovers` (with the extra glob
    ``leftovers`` of the caller's own working files)."""
    dst = Path(dst)
    check_writable(dst.parent)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(dst):
        clear_leftovers(dst, leftovers)
        stage = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.staging-"))
        try:
            yield stage
            fault_point("staging.before-publish")
            publish_folder(stage, dst)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise


def publish_folder(stage: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Rename the finished ``stage`` to ``dst``. An existing ``dst`` is renamed aside first and
    deleted after the new one is in place (put back if that rename fails)."""
    stage, dst = Path(stage), Path(dst)
    if dst.is_dir() and not dst.is_symlink() and not any(dst.iterdir()):
        dst.rmdir()
    if not dst.exists():
        os.rename(stage, dst)
        return dst
    old = dst.with_name(f".{dst.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(dst, old)
    fault_point("staging.between-renames")
    try:
        os.rename(stage, dst)
    except BaseException:
        os.rename(old, dst)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return dst


def link_tree(src: str | os.PathLike, dst: str | os.PathLike, skip: Iterable[str] = ()) -> None:
    """Give the existing folder ``dst`` every entry of ``src`` but those named in ``skip``, as hard
    links (copies where the file system has none). Such files may be replaced, never written into."""
    skip = set(skip)
    for entry in Path(src).iterdir():
        if entry.name in skip:
            continue
        target = Path(dst) / entry.name
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, target)


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def replace_text(
    path: str | os.PathLike, text: str, suffix: str = ".tmp", fault: str | None = None, sync: bool = False
) -> None:
    """Write ``path`` through a temporary file (``.NAME.<random><suffix>``) and ``os.replace``:
    readers see the old or the new content, never a part, and a hard-linked original is left alone.
    ``sync``: the temporary file is on disk before the rename. ``fault``: the :func:`fault_point`
    between the write and the rename (a writer killed there leaves the temporary file for the next
    writer's :func:`clear_leftovers`)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{suffix}")
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        if fault:
            fault_point(fault)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def replace_json(path: str | os.PathLike, data) -> None:
    replace_text(path, json.dumps(data, indent=2))


def update_json(path: str | os.PathLike, change: Callable[[dict], None], empty: dict | None = None) -> dict:
    """Read the JSON object at ``path`` (``empty`` when there is none), ``change`` it in place, and
    write it back whole (:func:`replace_json`), as the only writer of ``path`` (:func:`writer_lock`):
    two runs that each add their entry to one results file keep both. Returns what was written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(path):
        data = json.loads(path.read_text()) if path.is_file() else json.loads(json.dumps(empty or {}))
        change(data)
        replace_json(path, data)
    return data


def disk_bytes(path: str | os.PathLike) -> int:
    """Bytes on disk of the file ``path``, or of every file under the folder ``path``."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
