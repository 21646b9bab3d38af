"""Notebook 06's stack table: the toy's stack rows joined by their levers with the real UNet's
seconds per step (the committed AVX2 run of bench_openvino.py --levers stack), and the fastest
stack within the bound."""

import json
from pathlib import Path

import pytest

from sdaccel.course import stack_report

REPO = Path(__file__).resolve().parents[2]
SPEED = json.loads((REPO / "benchmarks/results/stack_sd15_epyc_avx2.json").read_text())["models"]["sd15"]
ROWS = SPEED["levers"]["stack"]["rows"]


def _row(levers, score, within, psnr=None):
    return {"levers": levers, "adherence": {"score": score}, "psnr_mean": psnr, "within": within}


QUALITY = {
    "rows": {
        "f32": _row([], 0.958, True),
        "+ static shapes": _row(["static shapes"], 0.958, True, 83.0),
        "+ INT8": _row(["static shapes", "INT8"], 0.979, True, 35.6),
        "+ token merging 0.5": _row(["static shapes", "token merging 0.5"], 1.0, True, 37.4),
        "+ DeepCache N=2": _row(["static shapes", "token merging 0.5", "DeepCache N=2"], 0.958, True, 36.5),
        "+ DeepCache N=3": _row(["static shapes", "token merging 0.5", "DeepCache N=3"], 0.896, False, 32.3),
    }
}


def test_each_stack_gets_the_seconds_of_the_same_levers():
    rows = stack_report.join(QUALITY, ROWS)
    assert (
        rows["+ DeepCache N=2"]["cpu_s_per_step"]
        == ROWS["+ token merging 0.5 + DeepCache N=2"]["cpu_s_per_step"]
    )
    assert rows["+ static shapes"]["cpu_x_best_float"] == 1.0
    assert rows["+ token merging 0.5"]["cpu_s_per_step"] == ROWS["+ token merging 0.5"]["cpu_s_per_step"]
    # f32 with dynamic shapes and INT8 are not among the stacks that lever stack times
    assert rows["f32"]["cpu_s_per_step"] is None and rows["+ INT8"]["cpu_x_torch_fp32"] is None
    assert rows["+ INT8"]["adherence"] == 0.979 and rows["+ DeepCache N=3"]["within"] is False


def test_the_fastest_is_timed_and_within_the_bound():
    rows = stack_report.join(QUALITY, ROWS)
    # N=3 is faster, but out of the bound
    assert rows["+ DeepCache N=3"]["cpu_s_per_step"] < rows["+ DeepCache N=2"]["cpu_s_per_step"]
    assert stack_report.fastest(rows) == "+ DeepCache N=2"
    assert stack_report.fastest(stack_report.join(QUALITY, None)) is None


def test_the_table_shows_every_stack_and_dashes_where_untimed():
    rows = stack_report.join(QUALITY, ROWS)
    lines = stack_report.markdown(rows, 48, 0.02).splitlines()
    assert lines[0].startswith("| stack | adherence (48 prompts) | PSNR vs f32 dB | within 2 points |")
    assert len(lines) == 2 + len(rows)
    assert lines[2] == "| f32 | 0.958 | - | yes | - | - | - |"
    assert lines[6] == "| + DeepCache N=2 | 0.958 | 36.5 | yes | 12.09 | 1.68 | 2.10 |"


def _run(flags: dict) -> dict:
    return {"machine": {"cpu_flags": flags}, "models": {}}


def test_the_reference_run_is_the_one_measured_on_the_readers_isa_tier(tmp_path):
    avx2 = {"avx2": True}
    amx = {"avx2": True, "avx512f": True, "avx512_bf16": True, "amx_tile": True, "amx_bf16": True}
    (tmp_path / "stack_sd15_a_avx2.json").write_text(json.dumps(_run(avx2)))
    (tmp_path / "stack_sd15_b_amx.json").write_text(json.dumps(_run(amx)))
    (tmp_path / "stack_tiny-shapes-sd15.json").write_text("not a speed run")
    assert stack_report.reference_run(tmp_path, amx)[0].name == "stack_sd15_b_amx.json"
    assert stack_report.reference_run(tmp_path, avx2)[0].name == "stack_sd15_a_avx2.json"
    # a tier no run was measured on: the first by name, which names its own CPU
    path, run = stack_report.reference_run(tmp_path, {"avx2": True, "avx512f": True})
    assert path.name == "stack_sd15_a_avx2.json" and run["machine"]["cpu_flags"] == avx2
    with pytest.raises(FileNotFoundError, match="no stack_sd15_"):
        stack_report.reference_run(tmp_path / "missing", avx2)


def test_the_repositorys_reference_runs_each_time_the_stack():
    for path in sorted((REPO / "benchmarks/results").glob(stack_report.REFERENCE_PATTERN)):
        stack = json.loads(path.read_text())["models"]["sd15"]["levers"]["stack"]
        assert stack["ok"] and "+ token merging 0.5 + DeepCache N=2" in stack["rows"], path.name


def test_runs_of_several_chains_join_into_one_table_named_by_levers():
    float_run = {"settings": {"num_prompts": 48}, "rows": QUALITY["rows"]}
    int8_run = {
        "settings": {"num_prompts": 48},
        "rows": {
            "f32": _row([], 0.5, True),  # the first run's row of the same levers is kept
            "+ DeepCache N=2": _row(["static shapes", "INT8", "DeepCache N=2"], 0.969, True, 39.1),
        },
    }
    rows = stack_report.join_runs([float_run, int8_run], ROWS)
    assert list(rows) == [
        "f32",
        "static shapes",
        "static shapes + INT8",
        "static shapes + token merging 0.5",
        "static shapes + token merging 0.5 + DeepCache N=2",
        "static shapes + token merging 0.5 + DeepCache N=3",
        "static shapes + INT8 + DeepCache N=2",
    ]
    assert rows["f32"]["adherence"] == 0.958
    # the AVX2 run timed no INT8 stack
    assert rows["static shapes + INT8 + DeepCache N=2"]["cpu_s_per_step"] is None
    with pytest.raises(ValueError, match=r"different numbers of prompts \(\[48, 96\]\)"):
        stack_report.join_runs([float_run, {**int8_run, "settings": {"num_prompts": 96}}], ROWS)


AMX_QUALITY = (
    "stack_float_96_tiny-shapes-sd15.json",
    "stack_int8_deepcache_tiny-shapes-sd15.json",
    "stack_int8_deepcache_n3_tiny-shapes-sd15.json",
)


def test_the_readmes_amx_stack_table_is_the_committed_runs_joined():
    results = REPO / "benchmarks/results"
    speed = json.loads((results / "stack_sd15_xeon_amx.json").read_text())
    qualities = [json.loads((results / name).read_text()) for name in AMX_QUALITY]
    rows = stack_report.join_runs(qualities, speed["models"]["sd15"]["levers"]["stack"]["rows"])
    assert stack_report.markdown(rows, 96, 0.02) in (REPO / "docs" / "stacking.md").read_text()
    assert speed["machine"]["amx"] and speed["models"]["sd15"]["levers"]["stack"]["precision_asked"] == "bf16"
    best = stack_report.fastest(rows)
    assert (
        f"**The fastest stack within 2 adherence points here is {best}"
        in (REPO / "docs" / "stacking.md").read_text()
    )


LAYER_CUT_QUALITY = (
    "stack_int8_deepcache_n3_tiny-shapes-sd15.json",
    "stack_float_layer_n2_tiny-shapes-sd15.json",
    "stack_int8_deepcache_layer_n2_tiny-shapes-sd15.json",
    "stack_int8_deepcache_layer_n3_tiny-shapes-sd15.json",
)


def test_the_readmes_layer_cut_table_is_the_committed_runs_joined():
    """The stacking page's table of DeepCache cut at the last layer: the run that timed its shallow UNet
    beside the others, joined with the toy's chains of both cuts; the fastest within the bound."""
    results = REPO / "benchmarks/results"
    speed = json.loads((results / "stack_sd15_layer_cut_xeon_amx.json").read_text())
    stack = speed["models"]["sd15"]["levers"]["stack"]
    qualities = [json.loads((results / name).read_text()) for name in LAYER_CUT_QUALITY]
    # runs from before the layer cut name no cut: theirs is the block
    assert [q["settings"].get("cut", "block") for q in qualities] == ["block", "layer", "layer", "layer"]
    rows = stack_report.join_runs(qualities, stack["rows"])
    readme = (REPO / "docs" / "stacking.md").read_text()
    assert stack_report.markdown(rows, 96, 0.02) in readme
    assert speed["machine"]["amx"] and stack["precision_asked"] == "bf16" and "layer shallow" in stack["arms"]
    best = stack_report.fastest(rows)
    assert best == "static shapes + INT8 + DeepCache N=2 (layer cut)"
    assert f"fastest stack within 2 adherence points is {best}" in " ".join(readme.split())
