"""The TPU plan beside a measurement (notebooks 01-03): the prediction for a notebook's case, kept
in a plan cache and never stale, and the table that puts it next to what was measured.

One program is compiled for the module (``--config tiny`` on a v5e-4: about a minute of one core).
"""

import json

import pytest

from sdaccel.tpu import plan as tpu_plan
from sdaccel.tpu import plan_compile, plan_files

# what this module compiles for compile-only TPU devices cannot be read back from JAX's cache
pytestmark = pytest.mark.usefixtures("without_compilation_cache")


@pytest.fixture(scope="module")
def compiled(tiny_plans):
    """{mesh: (row, compiled)} for the data-only mesh (4), splash attention (compiled once with
    test_plan_compile.py's: tests/tpu/conftest.py)."""
    return {"auto": tiny_plans("auto")}


def test_plan_beside_a_measurement(compiled):
    row, _ = compiled["auto"]
    summary = tpu_plan.summary(row)
    assert summary["flops_per_image"] == row["flops"]["per_image"] > 0
    assert summary["batch_per_chip"] == 1 and summary["topology"] == "v5e-4"
    json.dumps(summary)  # it goes into a notebook's results.json

    predicted_at_published = tpu_plan._seconds(
        row["floor_s_per_image_per_chip"] / tpu_plan.PUBLISHED_UTILISATION
    )
    alone = tpu_plan.beside(row)
    assert (
        "no measurement" in alone
        and predicted_at_published in alone
        and "| tiny, 1 image(s) per chip |" in alone
    )
    assert f"{tpu_plan._bytes(row['resident_peak_bytes'])} of 16.00 GiB: fits" in alone

    on_cpu = tpu_plan.measurement(run_s=3.0, images=8, chips=4, compile_s=5.0)
    assert on_cpu["platform"] == "cpu" and on_cpu["peak_hbm_bytes"] is None
    assert on_cpu["s_per_image_per_chip"] == pytest.approx(1.5)
    at_published = f"| time per image per chip at {tpu_plan.PUBLISHED_UTILISATION:.0%} of peak"
    assert at_published == "| time per image per chip at 60% of peak"  # the blog's run, by the plan's count
    lines = {line.split(" | ")[0]: line for line in tpu_plan.beside(row, on_cpu).splitlines()}
    assert lines[at_published].endswith("| - (cpu: not a TPU measurement) |")

    on_tpu = {**on_cpu, "platform": "tpu", "peak_hbm_bytes": 3 * 2**30, "flops_per_image": 2.5e12}
    lines = {line.split(" | ")[0]: line for line in tpu_plan.beside(row, on_tpu).splitlines()}
    assert lines[at_published].endswith("| 1.50 s |")
    assert lines["| HBM per chip: peak with the text encoders"].endswith("| 3.00 GiB |")
    assert lines["| FLOPs per image"].endswith("| 2.5 TFLOP |")
    assert lines["| compile time"].endswith("| 5.00 s |")
    assert tpu_plan._flops(282e12) == "282.0 TFLOP" and tpu_plan._flops(1.727e9) == "1.73 GFLOP"
    assert tpu_plan._seconds(1.434) == "1.43 s" and tpu_plan._seconds(1.44e-5) == "0.0144 ms"


def test_predict_builds_the_notebooks_case_and_checks_first(monkeypatch):
    seen = []
    monkeypatch.setattr(
        tpu_plan, "compile_case", lambda case, source: seen.append((case, source)) or ({}, None)
    )
    with pytest.raises(ValueError, match="batch and steps must be positive"):
        tpu_plan.predict("tiny", "v5e-1", batch=0)
    with pytest.raises(ValueError, match="Unknown TPU topology 'v5e-2'"):
        tpu_plan.predict("tiny", "v5e-2")
    assert seen == []
    tpu_plan.predict("stabilityai/stable-diffusion-xl-base-1.0", "v5e-4", batch=3, steps=4, dtype="float32")
    case, source = seen[0]
    assert source == plan_compile.DEFAULT_CONFIG  # a reference config: planned with no download
    assert (case.topology, case.batch, case.steps, case.dtype, case.attention) == (
        "v5e-4",
        3,
        4,
        "float32",
        "splash",
    )
    assert case.vae_images_per_chip == 1 and case.guidance


def test_a_plan_is_kept_and_read_back_never_stale(monkeypatch, tmp_path):
    calls = []

    def fake(case, source):
        calls.append(case)
        return {"batch": case.batch, "compile_s": 1.0}, None

    monkeypatch.setattr(tpu_plan, "compile_case", fake)
    first = tpu_plan.predict("tiny", "v5e-1", batch=2, steps=3, cache_dir=tmp_path)
    again = tpu_plan.predict("tiny", "v5e-1", batch=2, steps=3, cache_dir=tmp_path)
    assert len(calls) == 1 and "cached" not in first and again == {**first, "cached": True}
    tpu_plan.predict("tiny", "v5e-1", batch=2, steps=4, cache_dir=tmp_path)  # another program
    assert len(calls) == 2 and len(list(tmp_path.glob("v5e-1-b2-*.json"))) == 2
    monkeypatch.setattr(plan_files, "environment", lambda: {"libtpu": "another"})  # another compiler
    tpu_plan.predict("tiny", "v5e-1", batch=2, steps=3, cache_dir=tmp_path)
    assert len(calls) == 3 and not list(tmp_path.glob("*.partial"))


def test_config_source_of_a_local_checkpoint(tmp_path):
    assert tpu_plan.config_source(tmp_path) == str(tmp_path)
    assert tpu_plan.config_source("stabilityai/stable-diffusion-xl-base-1.0") == "sdxl-base-1.0"
