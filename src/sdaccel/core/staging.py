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
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path


def check_writable(folder: str | os.PathLike) -> Path:
    """Raise, naming the folder and the fix, if no file can be created in ``folder``, or (when it
    does not exist yet) in the nearest existing folder above it, where it would be created.
    Nothing is left behind; returns ``folder`` as a ``Path``."""
    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
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


@contextlib.contextmanager
def staged_folder(dst: str | os.PathLike) -> Iterator[Path]:
    """``with staged_folder(dst) as stage:`` write everything into the empty ``stage``; when the
    block ends normally, ``stage`` replaces ``dst`` (:func:`publish_folder`); when it raises, ``stage``
    is deleted and ``dst`` is left as it was. ``stage`` is a hidden folder next to ``dst``."""
    dst = Path(dst)
    check_writable(dst.parent)
    dst.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.staging-"))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    try:
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


def replace_text(path: str | os.PathLike, text: str) -> None:
    """Write ``path`` through a temporary file and ``os.replace``: readers see the old or the new
    content, never a part, and a hard-linked original is left alone."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def replace_json(path: str | os.PathLike, data) -> None:
    replace_text(path, json.dumps(data, indent=2))


def disk_bytes(path: str | os.PathLike) -> int:
    """Bytes on disk of the file ``path``, or of every file under the folder ``path``."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
