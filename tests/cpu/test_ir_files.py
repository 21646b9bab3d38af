"""IR files on disk: a save leaves a whole pair, a reader refuses a pair an interrupted save or a
cut-short file left, a quantization publishes its result into place (and is put back when stopped
between its renames), and a full disk is reported with the fix. (Kills and full disks from outside:
tests/faults/test_cpu_export_faults.py and test_cpu_quantize_faults.py.)"""

from __future__ import annotations

import errno

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from sdaccel.core.checkpoint import CheckpointError  # noqa: E402
from sdaccel.cpu import ir_files  # noqa: E402


def _model(value: float = 1.0):
    import openvino.opset13 as ops

    x = ops.parameter([1, 64], np.float32, name="x")
    return ov.Model([ops.matmul(x, ops.constant(np.full((64, 32), value, np.float32)), False, False)], [x])


def test_a_saved_ir_is_a_whole_pair_that_reads_back(tmp_path):
    xml = tmp_path / "model.xml"
    (tmp_path / "model.tmp.xml").write_text("left by an interrupted save")
    ir_files.save_ir(_model(), xml, compress_to_fp16=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin", "model.xml"]
    assert ir_files.ir_weight_bytes(xml) == xml.with_suffix(".bin").stat().st_size == 64 * 32 * 4
    assert ir_files.check_ir(xml) == xml
    assert [p.get_any_name() for p in ir_files.read_ir(xml).inputs] == ["x"]


def test_a_pair_that_is_not_whole_is_refused(tmp_path):
    xml = tmp_path / "model.xml"
    ir_files.save_ir(_model(), xml, compress_to_fp16=False)
    pending = ir_files.pending_xml(xml)
    pending.write_text("")
    assert ir_files.unfinished_ir_files(xml) == [pending]
    with pytest.raises(CheckpointError, match=r"model\.tmp\.xml.*interrupted"):
        ir_files.read_ir(xml)
    pending.unlink()
    binary = xml.with_suffix(".bin")
    binary.write_bytes(binary.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="shorter"):
        ir_files.check_ir(xml)
    binary.unlink()
    with pytest.raises(CheckpointError, match=r"Missing .*model\.bin"):
        ir_files.check_ir(xml)


def test_a_result_is_published_into_place_or_put_back(tmp_path):
    dst = tmp_path / "q.xml"
    ir_files.save_ir(_model(1.0), dst, compress_to_fp16=False)
    old = dst.with_suffix(".bin").read_bytes()
    with ir_files.ir_workspace(dst) as work:
        assert work.parent == tmp_path and work.match(ir_files.working_folder_pattern(dst))
        ir_files.save_ir(_model(2.0), work / ir_files.RESULT_XML, compress_to_fp16=False)
        assert ir_files.publish_ir(work / ir_files.RESULT_XML, dst) == dst
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.bin", "q.xml"]
    assert dst.with_suffix(".bin").read_bytes() != old
    # stopped between the renames: the next writer puts the old .bin back
    new = dst.with_suffix(".bin").read_bytes()
    with ir_files.ir_workspace(dst) as work:
        ir_files.save_ir(_model(3.0), work / ir_files.RESULT_XML, compress_to_fp16=False)
        ir_files.put_back_ir(dst, work)  # nothing published yet: nothing to undo
        (work / ir_files.PUBLISHING).write_text(str(dst))
        (work / ir_files.PREVIOUS_BIN).write_bytes(new)
        (work / ir_files.RESULT_XML).rename(ir_files.pending_xml(dst))
        (work / "result.bin").replace(dst.with_suffix(".bin"))
        assert ir_files.put_back_ir(dst, work)
    assert dst.with_suffix(".bin").read_bytes() == new and ir_files.check_ir(dst) == dst


def test_a_full_disk_is_reported_with_the_fix():
    full = ir_files.full_disk_error(OSError(errno.ENOSPC, "No space left on device"), "Saving x")
    assert full.errno == errno.ENOSPC and str(full).startswith(
        "[Errno 28] Saving x stopped: the disk is full"
    )
    assert ir_files.FREE_SPACE_FIX in str(full)
    assert ir_files.full_disk_error(OSError(errno.EACCES, "denied"), "Saving x") is None
    with pytest.raises(OSError, match="Writing y stopped: the disk is full"):
        with ir_files.reporting_full_disk("Writing y"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert ir_files.size_text(3 * 2**30) == "3.00 GiB" and ir_files.size_text(5 * 2**20) == "5 MiB"
