"""Notebook 06's stack table: the toy's stack rows joined by their levers with the real UNet's
seconds per step (the committed AVX2 run of bench_openvino.py --levers stack), and the fastest
stack within the bound."""

import json
from pathlib import Path

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
