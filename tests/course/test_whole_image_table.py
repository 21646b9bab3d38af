"""sdaccel.course.whole_image's table of a bench_whole_image.py JSON: the rows notebook 06 opens with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdaccel.course import whole_image, whole_image_rows

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "benchmarks" / "results" / "whole_image_sd15.json"
FLAGS = {"avx2": True, "avx512f": True, "avx512_vnni": True, "avx512_bf16": False, "amx_tile": False}


def _row(title, image, encode=None, denoise=None, decode=None, denoise_decode=None, **extra):
    median = {
        "image_s": image,
        "runs": 2,
        "encode_s": encode,
        "denoise_s": denoise,
        "decode_s": decode,
        "denoise_decode_s": denoise_decode,
        "ratio": None,  # what the benchmark stored while running: the reader recomputes it
    }
    return {"title": title, "ok": True, "median": median, "load_avg": [1.0, 1.5], **extra}


def _results(**overrides) -> dict:
    rows = {
        # deliberately out of display order: the reader sorts them as the benchmark lists them
        "jax_lcm4_lora_taesd": _row(
            "JAX, 4 steps", 25.0, encode=0.5, denoise_decode=24.0, compile_s=30.0, precision={"all": "f32"}
        ),
        "torch_fp32_20": _row(
            "PyTorch fp32", 400.0, 4.0, 356.0, 40.0, 396.0, precision={"unet": "f32"}, unet_batch=2
        ),
        "ov_float_20": _row("OpenVINO float", 160.0, 1.0, 119.0, 40.0, 159.0, precision={"unet": "bf16"}),
        "lcm4_lora_int8": _row(
            "4 steps LCM", 50.0, 0.5, 29.3, 20.0, 49.3, precision={"unet": "bf16"}, unet_layers={"i8": 3}
        ),
        "ov_full_int8_20": {
            "title": "OpenVINO full_int8",
            "ok": False,
            "error": "killed: RSS | above\nlimit",
        },
    }
    results = {
        "machine": {"cpu": "Intel Xeon", "logical_cores": 4, "cpu_flags": FLAGS},
        "settings": {"model": "sd15", "size": 512, "steps": 20, "few_steps": 4, "runs": 2, "quick": False},
        "command": "python benchmarks/bench_whole_image.py sd15",
        "rows": rows,
    }
    results.update(overrides)
    return results


def test_rows_come_in_the_benchmarks_order_with_ratios_to_the_torch_row(tmp_path):
    path = tmp_path / "whole.json"
    path.write_text(json.dumps(_results()))
    table = whole_image.read_table(path)
    assert list(table["rows"]) == [
        "torch_fp32_20",
        "ov_float_20",
        "ov_full_int8_20",
        "lcm4_lora_int8",
        "jax_lcm4_lora_taesd",
    ]
    rows = table["rows"]
    assert table["baseline_s"] == 400.0
    assert rows["torch_fp32_20"]["x_torch_fp32"] == 1.0
    assert rows["ov_float_20"]["x_torch_fp32"] == pytest.approx(2.5)
    assert rows["lcm4_lora_int8"]["x_torch_fp32"] == pytest.approx(8.0)
    assert rows["jax_lcm4_lora_taesd"]["x_torch_fp32"] == pytest.approx(16.0)
    assert rows["ov_float_20"]["precision"] == "bf16"
    assert rows["jax_lcm4_lora_taesd"]["precision"] == "f32"  # precision {"all": ...}
    assert [rows[k]["steps"] for k in ("torch_fp32_20", "lcm4_lora_int8", "jax_lcm4_lora_taesd")] == [
        20,
        4,
        4,
    ]
    assert table["machine"] == {"cpu": "Intel Xeon", "logical_cores": 4, "flags": FLAGS}
    assert table["shared_cpu"] is False  # load 1.5 on 4 cores
    assert whole_image.read_table(_results()) == table  # a loaded dict reads the same


def test_a_failed_row_is_kept_with_its_error_and_no_times():
    row = whole_image.read_table(_results())["rows"]["ov_full_int8_20"]
    assert row["ok"] is False
    assert row["error"].startswith("killed")
    assert row["image_s"] is None and row["x_torch_fp32"] is None and row["decode_s"] is None
    assert whole_image.segments(row) == []
    # ok but no median (a row cut short): shown as failed, not dropped
    data = _results()
    data["rows"]["ov_float_20"].pop("median")
    row = whole_image.read_table(data)["rows"]["ov_float_20"]
    assert row["ok"] is False and row["error"] == "no whole-image time recorded"


def test_without_a_torch_row_the_ratios_are_none_and_the_findings_say_so():
    for drop in ("missing", "failed"):
        data = _results()
        if drop == "missing":
            del data["rows"]["torch_fp32_20"]
        else:
            data["rows"]["torch_fp32_20"] = {"title": "PyTorch fp32", "ok": False, "error": "killed"}
        table = whole_image.read_table(data)
        assert table["baseline_s"] is None
        assert all(row["x_torch_fp32"] is None for row in table["rows"].values())
        (sentence,) = whole_image.findings(table)
        assert "JAX, 4 steps" in sentence and "25.0 s" in sentence and "no PyTorch fp32 row" in sentence


def test_segments_add_up_to_the_whole_image_with_or_without_a_split():
    rows = whole_image.read_table(_results())["rows"]
    assert whole_image.segments(rows["torch_fp32_20"]) == [
        ("encode", 4.0),
        ("denoise", 356.0),
        ("decode", 40.0),
    ]
    # a JAX row: denoise and decode are one program; 0.5 s of the call is outside the parts
    assert whole_image.segments(rows["jax_lcm4_lora_taesd"]) == [
        ("encode", 0.5),
        ("denoise + decode", 24.0),
        ("rest", 0.5),
    ]
    # rest below 1% of the image is timer noise, not a part
    assert [name for name, _ in whole_image.segments(rows["lcm4_lora_int8"])] == [
        "encode",
        "denoise",
        "decode",
    ]
    data = _results()
    data["rows"]["ov_float_20"]["median"].update(
        encode_s=None, denoise_s=None, decode_s=None, denoise_decode_s=None
    )
    row = whole_image.read_table(data)["rows"]["ov_float_20"]
    assert whole_image.segments(row) == [("whole image", 160.0)]
    assert row["x_torch_fp32"] == pytest.approx(2.5)  # the ratio needs no split


def test_findings_are_computed_from_the_rows():
    text = whole_image.findings(whole_image.read_table(_results()))
    assert text[0] == (
        "On Intel Xeon the fastest configuration, JAX, 4 steps, made an image in 25.0 s: 16.0x faster "
        "than PyTorch fp32 at 20 steps (400.0 s)."
    )
    # the fastest was a 4-step row, so the fastest at 20 steps is named too
    assert text[1] == "At the same 20 steps the fastest was OpenVINO float (2.5x); 4 steps took it to 16.0x."
    # encode + decode: torch (4 + 40) / 400 = 11%; 4 steps LCM (0.5 + 20) / 50 = 41%, OpenVINO float 26%
    assert text[2].startswith("Encode and decode were 11% of PyTorch fp32's image and 41% of 4 steps LCM's")
    assert "weighs more" in text[2]
    only_failed = _results(rows={"ov_float_20": {"title": "x", "ok": False, "error": "boom"}})
    assert whole_image.findings(whole_image.read_table(only_failed)) == [
        "No configuration of this file finished: it holds failed rows only."
    ]


def test_markdown_has_one_line_per_row():
    table = whole_image.read_table(_results())
    lines = whole_image.markdown_table(table).splitlines()
    assert lines[0].startswith("| configuration | whole image s |") and "x PyTorch fp32, 20 steps" in lines[0]
    assert len(lines) == 2 + len(table["rows"])
    width = lines[0].count("|")
    assert all(line.count("|") == width for line in lines), "an error's '|' must not add a column"
    body = dict(zip(table["rows"], lines[2:], strict=True))
    assert body["ov_float_20"] == "| OpenVINO float | 160.00 | 1.00 | 119.00 | 40.00 | 2.50 | bf16 |"
    assert body["jax_lcm4_lora_taesd"] == (
        "| JAX, 4 steps | 25.00 | 0.50 | 24.00 with the decode | = | 16.00 | f32 |"
    )
    assert "failed" in body["ov_full_int8_20"] and "killed: RSS / above limit" in body["ov_full_int8_20"]
    assert "load" not in whole_image.markdown_table(table)  # the load is a note of the benchmark's table
    noted = whole_image.markdown_table(table, notes=True).splitlines()
    assert len(noted) == len(lines) and all(line.count("|") == width + 2 for line in noted)
    assert noted[2 + list(table["rows"]).index("jax_lcm4_lora_taesd")].endswith(
        "| - | compile 30 s apart; load 1.0-1.5 |"
    )


def test_cpu_seconds_add_two_columns_and_their_own_ratio():
    table = whole_image.read_table(_results())
    assert table["has_cpu_s"] is False and table["baseline_cpu_s"] is None  # files of before
    assert table["rows"]["ov_float_20"]["cpu_s"] is None
    assert table["rows"]["ov_float_20"]["x_torch_fp32_cpu"] is None
    data = _results()
    data["rows"]["torch_fp32_20"]["median"]["cpu_s"] = 780.0  # two cores, nearly both busy
    data["rows"]["ov_float_20"]["median"]["cpu_s"] = 260.0
    data["rows"]["jax_lcm4_lora_taesd"]["median"]["cpu_s"] = 39.0
    table = whole_image.read_table(data)
    assert table["has_cpu_s"] is True and table["baseline_cpu_s"] == 780.0
    assert table["rows"]["ov_float_20"]["x_torch_fp32_cpu"] == pytest.approx(3.0)  # 2.5x by wall
    assert table["rows"]["lcm4_lora_int8"]["cpu_s"] is None  # a row without: "-", no ratio
    lines = whole_image.markdown_table(table).splitlines()
    assert "| x PyTorch fp32, 20 steps | CPU s | x PyTorch fp32 (CPU s) | precision (UNet) |" in lines[0]
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    body = dict(zip(table["rows"], lines[2:], strict=True))
    assert (
        body["ov_float_20"]
        == "| OpenVINO float | 160.00 | 1.00 | 119.00 | 40.00 | 2.50 | 260.00 | 3.00 | bf16 |"
    )
    assert body["lcm4_lora_int8"].endswith("| 8.00 | - | - | bf16 |")
    first = whole_image.findings(table)[0]
    assert first.endswith(
        "16.0x faster than PyTorch fp32 at 20 steps (400.0 s), and 20.0x in CPU seconds (39.0 against "
        "780.0), which other work on the same cores changes less than the wall time."
    )


def test_a_shared_cpu_is_flagged_from_the_load_above_the_cores():
    data = _results()
    data["rows"]["ov_float_20"]["load_avg"] = [3.0, 5.5]  # 4 cores
    assert whole_image.read_table(data)["shared_cpu"] is True
    # up to one above the core count: the run's own processes (a run alone reaches 2.3 on 2 cores)
    data["rows"]["ov_float_20"]["load_avg"] = [3.0, 4.0 + whole_image.SHARED_LOAD_MARGIN]
    assert whole_image.read_table(data)["shared_cpu"] is False


def test_bad_input_gets_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench_whole_image.py"):
        whole_image.read_table(tmp_path / "nope.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"models": {}}))
    with pytest.raises(ValueError, match=r"not a benchmarks/bench_whole_image.py JSON.*'machine'"):
        whole_image.read_table(other)


def test_format_table_is_the_benchmarks_table():
    data = _results(tpu=None)
    text = whole_image.format_table(data)
    assert text.splitlines()[0] == (
        "sd15 (real architecture, random weights), 512x512, one image per call; Intel Xeon, 4 cores, "
        "median of 2 runs after a warm-up"
    )
    assert "| UNet batch | notes |" in text and "TPU v5e" not in text
    data["tpu"] = {
        "program": "SDXL, 4 steps",
        "flops": 37.6e12,
        "unet_flops": 27.1e12,
        "decode": {"flops": 10.5e12},
        "floor_s": 0.191,
        "peak_flops": 197e12,
    }
    assert whole_image.format_table(data).endswith(
        "TPU v5e, SDXL, 4 steps: 37.6 TFLOP per image (UNet 27.1, decode 10.5), floor 191 ms at 197 TFLOP/s"
    )


def test_the_benchmarks_table_has_the_toys_quality_when_given():
    data = _results(tpu=None)
    quality = _quality(torch_fp32_20=0.958, ov_float_20=0.938)
    lines = whole_image.format_table(data, quality=quality).splitlines()
    assert "| adherence (tiny trained model) | PSNR dB vs f32 (tiny trained model) |" in lines[2]
    row = next(line for line in lines if line.startswith(f"| {data['rows']['ov_float_20']['title']} |"))
    assert "| 0.938 | 30.0 |" in row
    assert "adherence (tiny trained model)" not in whole_image.format_table(data)


@pytest.mark.parametrize("name", whole_image.REFERENCE_FILES)
def test_the_committed_results_read(name):
    path = COMMITTED.parent / name
    assert whole_image.reference_files(COMMITTED.parent, path) == [path]  # kept in the repository
    data = json.loads(path.read_text())
    table = whole_image.read_table(path)
    assert not table["settings"]["quick"]  # real architectures, not the self-check
    assert set(table["rows"]) == set(data["rows"])
    base = data["rows"]["torch_fp32_20"]["median"]["image_s"]
    for key, row in table["rows"].items():
        raw = data["rows"][key]
        assert row["ok"] == bool(raw["ok"])
        if row["ok"]:
            assert row["image_s"] == raw["median"]["image_s"] > 0
            assert row["x_torch_fp32"] == pytest.approx(base / raw["median"]["image_s"])
            parts = whole_image.segments(row)
            assert sum(s for _, s in parts) == pytest.approx(row["image_s"], rel=0.011)
    assert table["rows"]["torch_fp32_20"]["x_torch_fp32"] == 1.0
    assert table["machine"]["cpu"] == data["machine"]["cpu"] and table["machine"]["flags"]
    lines = whole_image.markdown_table(table).splitlines()
    assert len(lines) == 2 + len(data["rows"])
    assert whole_image.findings(table)[0].startswith(f"On {data['machine']['cpu']} the fastest configuration")


def test_the_benchmark_script_uses_this_table():
    # one table code: the script imports it instead of keeping its own copy
    source = (ROOT / "benchmarks" / "bench_whole_image.py").read_text()
    assert "from sdaccel.course.whole_image import ROWS, format_table" in source
    assert "def format_table" not in source
    assert whole_image.ROWS[0] == whole_image.BASELINE  # the baseline leads every table


def _composed(data: dict, key: str, from_steps=(1, 2)) -> None:
    data["rows"][key]["composed"] = {"from_steps": list(from_steps)}
    data["rows"][key]["median"]["composed"] = {"from_steps": list(from_steps), "step_s": 19.5, "runs": 1}


def test_a_composed_row_says_so_in_its_title_the_tables_and_the_findings():
    data = _results()
    _composed(data, "torch_fp32_20")
    _composed(data, "ov_float_20")
    data["settings"]["compose"] = [1, 2]
    table = whole_image.read_table(data)
    rows = table["rows"]
    assert rows["torch_fp32_20"]["composed"] == {"from_steps": [1, 2]}
    assert rows["lcm4_lora_int8"]["composed"] is None  # measured end to end
    assert rows["torch_fp32_20"]["title"] == "PyTorch fp32 (composed from calls of 1 and 2 steps)"
    assert rows["ov_float_20"]["x_torch_fp32"] == pytest.approx(2.5)  # the ratios as before
    lines = whole_image.markdown_table(table).splitlines()
    body = dict(zip(table["rows"], lines[2:], strict=True))
    assert body["ov_float_20"].startswith(
        "| OpenVINO float (composed from calls of 1 and 2 steps) | 160.00 |"
    )
    assert "composed" not in body["lcm4_lora_int8"]
    text = whole_image.findings(table)
    assert text[0].endswith("faster than PyTorch fp32 at 20 steps (400.0 s, composed).")
    assert text[1].startswith("At the same 20 steps the fastest was OpenVINO float (composed from calls of 1")
    assert "of PyTorch fp32's composed image" in text[2]
    assert text[-1] == (
        "The 2 row(s) marked composed were not run end to end: each is a call of fewer steps plus the "
        "missing steps at one step's time, the difference of calls of 1 and 2 steps."
    )
    head = whole_image.format_table(data).splitlines()[0]
    assert head.endswith(
        "; rows marked composed: 20 steps composed from calls of 1 and 2 steps, not run end to end"
    )


def test_a_composed_fastest_row_is_not_said_to_have_made_an_image():
    data = _results()
    del data["rows"]["jax_lcm4_lora_taesd"], data["rows"]["lcm4_lora_int8"]
    _composed(data, "ov_float_20", (1, 3))
    data["rows"]["ov_float_20"]["title"] = "OpenVINO float (composed)"  # already labelled: kept as is
    table = whole_image.read_table(data)
    assert table["rows"]["ov_float_20"]["title"] == "OpenVINO float (composed)"
    first, *_, last = whole_image.findings(table)
    assert first.startswith(
        "On Intel Xeon the fastest configuration, OpenVINO float (composed), comes to an image in 160.0 s: "
    )
    assert first.endswith("at 20 steps (400.0 s).")  # the PyTorch row itself ran whole
    assert last.startswith("The 1 row(s) marked composed") and "calls of 1 and 3 steps" in last
    # a file without composed rows has no such sentence, and its settings line no such note
    plain = whole_image.read_table(_results())
    assert not any("composed" in t for t in whole_image.findings(plain))
    assert "composed" not in whole_image.format_table(_results())


def test_further_int8_recipes_sort_beside_the_first():
    data = _results()
    data["rows"]["lcm4_lora_full_int8_taesd"] = _row(
        "4 steps LCM, full INT8, TAESD", 10.0, 0.5, 9.0, 0.5, 9.5
    )
    data["rows"]["lcm4_lora_int8_taesd"] = _row("4 steps LCM, TAESD", 20.0, 0.5, 19.0, 0.5, 19.5)
    data["rows"]["something_new"] = _row("unknown", 30.0)
    table = whole_image.read_table(data)
    keys = list(table["rows"])
    assert keys.index("lcm4_lora_int8_taesd") + 1 == keys.index("lcm4_lora_full_int8_taesd")
    assert keys.index("lcm4_lora_full_int8_taesd") < keys.index("jax_lcm4_lora_taesd")
    assert keys[-1] == "something_new"
    assert table["rows"]["lcm4_lora_full_int8_taesd"]["steps"] == 4
    assert table["rows"]["lcm4_lora_full_int8_taesd"]["x_torch_fp32"] == pytest.approx(40.0)


def test_reference_files_are_the_kept_runs_or_the_given_ones(tmp_path):
    (tmp_path / "whole_image_sdxl.json").write_text("{}")
    assert whole_image.reference_files(tmp_path) == [tmp_path / "whole_image_sdxl.json"]
    (tmp_path / "whole_image_sd15.json").write_text("{}")
    assert [p.name for p in whole_image.reference_files(tmp_path)] == [
        "whole_image_sd15.json",
        "whole_image_sdxl.json",
    ]
    (tmp_path / "whole_image_sd15_stack.json").write_text("{}")
    (tmp_path / "whole_image_sd15_float_resnets.json").write_text("{}")
    (tmp_path / "whole_image_sd15_layer_cut.json").write_text("{}")
    assert [p.name for p in whole_image.reference_files(tmp_path)] == list(whole_image.REFERENCE_FILES)
    mine = tmp_path / "mine.json"
    mine.write_text("{}")
    assert whole_image.reference_files(tmp_path, str(mine)) == [mine]
    assert whole_image.reference_files(tmp_path, [mine, tmp_path / "whole_image_sd15.json"])[0] == mine
    with pytest.raises(FileNotFoundError, match="no whole-image results at .*nope.json"):
        whole_image.reference_files(tmp_path, [mine, tmp_path / "nope.json"])
    with pytest.raises(FileNotFoundError, match="looked for whole_image_sd15.json"):
        whole_image.reference_files(tmp_path / "empty")


def test_describe_names_the_runs_and_the_cpu():
    table = whole_image.read_table(_results())
    first, second = whole_image.describe(table, "whole.json", "AVX-512 VNNI, no BF16")
    assert first == (
        "whole.json: SD 1.5 at 512x512, one image per call; one warm-up call, then 2 timed calls "
        "(the table shows the median)."
    )
    assert second.startswith(
        "Measured on Intel Xeon, 4 logical cores, AVX-512 VNNI, no BF16 (flags present: avx2,"
    )
    assert second.endswith("absent: avx512_bf16, amx_tile).")
    data = _results()
    _composed(data, "torch_fp32_20")
    data["settings"]["compose"] = [1, 2]
    first, _ = whole_image.describe(whole_image.read_table(data), "x.json", "AMX")
    assert first.endswith("rows marked composed timed calls of 1 and 2 steps instead.")
    data["settings"]["model"] = "sdxl"
    first, _ = whole_image.describe(whole_image.read_table(data), "x.json", "AMX")
    assert first.startswith("x.json: SDXL at 512x512,")
    assert whole_image.model_name("my-model") == "my-model"


def _quality(**rows) -> dict:
    """A sdaccel.toy.whole_image_quality result with the given rows' adherence (PSNR 30 dB each)."""
    return {
        "checkpoint": "checkpoints/tiny-shapes-sd15",
        "config": {"prompts": 96},
        "machine": {"isa": "AVX2"},
        "command": "python -m sdaccel.toy.whole_image_quality checkpoints/tiny-shapes-sd15",
        "rows": {key: {"adherence": a, "psnr_vs_f32": 30.0} for key, a in rows.items()},
    }


def test_quality_puts_each_recipes_adherence_beside_its_seconds():
    data = _results()
    data["settings"]["lcm_variant"] = ["full_int8", "hybrid"]  # the few-step row's recipe: full INT8
    quality = _quality(
        torch_fp32_20=0.958, ov_float_20=0.958, lcm4_lora_full_int8=0.74, lcm4_lora_int8_weights=0.9
    )
    table = whole_image.read_table(data, quality=quality)
    rows = table["rows"]
    assert rows["lcm4_lora_int8"]["adherence"] == 0.74  # by the run's recipe, not by the row's key
    assert rows["ov_float_20"]["adherence"] == 0.958 and rows["ov_float_20"]["psnr_vs_f32"] == 30.0
    assert rows["jax_lcm4_lora_taesd"]["adherence"] is None  # a recipe the toy did not run
    assert table["quality"] == {
        "checkpoint": "tiny-shapes-sd15",
        "prompts": 96,
        "isa": "AVX2",
        "command": quality["command"],
    }
    lines = whole_image.markdown_table(table).splitlines()
    assert (
        "| adherence (tiny trained model) | PSNR dB vs f32 (tiny trained model) | precision (UNet) |"
        in lines[0]
    )
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    body = dict(zip(rows, lines[2:], strict=True))
    assert (
        body["ov_float_20"]
        == "| OpenVINO float | 160.00 | 1.00 | 119.00 | 40.00 | 2.50 | 0.958 | 30.0 | bf16 |"
    )
    assert body["jax_lcm4_lora_taesd"].endswith("| 16.00 | - | - | f32 |")
    assert whole_image.describe(table, "x.json", "AMX")[-1].startswith(
        "Adherence and PSNR: the same recipe on the tiny trained model tiny-shapes-sd15 of this layout, 96 held-out "
        "prompts, PSNR against its OpenVINO f32 images (measured on AVX2);"
    )
    # without quality: no columns, no sentence, no adherence
    plain = whole_image.read_table(data)
    assert plain["quality"] is None and plain["rows"]["ov_float_20"]["adherence"] is None
    assert "adherence" not in whole_image.markdown_table(plain)
    assert len(whole_image.describe(plain, "x.json", "AMX")) == 2


def test_the_fastest_within_the_bound_is_named_with_what_the_fastest_of_all_costs():
    data = _results()
    data["settings"]["lcm_variant"] = ["full_int8"]
    quality = _quality(
        torch_fp32_20=0.958, ov_float_20=0.958, lcm4_lora_full_int8=0.74, jax_lcm4_lora_taesd=0.948
    )
    text = whole_image.findings(whole_image.read_table(data, quality=quality))
    assert text[-1] == (
        "Within 5 adherence points of PyTorch fp32 on the tiny trained model tiny-shapes-sd15 (PyTorch fp32: "
        "0.958), the fastest is JAX, 4 steps: 25.0 s, 16.0x PyTorch fp32 and 6.40x OpenVINO's best float at 20 steps, "
        "adherence 0.948."
    )
    # JAX's 4 steps draw 0.948: one point below the bound of 0.5 points, so the bound moves the answer
    text = whole_image.findings(whole_image.read_table(data, quality=quality), bound=0.005)
    assert text[-1] == (
        "Within 0.5 adherence points of PyTorch fp32 on the tiny trained model tiny-shapes-sd15 (PyTorch fp32: "
        "0.958), the fastest is OpenVINO float: 160.0 s, 2.5x PyTorch fp32, adherence 0.958; the fastest of all, "
        "JAX, 4 steps, draws 0.948."
    )
    quality["rows"].pop("torch_fp32_20")
    assert (
        "has no PyTorch fp32 adherence"
        in whole_image.findings(whole_image.read_table(data, quality=quality))[-1]
    )
    assert all("adherence points" not in s for s in whole_image.findings(whole_image.read_table(data)))


def test_quality_files_are_found_by_model_and_a_wrong_one_is_refused(tmp_path):
    (tmp_path / whole_image.QUALITY_FILES["sd15"]).write_text(json.dumps(_quality(ov_float_20=0.9)))
    table = whole_image.read_table(_results(), quality=tmp_path)
    assert table["rows"]["ov_float_20"]["adherence"] == 0.9
    sdxl = _results()
    sdxl["settings"]["model"] = "sdxl"
    assert whole_image.read_table(sdxl, quality=tmp_path)["quality"] is None  # none kept for SDXL
    with pytest.raises(FileNotFoundError, match="python -m sdaccel.toy.whole_image_quality"):
        whole_image.read_table(_results(), quality=tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"rows": {}}))
    with pytest.raises(ValueError, match="not a sdaccel.toy.whole_image_quality JSON"):
        whole_image.read_table(_results(), quality=tmp_path / "other.json")


@pytest.mark.parametrize("model", sorted(whole_image.QUALITY_FILES))
def test_the_committed_quality_reads_beside_its_table(model):
    quality = ROOT / "benchmarks" / "results" / whole_image.QUALITY_FILES[model]
    table = whole_image.read_table(
        ROOT / "benchmarks" / "results" / f"whole_image_{model}.json", quality=quality
    )
    rows = table["rows"]
    # every row has its recipe's quality, the few-step rows too (each toy has its LCM-LoRA and
    # TAESD), PyTorch fp32 as drawn on the toy
    assert any(whole_image_rows.is_few_step(k) for k in rows)
    assert all(row["adherence"] is not None and row["psnr_vs_f32"] is not None for row in rows.values()), [
        k for k, row in rows.items() if row["adherence"] is None
    ]
    assert rows["torch_fp32_20"]["adherence"] >= 0.9


def test_the_stacks_run_reads_with_the_toys_stack_beside_it():
    """The stack's whole-image run: every row has its recipe's adherence on the toy (the stack's
    from sdaccel.toy.stack_quality's chain, through whole_image_quality), and the stack counts for
    the fastest within the bound."""
    results = ROOT / "benchmarks" / "results"
    table = whole_image.read_table(results / "whole_image_sd15_stack.json", quality=results)
    rows = table["rows"]
    assert whole_image_rows.OV_STACK_20 in rows and all(row["adherence"] is not None for row in rows.values())
    assert whole_image.heading(table) == (
        "SD 1.5 at 512x512, with the tiny trained model's INT8 recipes replayed and the speed-ups stacked"
    )
    stack = rows[whole_image_rows.OV_STACK_20]
    assert stack["adherence"] >= rows["torch_fp32_20"]["adherence"] - whole_image.QUALITY_BOUND
    assert any(stack["title"] in sentence for sentence in whole_image.findings(table))


def test_a_table_is_headed_by_its_model_and_size_and_the_stack_when_it_ran():
    table = {"settings": {"model": "sd15", "size": 512}, "rows": {"torch_fp32_20": {}, "ov_float_20": {}}}
    assert whole_image.heading(table) == "SD 1.5 at 512x512"
    table["rows"]["ov_stack_20"] = {}
    assert whole_image.heading(table) == "SD 1.5 at 512x512, with the speed-ups stacked"
    table["rows"]["ov_full_int8_accuracy_control_20"] = {}
    assert whole_image.heading(table) == (
        "SD 1.5 at 512x512, with the tiny trained model's INT8 recipes replayed and the speed-ups stacked"
    )
    del table["rows"]["ov_stack_20"]
    assert (
        whole_image.heading(table) == "SD 1.5 at 512x512, with the tiny trained model's INT8 recipes replayed"
    )
    layer = {
        "settings": {"model": "sd15", "size": 512},
        "rows": {"torch_fp32_20": {}, "ov_stack_layer_20": {}},
    }
    assert whole_image.heading(layer) == (
        "SD 1.5 at 512x512, with the speed-ups stacked and DeepCache cut at the last layer"
    )
    # the ResNets' recipe: its row of the usual steps, or the few-step rows of that --lcm-variant
    few = {"settings": {"model": "sd15", "size": 512, "lcm_variant": ["full_int8_float_resnets"]}}
    few["rows"] = {"torch_fp32_20": {}, "lcm4_lora_int8": {}}
    assert whole_image.heading(few) == "SD 1.5 at 512x512, with INT8 that keeps the ResNets in float"
    del few["rows"]["lcm4_lora_int8"]
    assert whole_image.heading(few) == "SD 1.5 at 512x512"
    few["rows"]["ov_full_int8_float_resnets_20"] = {}
    assert whole_image.heading(few) == "SD 1.5 at 512x512, with INT8 that keeps the ResNets in float"
