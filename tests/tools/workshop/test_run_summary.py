"""The summary of a profile's runs: a row per notebook with its wall time, peak memory and machine,
in summary.json and as the table of summary.md."""

import json

import pytest

from sdaccel.core import env
from sdaccel.cpu.families import isa_tier
from sdaccel.tools.workshop import memory_watch, run_summary
from sdaccel.tools.workshop.execute import execute

pytestmark = pytest.mark.usefixtures("smoke_settings_of_test_notebooks")


#: A notebook whose kernel holds about 150 MB and starts a child that holds about 300 MB.
MEMORY_CELLS = [
    "kernel_block = bytearray(150 * 2**20)\nimport time\ntime.sleep(1.5)  # long enough to be sampled",
    "import subprocess, sys\n"
    "subprocess.run([sys.executable, '-c', 'import time; b = bytearray(300 * 2**20); time.sleep(2)'], check=True)",
]


@pytest.mark.slow
def test_the_runner_records_wall_time_and_peak_memory(
    tmp_path, smoke_settings_of_test_notebooks, capsys, make_notebook
):
    smoke_settings_of_test_notebooks["01_memory"] = {}
    nb = make_notebook(tmp_path / "01_memory.ipynb", MEMORY_CELLS)
    run = execute(nb, "smoke", tmp_path / "build", tmp_path / "ckpt", timeout=120)
    memory = memory_watch.MemoryPeaks(**run.memory)
    assert memory.samples > 2 and memory.children >= 1
    assert memory.kernel_bytes > 150 * 2**20, "the kernel's own high-water mark"
    assert memory.largest_child_bytes > 300 * 2**20 > memory.kernel_bytes - 150 * 2**20
    assert memory.tree_bytes > 300 * 2**20
    # the bytearray is anonymous memory: the child's anonymous peak holds it, the kernel's does not
    assert memory.largest_child_anon_bytes > 290 * 2**20 > memory.kernel_anon_bytes - 150 * 2**20
    assert memory.largest_child_bytes >= memory.largest_child_anon_bytes
    assert memory.tree_anon_bytes >= memory.largest_child_anon_bytes
    assert run.seconds > 2
    # the cell that started the 300 MB child is named first, by its "In [n]" and first line of code
    top = run.cells[0]
    assert (top["cell"], top["line"]) == (4, "import subprocess, sys") and top["tree_anon_gib"] > 0.29
    assert run.cells[1]["cell"] == 3 and run.cells[1]["tree_anon_gib"] < 0.29, run.cells

    row = run_summary.summary_row(run, "smoke", "ok")
    assert row["peak_cells"] == run.cells
    assert row["wall_min"] == round(run.seconds / 60, 2) and row["largest_child_peak_gib"] >= 0.29
    assert row["cpu"] == env.cpu_model() and row["isa_tier"] == isa_tier(env.cpu_features())
    path = run_summary.write_summary(tmp_path / "build", "smoke", [row])
    assert path == tmp_path / "build" / "smoke" / "summary.json"
    other = {**row, "notebook": "00_other", "status": "failed"}
    run_summary.write_summary(tmp_path / "build", "smoke", [other])  # another run: both rows stay
    data = json.loads(path.read_text())
    assert list(data["notebooks"]) == ["00_other", "01_memory"] and data["machine"]["cpus"] >= 1
    table = (path.parent / "summary.md").read_text().splitlines()
    assert table[0].startswith("| notebook | status | wall min | kernel GiB (anonymous) | largest child GiB")
    assert f"| {row['largest_child_peak_gib']:.2f} ({row['largest_child_anon_gib']:.2f}) |" in table[3]
    assert f"| In [4] ({top['tree_anon_gib']:.2f}) |" in table[3]
    assert row["found_from_earlier"] == [] and "| nothing |" in table[3]  # a first run
    assert table[2].startswith("| 00_other | failed |") and table[3].startswith("| 01_memory | ok |")
