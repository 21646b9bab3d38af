"""The README's "Results at a glance": each row's numbers are its results file's (issue #56).

A row links the results file it comes from: a whole-image run (``whole_image_*.json#<row key>``),
whose seconds and ratios the row prints at its own precision, each ratio against a baseline of the
same file, and the tiny model's quality file (``whole_image_quality_*.json#<row key>``), whose
adherence the row prints against PyTorch fp32's; or a TPU plan (``tpu_plan_*.json``), a predicted
floor. A published row names its source instead. The hardware cell names the run's cores and ISA
tier.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
HEADING = "## Results at a glance"
#: The baselines a ratio may name, and their row in a whole-image results file.
BASELINES = {"PyTorch fp32": "torch_fp32_20", "best float": "ov_float_20"}
_LINK = re.compile(r"\]\((benchmarks/results/(?!whole_image_quality)[\w.-]+\.json)(?:#([\w-]+))?\)")
_QUALITY = re.compile(r"\]\((benchmarks/results/whole_image_quality_[\w.-]+\.json)#([\w-]+)\)")
#: The tiny model's baseline in a quality file: PyTorch fp32 at 20 steps.
QUALITY_BASELINE = "torch_fp32_20"
_RATIO = re.compile(r"([\d.]+)x (PyTorch fp32|best float) \(([\d.]+) s")


def results_table(text: str) -> tuple[int, list[list[str]]]:
    """The line number of the table's last row, and its rows (cells, header and rule left out)."""
    lines = text.splitlines()
    start = lines.index(HEADING)
    rows, last = [], start
    for number, line in enumerate(lines[start:], start + 1):
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
            last = number
        elif rows:
            break
    return last, rows[2:]


def same_at_printed_precision(printed: str, value: float) -> bool:
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return round(value, decimals) == float(printed)


def _whole_image_row(cells: list[str], data: dict, key: str | None, where: str) -> list[str]:
    wrong = []
    if key not in data["rows"]:
        return [f"{where}: the link names row {key!r}, which the file lacks"]
    seconds = data["rows"][key]["median"]["image_s"]
    if not same_at_printed_precision(cells[1], seconds):
        wrong.append(f"{where}: {cells[1]} s printed, the file has {seconds:.4f}")
    ratios = _RATIO.findall(cells[2])
    if not ratios:
        wrong.append(f"{where}: no ratio 'N.NNx <baseline> (S s)' in {cells[2]!r}")
    for ratio, baseline, base_printed in ratios:
        base = data["rows"][BASELINES[baseline]]["median"]["image_s"]
        if not same_at_printed_precision(base_printed, base):
            wrong.append(f"{where}: {baseline} {base_printed} s printed, the file has {base:.4f}")
        if not same_at_printed_precision(ratio, base / seconds):
            wrong.append(f"{where}: {ratio}x {baseline} printed, the file gives {base / seconds:.4f}")
    machine = data["machine"]
    tier = "AMX" if machine.get("amx") else "VNNI" if machine.get("avx512_vnni") else "AVX2"
    if f"{machine['physical_cores']}-core" not in cells[4] or tier not in cells[4]:
        wrong.append(
            f"{where}: hardware {cells[4]!r}, the run's is {machine['physical_cores']} cores, {tier}"
        )
    if ("AMX" in cells[4]) != bool(machine.get("amx")):
        wrong.append(f"{where}: hardware {cells[4]!r} and the run disagree on AMX")
    if cells[5] != "measured":
        wrong.append(f"{where}: a whole-image run is measured, the row says {cells[5]!r}")
    return wrong + _quality(cells, where)


def _quality(cells: list[str], where: str) -> list[str]:
    """The quality cell, 'A against B', against the tiny model's file that the row links."""
    link = _QUALITY.search(cells[-1])
    if link is None:
        return [f"{where}: a measured row links its quality file (whole_image_quality_*.json#<row>)"]
    rows = json.loads((REPO / link[1]).read_text())["rows"]
    printed = re.match(r"([\d.]+) against ([\d.]+)", cells[3])
    if link[2] not in rows or printed is None:
        return [f"{where}: quality {cells[3]!r} or its row {link[2]!r} is not in {link[1]}"]
    wrong = []
    for value, key in zip(printed.groups(), (link[2], QUALITY_BASELINE), strict=True):
        if not same_at_printed_precision(value, rows[key]["adherence"]):
            wrong.append(
                f"{where}: adherence {value} printed, {key} in {link[1]} has {rows[key]['adherence']:.4f}"
            )
    return wrong


def _tpu_plan_row(cells: list[str], data: dict, where: str) -> list[str]:
    floor = data["rows"][0]["floor_s_per_image_per_chip"]
    wrong = (
        []
        if same_at_printed_precision(cells[1], floor)
        else [f"{where}: floor {cells[1]} s, file {floor:.4f}"]
    )
    if not cells[5].startswith("predicted"):
        wrong.append(f"{where}: a TPU plan is predicted, the row says {cells[5]!r}")
    return wrong


def mismatches(text: str, repo: Path = REPO) -> list[str]:
    """Every way the results table of ``text`` differs from the files its rows link."""
    _, rows = results_table(text)
    wrong = []
    for cells in rows:
        where = cells[0]
        link = _LINK.search(cells[-1])
        if link is None:
            if not (cells[5].startswith("published:") and "https://" in cells[-1]):
                wrong.append(f"{where}: neither a results file in benchmarks/results/ nor a published source")
            continue
        data = json.loads((repo / link[1]).read_text())
        if Path(link[1]).name.startswith("whole_image_"):
            wrong += _whole_image_row(cells, data, link[2], where)
        elif Path(link[1]).name.startswith("tpu_plan_"):
            wrong += _tpu_plan_row(cells, data, where)
        else:
            wrong.append(f"{where}: no rule reads {link[1]}")
    return wrong


def test_the_readme_is_a_front_page_with_its_results_first():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    last, rows = results_table(text)
    assert last <= 60, f"the results table ends on line {last}"
    assert 6 <= len(rows) <= 10
    kinds = {cells[5].split(":")[0].split(" (")[0] for cells in rows}
    assert kinds == {"measured", "predicted", "published"}, kinds


def test_each_results_row_equals_its_results_file():
    assert mismatches(README.read_text()) == []


def test_a_changed_number_is_caught():
    text = README.read_text()
    _, rows = results_table(text)
    measured = next(cells for cells in rows if cells[5] == "measured" and "best float" in cells[2])
    row = "| " + " | ".join(measured) + " |"
    assert row in text
    seconds, ratio = measured[1], _RATIO.findall(measured[2])[0]
    changes = [
        (f"| {seconds} |", f"| {float(seconds) + 0.1:.{len(seconds.split('.')[1])}f} |"),
        (f"{ratio[0]}x {ratio[1]}", f"{float(ratio[0]) + 0.01:.2f}x {ratio[1]}"),
        (f"({ratio[2]} s", f"({float(ratio[2]) + 0.1:.1f} s"),
        ("2-core Intel Xeon, AMX", "2-core Intel Xeon, AVX2 only"),
        ("| measured |", "| predicted |"),
        (measured[3].split(" against ")[0] + " against", "0.500 against"),
    ]
    for old, new in changes:
        assert old in row, old
        changed = text.replace(row, row.replace(old, new, 1))
        assert mismatches(changed), f"{old} -> {new} went unnoticed"
    tpu = next(cells for cells in rows if cells[5].startswith("predicted"))
    tpu_row = "| " + " | ".join(tpu) + " |"
    assert mismatches(text.replace(tpu_row, tpu_row.replace(f"| {tpu[1]} |", "| 1.20 |", 1)))
