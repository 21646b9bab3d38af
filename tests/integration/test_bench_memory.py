"""benchmarks/bench_memory.py on the smoke checkpoint: every step of notebooks 04-05 measured in
its own child process, and the disk it reports is the disk the outputs take."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_memory.py"
CHECKPOINT = REPO / "checkpoints" / "tiny-shapes-sd15"
STEPS = (
    "export_fp32",
    "export_fp16",
    "load_compile",
    "generate",
    "calibrate",
    "quantize_int8_weights",
    "quantize_hybrid",
    "quantize_full_int8",
)


def bench(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=1800
    )


def files_bytes(path: Path, until: float | None = None) -> int:
    """Bytes of the files under ``path`` (those modified at or before ``until``, when given)."""
    files = [p.stat() for p in path.rglob("*") if p.is_file()]
    return sum(f.st_size for f in files if until is None or f.st_mtime <= until)


@pytest.mark.slow
def test_every_step_has_a_peak_and_the_disk_it_reports_is_on_disk(tmp_path):
    from sdaccel.cpu.export import checkpoint_defaults

    out, work = tmp_path / "memory.json", tmp_path / "work"
    run = bench(
        str(CHECKPOINT), "--steps", "1", "--calib-samples", "2", "--calib-steps", "1",
        "--workdir", str(work), "--out", str(out),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["complete"] is True and list(results["steps"]) == list(STEPS)
    defaults = checkpoint_defaults(CHECKPOINT)
    assert results["image"] == [defaults.height, defaults.width]
    assert results["checkpoint"]["disk_bytes"] == files_bytes(CHECKPOINT)
    for name, step in results["steps"].items():
        assert step["ok"], (name, step.get("error"))
        # a child that imported torch or OpenVINO and ran a model holds well over 50 MiB
        assert step["peak_rss_gb"] > 0.05 and 0 < step["peak_anon_gb"] <= step["peak_rss_gb"], (name, step)
        assert step["wall_s"] > 0
    steps = results["steps"]
    for dtype in ("fp32", "fp16"):
        folder = work / f"export-{dtype}"
        assert steps[f"export_{dtype}"]["output"] == str(folder)
        # what the export wrote: its manifest comes last (a pipeline loaded later may cache files there)
        written = (folder / "sdaccel_export.json").stat().st_mtime
        assert steps[f"export_{dtype}"]["disk_bytes"] == files_bytes(folder, written) > 0
    assert steps["export_fp16"]["disk_bytes"] < steps["export_fp32"]["disk_bytes"]
    unet = work / "export-fp32" / "unet" / "openvino_model"
    unet_bytes = sum(unet.with_suffix(s).stat().st_size for s in (".xml", ".bin"))
    assert results["unet_f32_ir_bytes"] == unet_bytes
    for variant in ("int8_weights", "hybrid", "full_int8"):
        xml = work / f"unet_{variant}.xml"
        on_disk = xml.stat().st_size + xml.with_suffix(".bin").stat().st_size
        assert steps[f"quantize_{variant}"]["disk_bytes"] == on_disk < unet_bytes
    assert steps["calibrate"]["samples"] == 2 and steps["calibrate"]["disk_bytes"] > 0
    assert "unet" in steps["generate"]["precisions"]
    assert "quantize_full_int8" in run.stdout and f"wrote {out}" in run.stdout


def test_a_folder_it_did_not_make_is_refused_before_anything_runs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    run = bench(str(CHECKPOINT), "--workdir", str(work), "--out", str(tmp_path / "memory.json"))
    assert run.returncode != 0 and "not made by bench_memory.py" in run.stderr
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "memory.json").exists()
