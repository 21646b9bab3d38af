"""Notebook 06's steps (sdaccel.course.cpu_benchmark): the benchmark's command line and quiet run,
the per-step table, the post's claims beside the committed runs, the baseline's spread and the
price tables, each read from the files kept in benchmarks/results."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from sdaccel.course import cpu_benchmark as cb
from sdaccel.course import whole_image

ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "benchmarks" / "results"
PRICES = {"2-vCPU VM": 0.10, "64-vCPU Xeon VM": 3.40, "TPU v5e-4": 4.80}


def test_the_command_line_names_every_setting_and_deepcache_only_with_it(tmp_path):
    args = dict(
        latent=8, iters=1, calibration_samples=2, quant_memory_limit_gb=4.0, workdir="w", out="o.json"
    )
    plain = cb.benchmark_command("bench.py", "m", ["torch_fp32", "full_int8"], **args)
    assert plain[:2] == [sys.executable, "bench.py"]
    text = " ".join(plain[2:])
    assert text == (
        "--models m --variants torch_fp32 full_int8 --batch 2 --latent 8 --iters 1 --calib-samples 2 "
        "--quant-memory-limit-gb 4.0 --workdir w --out o.json"
    )
    cached = cb.benchmark_command(
        "bench.py", "m", ["ov_bf16"], **args, speedups=["deepcache"], deepcache_intervals=[5, 2, 2]
    )
    assert cached[-5:] == ["--levers", "deepcache", "--deepcache-intervals", "2", "5"]


def test_the_run_is_quiet_and_a_failure_shows_the_logs_end(tmp_path, capsys):
    out, log = tmp_path / "r.json", tmp_path / "r.log"
    write = f"import json; print('child noise'); json.dump({{'models': {{}}}}, open({str(out)!r}, 'w'))"
    assert cb.run_benchmark([sys.executable, "-c", write], out, log) == {"models": {}}
    assert capsys.readouterr().out == "" and "child noise" in log.read_text()
    with pytest.raises(RuntimeError, match=r"exit 3[\s\S]*last words"):
        cb.run_benchmark([sys.executable, "-c", "print('last words'); raise SystemExit(3)"], out, log)


def test_the_step_table_has_a_row_per_variant_and_dashes_where_unmeasured():
    speed = {
        "torch_fp32": dict(
            s_per_step=2.0, vs_torch_fp32=1.0, vs_ov_bf16=None, cpu_s_per_step=4.0, cpu_vs_torch_fp32=1.0
        ),
        "ov_f32": dict(
            s_per_step=1.0, vs_torch_fp32=2.0, vs_ov_bf16=None, cpu_s_per_step=2.0, cpu_vs_torch_fp32=2.0
        ),
    }
    variants = {"torch_fp32": {"precision": "f32", "size_bytes": 3e9}, "ov_f32": {"precision": "f32"}}
    lines = cb.step_table(speed, variants).splitlines()
    assert len(lines) == 4 and lines[1] == "|---|---|---:|---:|---:|---:|---:|---:|"
    assert lines[2] == "| torch_fp32 | f32 | 2.000 | 1.00 | - | 4.000 | 1.00 | 3000 |"
    assert lines[3] == "| ov_f32 | f32 | 1.000 | 2.00 | - | 2.000 | 2.00 | - |"


def test_the_claims_table_reads_each_committed_run():
    text = cb.claimed_and_measured(KEPT)
    gains = cb.amx_int8_gain(KEPT)
    assert len(gains) >= 3 and all(1 < g < 1.5 for g in gains.values())  # not the VNNI CPUs' 1.5-2.4x
    for name, gain in gains.items():
        assert f"| {gain:.2f}x | per UNet step, 2-core AMX Xeon: {name} |" in text
        bf16 = json.loads((KEPT / name).read_text())["models"]["sd15"]["speedup"]["ov_bf16"]["vs_torch_fp32"]
        assert f"| 1.93x | {bf16:.2f}x | per UNet step, 2-core AMX Xeon: {name} |" in text  # 32.3 / 16.7
    static = [line for line in text.splitlines() if line.startswith("| static shapes")]
    assert len(static) == 1 and "| 3.55x |" in static[0] and cb.STATIC_FILE in static[0]
    low, high = (float(x) for x in static[0].split("|")[3].replace("x", "").split(" to "))
    assert 1 < low <= high < 1.5  # far from the post's 3.55x


def test_the_baseline_spread_lists_every_run_of_the_same_cpu():
    table = whole_image.read_table(KEPT / "whole_image_sd15.json")
    spread = cb.baseline_spread(KEPT, table)
    assert (
        "whole_image_sd15.json" in spread["files"]
        and "whole_image_sd15_epyc_avx2.json" not in spread["files"]
    )
    seconds = sorted(spread["files"].values())
    assert spread["min"][0] == seconds[0] and spread["max"][0] == seconds[-1]
    assert spread["median"][0] == statistics.median_low(seconds)
    assert spread["files"][spread["median"][1]] == spread["median"][0]
    sentence = cb.spread_sentence(spread, "whole_image_sd15.json", table["rows"]["torch_fp32_20"]["image_s"])
    assert f"min {seconds[0]:.1f} s ({spread['min'][1]})" in sentence
    sdxl = cb.baseline_spread(KEPT, whole_image.read_table(KEPT / "whole_image_sdxl.json"))
    assert list(sdxl["files"]) == ["whole_image_sdxl.json"]
    assert "the only committed run" in cb.spread_sentence(sdxl, "whole_image_sdxl.json", 1.0)


def test_prices_group_by_job_and_name_the_missing_price():
    tables = [whole_image.read_table(KEPT / name, quality=KEPT) for name in whole_image.CORE_FILES]
    report = cb.price_report(tables, PRICES, {("SD 1.5", 512, 20): {"your CPU: x": ("2-vCPU VM", 36.0)}})
    groups = report["groups"]
    assert set(groups) == {("SD 1.5", 512, 20), ("SD 1.5", 512, 4), ("SDXL", 1024, 20), ("SDXL", 1024, 4)}
    mine = groups[("SD 1.5", 512, 20)]["your CPU: x"]
    assert mine["images_per_dollar"] == pytest.approx(3600 / 36.0 / 0.10)
    tpu = groups[("SDXL", 1024, 20)]["TPU v5e-4 (post): JAX, 4 images per call"]
    assert tpu["images_per_dollar"] == pytest.approx(3600 / (2.33 / 4) / 4.80)
    titles = [title for title, _ in report["tables"]]
    assert titles[0] == "SD 1.5 at 512x512, 20 steps" and len(titles) == 4
    assert report["sentences"][0].startswith("SDXL at 20 steps, like for like: the TPU v5e-4 gives 1288")
    with pytest.raises(KeyError, match="add it to PRICE_PER_HOUR"):
        cb.price_report(tables, {"TPU v5e-4": 4.8, "64-vCPU Xeon VM": 3.4})
