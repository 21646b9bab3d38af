"""IR files on disk: saved so that a reader never takes a half-written one, checked before they
are read, and replaced by one writer at a time.

An IR is two files, an ``.xml`` graph and a ``.bin`` of weights, and no rename moves two files at
once. :func:`save_ir` writes a new pair under temporary names and renames the ``.bin``, then the
``.xml``, into place; :func:`check_ir` (and :func:`read_ir`, which reads through it) refuses a
pair that an interrupted save, a cut-short file or a broken copy left.

Faults from outside a call (a kill, Ctrl-C, a full disk, a second quantization of the same file)
never leave a half-written result: a quantized IR is written in a hidden working folder beside its
destination and moved into place at the end (:func:`ir_workspace`, :func:`publish_ir`), by one
writer at a time; what a killed writer left is removed, or put back, by the next one. A calibration
set replaces its folder whole (:mod:`sdaccel.cpu.calibration`). Each long
write checks the room on its disk first, and a full disk is reported as such, with what to do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sdaccel.core.checkpoint import CheckpointError
from sdaccel.core.faults import fault_point
from sdaccel.core.staging import check_writable, clear_leftovers, free_bytes, writer_lock


def unfinished_ir_files(xml: str | os.PathLike) -> list[Path]:
    """The temporary files of a save of the IR ``xml`` (:func:`save_ir`) that never finished:
    ``<stem>.tmp.xml`` and ``<stem>.tmp.bin`` beside it."""
    xml = Path(xml)
    return [
        p for p in (xml.with_name(xml.stem + ".tmp.xml"), xml.with_name(xml.stem + ".tmp.bin")) if p.exists()
    ]


def save_ir(model, xml: Path, compress_to_fp16: bool) -> None:
    """Save ``model`` as the IR ``xml`` (and its ``.bin``) so that a reader never takes a
    half-written one.

    1. Remove what an earlier, interrupted save of ``xml`` left (:func:`unfinished_ir_files`).
    2. Save to ``<stem>.tmp.xml`` / ``.tmp.bin``: a model read from ``xml`` (whose weights are
       memory-mapped) can be saved back over it. A failure here removes them; the old pair stays.
    3. Rename the ``.bin``, then the ``.xml``, into place. No rename moves two files at once: a
       process killed between the two leaves the new ``.bin`` beside the old ``.xml``, with the new
       ``.xml`` still under its temporary name, which is how :func:`check_ir` knows to refuse the
       pair. Any other failure there (Ctrl-C) still makes the second rename: both files are whole.
    """
    import openvino as ov

    # 1. What an interrupted save left
    xml = Path(xml)
    tmp, tmp_bin = xml.with_name(xml.stem + ".tmp.xml"), xml.with_name(xml.stem + ".tmp.bin")
    for path in unfinished_ir_files(xml):
        path.unlink()

    # 2. The new pair under temporary names
    try:
        ov.save_model(model, tmp, compress_to_fp16=compress_to_fp16)
        os.replace(tmp_bin, xml.with_suffix(".bin"))
    except BaseException as error:
        full = isinstance(error, RuntimeError) and free_bytes(xml.parent) < 2**20
        tmp.unlink(missing_ok=True)
        tmp_bin.unlink(missing_ok=True)
        if full:  # OpenVINO reports a full disk as an iostream error
            raise OSError(
                errno.ENOSPC,
                f"{os.strerror(errno.ENOSPC)} while saving {xml} (OpenVINO: {str(error).strip()}). Free "
                "some space (old exports and build/ folders are safe to delete) or choose an output "
                "folder on another disk.",
            ) from error
        raise

    # 3. The .bin is in place: its .xml must follow
    try:
        fault_point("export.ir-between-renames")
    finally:
        os.replace(tmp, xml)


def check_ir(xml: str | os.PathLike) -> Path:
    """Raise :class:`CheckpointError`, naming the file and the fix, unless ``xml`` and its ``.bin``
    are a whole pair that :func:`save_ir` finished; return ``xml`` as a ``Path``.

    Three checks, all without reading the weights: both files are there; no unfinished save of
    this IR is beside it (:func:`unfinished_ir_files`: its ``.bin`` may then belong to another
    ``.xml``); the ``.bin`` is as long as the ``.xml`` says its weights are (a file cut short by a
    full disk or a broken copy)."""
    xml = Path(xml)
    binary = xml.with_suffix(".bin")
    fix = (
        "Make it again: export_pipeline(..., force=True) for an exported model, or run again the "
        "quantization (or other step) that saved it"
    )
    if not xml.is_file() or not binary.is_file():
        missing = xml if not xml.is_file() else binary
        raise CheckpointError(f"Missing {missing}: the IR {xml} is incomplete. {fix}.")
    unfinished = unfinished_ir_files(xml)
    if unfinished:
        names = ", ".join(p.name for p in unfinished)
        raise CheckpointError(
            f"{xml} has {names} beside it: a save of this IR was interrupted (or is still running), "
            f"so its .xml and .bin may not match. {fix} (that save removes {names})."
        )
    needed = ir_weight_bytes(xml)
    size = binary.stat().st_size
    if size < needed:
        raise CheckpointError(
            f"{binary} is shorter ({size:,} bytes) than its {xml.name} needs ({needed:,} bytes): it was "
            f"cut short (a full disk, an interrupted copy). {fix}."
        )
    return xml


def ir_weight_bytes(xml: str | os.PathLike) -> int:
    """The bytes of the ``.bin`` that the IR ``xml`` reads: the end of its last constant."""
    text = Path(xml).read_text(errors="replace")
    ends = (int(offset) + int(size) for offset, size in re.findall(r'offset="(\d+)"\s+size="(\d+)"', text))
    return max(ends, default=0)


def read_ir(xml: str | os.PathLike, core=None):
    """``core.read_model(xml)`` (a new ``ov.Core`` by default) after :func:`check_ir`: an IR that
    an interrupted save or a cut-short file left is refused with the fix, not read."""
    import openvino as ov

    return (core or ov.Core()).read_model(str(check_ir(xml)))


#: The result's name in a working folder, and what :func:`publish_ir` leaves there while it
#: replaces the destination: a note that it began, and a hard link to the old ``.bin``.
RESULT_XML = "result.xml"


PUBLISHING = "publishing"


PREVIOUS_BIN = "previous.bin"


def working_folder_pattern(dst_xml: str | os.PathLike) -> str:
    """The glob, in ``dst_xml``'s folder, of the hidden working folders of its quantizations."""
    return f".{Path(dst_xml).stem}-parts-*"


def pending_xml(dst_xml: str | os.PathLike) -> Path:
    """Where :func:`publish_ir` puts the new ``.xml`` between its renames: ``<stem>.tmp.xml``, the
    name of an unfinished save (:func:`sdaccel.cpu.ir_files.save_ir`), so that a reader's
    :func:`sdaccel.cpu.ir_files.check_ir` refuses the pair meanwhile."""
    dst = Path(dst_xml)
    return dst.with_name(dst.stem + ".tmp.xml")


@contextlib.contextmanager
def ir_workspace(dst_xml: str | os.PathLike) -> Iterator[Path]:
    """``with ir_workspace(dst_xml) as work:`` be the only writer of the IR ``dst_xml``, working in
    ``work``: a new hidden folder beside it (``.<stem>-parts-*``, on the same file system), deleted
    when the block ends, however it ends.

    1. Take :func:`sdaccel.core.staging.writer_lock` on ``dst_xml``: a second writer says that it
       waits, and waits. The kernel releases the lock of a killed writer.
    2. Undo a :func:`publish_ir` that a killed writer left between its renames (:func:`put_back_ir`).
    3. Remove the working folders that killed writers left beside ``dst_xml``, saying how much it
       freed (:func:`sdaccel.core.staging.clear_leftovers`).
    4. Make the working folder.
    """
    dst = Path(dst_xml)
    check_writable(dst.parent)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(dst):
        pattern = working_folder_pattern(dst)
        for old in sorted(dst.parent.glob(pattern)):
            if put_back_ir(dst, old):
                print(
                    f"Put back {dst.with_suffix('.bin').name}, which an interrupted quantization had "
                    f"replaced: {dst.name} is the IR it was before.",
                    file=sys.stderr,
                )
        clear_leftovers(dst, [pattern])
        work = Path(tempfile.mkdtemp(prefix=pattern[:-1], dir=dst.parent))
        try:
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)


def publish_ir(result_xml: str | os.PathLike, dst_xml: str | os.PathLike) -> Path:
    """Move the finished IR ``result_xml`` (an ``.xml`` and its ``.bin`` in an
    :func:`ir_workspace`) to ``dst_xml``, replacing the IR there. No rename moves two files at
    once, so:

    1. the old ``.bin`` (if any) is kept by a hard link in the working folder, beside a note that
       publishing began;
    2. the new ``.xml`` goes beside ``dst_xml`` as :func:`pending_xml`;
    3. the new ``.bin`` replaces the old one;
    4. the new ``.xml`` replaces the old one.

    A failure between 2 and 4 puts the old ``.bin`` back at once (:func:`put_back_ir`); a process
    killed there leaves the note, and the next writer of ``dst_xml`` puts it back. Returns ``dst_xml``.
    """
    result, dst = Path(result_xml), Path(dst_xml)
    work, old_bin, pending = result.parent, dst.with_suffix(".bin"), pending_xml(dst)
    if old_bin.exists():
        try:
            os.link(old_bin, work / PREVIOUS_BIN)
        except OSError:  # no hard links on this file system
            shutil.copy2(old_bin, work / PREVIOUS_BIN)
    (work / PUBLISHING).write_text(str(dst))
    try:
        os.replace(result, pending)
        os.replace(result.with_suffix(".bin"), old_bin)
        fault_point("quantize.between-renames")
        os.replace(pending, dst)
    except BaseException:
        put_back_ir(dst, work)
        raise
    return dst


def put_back_ir(dst_xml: str | os.PathLike, work: str | os.PathLike) -> bool:
    """Undo a :func:`publish_ir` from the working folder ``work`` that stopped between its renames:
    the old ``.bin`` back (or the new one removed, where there was none), the new ``.xml`` removed,
    so that ``dst_xml`` is the IR it was. Returns whether there was one to undo."""
    dst, work = Path(dst_xml), Path(work)
    pending = pending_xml(dst)
    if not (work / PUBLISHING).is_file() or not pending.exists():
        return False
    if (work / PREVIOUS_BIN).exists():
        os.replace(work / PREVIOUS_BIN, dst.with_suffix(".bin"))
    else:
        dst.with_suffix(".bin").unlink(missing_ok=True)
    pending.unlink()
    return True


#: What to do when a disk is full: the end of every such message here.
FREE_SPACE_FIX = (
    "Free some space (old exports and build/ folders are safe to delete) or choose an output folder "
    "on another disk."
)


def full_disk_error(exc: OSError, what: str, after: str = "") -> OSError | None:
    """The error to raise for ``exc``, met during ``what``: ``None`` (raise ``exc`` as it is) unless
    it is a full disk (``ENOSPC``) that does not name the fix yet; else an ``OSError(ENOSPC)`` that
    says the disk is full, during what, and what to do (then ``after``: what was kept)."""
    if exc.errno != errno.ENOSPC or "Not enough free disk" in str(exc):
        return None
    detail = (exc.strerror or str(exc)).strip().rstrip(".")
    fix = "" if "Free some space" in detail else " " + FREE_SPACE_FIX
    return OSError(errno.ENOSPC, f"{what} stopped: the disk is full ({detail}).{fix}{after}")


@contextlib.contextmanager
def reporting_full_disk(what: str) -> Iterator[None]:
    """``with reporting_full_disk(what):`` re-raise a full disk met inside as :func:`full_disk_error`
    says (what stopped, and the fix); any other error as it is."""
    try:
        yield
    except OSError as exc:
        error = full_disk_error(exc, what)
        if error is None:
            raise
        raise error from exc


def size_text(nbytes: float) -> str:
    """``nbytes`` for a message: in GiB from 1 GiB up, else in MiB."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"
