"""sdaccel.course.resources: what each notebook needs (memory, disk, hub files), and the disk check
that the pre-flight check and the downloader share."""

from pathlib import Path

import pytest

from sdaccel.core.checkpoint import LORA_FILES
from sdaccel.course import resources

GIB = 2**30


def test_resources_table_names_every_notebook_and_full_needs_more():
    from sdaccel.tools.workshop.discovery import discover

    assert [nb.stem for nb in resources.NOTEBOOKS.values()] == [nb.stem for nb in discover()]
    for nb in resources.NOTEBOOKS.values():
        assert nb.full.ram_gib > nb.smoke.ram_gib and nb.full.disk_gib >= nb.smoke.disk_gib, nb.stem
        assert set(nb.models) <= set(resources.MODELS)
    # the SDXL notebooks read one model in fp16; the CPU track reads SD 1.5's default (fp32) files
    merged = resources.models_for(resources.select(["00", "01"]))
    assert list(merged) == ["sdxl"] and merged["sdxl"].components is None and merged["sdxl"].variant == "fp16"
    only_00 = resources.models_for(resources.select(["00"]))["sdxl"]
    assert only_00.components == ("text_encoder", "tokenizer")
    assert resources.models_for(resources.select(["04"]))["sd15"].variant is None
    with pytest.raises(ValueError, match="Unknown profile"):
        resources.NOTEBOOKS["00"].needs("medium")


def test_the_notebook_models_are_downloadable():
    from sdaccel.course import resources

    nb = resources.NOTEBOOKS["07"]
    models = resources.models_for([nb])
    assert models["lcm-lora-sd15"].allow_patterns() == LORA_FILES
    assert models["lcm-lora-sdxl"].repo_id == "latent-consistency/lcm-lora-sdxl"
    assert models["taesd"].repo_id == "madebyollin/taesd"
    assert models["sdxl"].variant == "fp16" and models["sd15"].variant is None


def test_select_by_number_or_stem_and_name_the_unknown():
    assert [nb.stem for nb in resources.select(["04", "05_int8_quantization", "04"])] == [
        "04_openvino_export_and_run",
        "05_int8_quantization",
    ]
    assert resources.select(None) == list(resources.NOTEBOOKS.values()) == resources.select([])
    with pytest.raises(ValueError, match="No notebook '42'"):
        resources.select(["42"])
    with pytest.raises(ValueError, match="Unknown model"):
        resources.models_for(resources.select(["01"]), ["sd3"])


def test_totals_are_the_largest_memory_and_the_sum_of_the_disk():
    need = resources.totals(resources.select(["01", "04"]), "full")
    assert (need.ram_gib, need.disk_gib) == (20.0, 5.5)
    assert resources.totals([], "smoke") == resources.Needs(0.0, 0.0)


def test_disk_shortfall_compares_free_with_needed():
    disk = resources.disk_shortfall(Path("/x"), 3 * GIB, lambda p: 2 * GIB)
    assert disk.short and disk.shortfall_bytes == GIB and disk.free_bytes == 2 * GIB
    enough = resources.disk_shortfall(Path("/x"), 2 * GIB, lambda p: 2 * GIB)
    assert not enough.short and enough.shortfall_bytes == 0  # exactly enough is enough
    assert resources.Disk(Path("/x"), int(5 * GIB), 5.5 * GIB).short


def test_disk_shortfall_measures_the_nearest_existing_folder(tmp_path):
    seen = []
    disk = resources.disk_shortfall(tmp_path / "a" / "b", 1, lambda p: seen.append(p) or 10)
    assert seen == [tmp_path] and disk.path == tmp_path / "a" / "b"
    assert (
        resources.disk_shortfall(tmp_path / "missing", 1).free_bytes > 0
    )  # the real disk of the nearest folder


REPO = Path(__file__).resolve().parents[2]


def test_the_rehearsals_measurements_are_the_readmes_and_within_the_doctors_needs():
    """The rehearsal page's table (``benchmarks/results/rehearsal.md``, which the page includes) is
    the committed run's rows as the runner prints them, and
    each notebook's memory need (what the doctor checks) covers what its rehearsal measured: the
    anonymous peak of the whole tree, or where a run did not record it, the largest child's RSS (a
    kernel's RSS counts mapped weights once per mapping, so it can exceed the machine)."""
    import json

    from sdaccel.tools.workshop.run_summary import format_summary

    data = json.loads((REPO / "benchmarks" / "results" / "rehearsal.json").read_text())
    rows = list(data["notebooks"].values())
    assert data["profile"] == "rehearsal" and rows
    table = REPO / "benchmarks" / "results" / "rehearsal.md"
    assert table.read_text() == format_summary(rows) + "\n"
    assert "```{include} ../benchmarks/results/rehearsal.md" in (REPO / "docs" / "rehearsal.md").read_text()
    for row in rows:
        assert row["cpu"] and row["isa_tier"] and row["commit"], (
            f"{row['notebook']}: which machine and code ran it"
        )
        need = resources.NOTEBOOKS[row["notebook"][:2]].needs("rehearsal").ram_gib
        anon = row.get("tree_anon_gib")
        measured = anon if anon is not None else row["largest_child_peak_gib"]
        assert measured <= need, f"{row['notebook']}: {measured} GiB measured, the doctor asks for {need}"
