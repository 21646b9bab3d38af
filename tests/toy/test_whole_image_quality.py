"""sdaccel.toy.whole_image_quality: each whole-image recipe's adherence and PSNR on a trained toy,
keyed as the benchmark's rows are. Kept short (2 prompts, 2 and 1 steps, weight-only INT8 with no
calibration run): the path is the committed command's, the numbers are the kept JSON's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sdaccel.course import whole_image_rows
from sdaccel.toy import whole_image_quality as wq

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "checkpoints" / "tiny-shapes-sdxl"
LORA = REPO / "checkpoints" / "tiny-shapes-sdxl-lcm-lora"
TAESD = REPO / "checkpoints" / "tiny-shapes-sdxl-taesd"


def benchmark_recipe_keys() -> set[str]:
    """Every key whole_image_rows.recipe_key can give a row of bench_whole_image.py."""
    keys = set(whole_image_rows.ROWS) - set(whole_image_rows.LCM_ROWS)
    for variant in wq.VARIANTS:
        keys.add(whole_image_rows.ov_row_key(variant))
        keys |= {whole_image_rows.recipe_key(key, [variant]) for key in whole_image_rows.LCM_ROWS}
    return keys


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    if not (TOY / "model_index.json").is_file():
        pytest.skip("no committed checkpoint tiny-shapes-sdxl")
    work = tmp_path_factory.mktemp("whole-image-quality")
    out = work / "quality.json"
    argv = [str(TOY), "--lora", str(LORA), "--taesd", str(TAESD), "--prompts", "2", "--steps", "2"]
    argv += ["--few-steps", "1", "--variants", "int8_weights", "--work-dir", str(work), "--out", str(out)]
    return wq.main(argv), json.loads(out.read_text())


def test_every_row_is_a_recipe_of_the_benchmark(measured):
    result, written = measured
    assert set(result["rows"]) == {
        "torch_fp32_20",
        "ov_float_20",
        "jax_fp32_20",
        "ov_int8_weights_20",
        "lcm4_lora_int8_weights",
        "lcm4_lora_int8_weights_taesd",
        "lcm4_lora_int8_weights_static",
        "lcm4_lora_int8_weights_static_taesd",
        "jax_lcm4_lora_taesd",
    }
    assert set(result["rows"]) <= benchmark_recipe_keys()
    assert written["rows"].keys() == result["rows"].keys()
    assert written["command"].startswith("python -m sdaccel.toy.whole_image_quality")
    assert written["machine"]["isa"]


def test_each_row_has_its_adherence_and_psnr_against_openvino_f32(measured):
    rows = measured[0]["rows"]
    for key, row in rows.items():
        assert 0.0 <= row["adherence"] <= 1.0, (key, row)
        assert row["psnr_vs_f32"] > 5 and not math.isnan(row["psnr_vs_f32"]), (key, row)
    assert [rows[k]["steps"] for k in ("ov_float_20", "lcm4_lora_int8_weights")] == [2, 1]
    # the tiny autoencoder decodes the same latents to other pixels than the VAE
    assert (
        rows["lcm4_lora_int8_weights_taesd"]["psnr_vs_f32"] != rows["lcm4_lora_int8_weights"]["psnr_vs_f32"]
    )
    # compiled static, the pipeline runs the same IRs reshaped: each decoder's picture, to float noise
    for decoder in ("", "_taesd"):
        static, dynamic = (
            rows[f"lcm4_lora_int8_weights_static{decoder}"],
            rows[f"lcm4_lora_int8_weights{decoder}"],
        )
        assert abs(static["psnr_vs_f32"] - dynamic["psnr_vs_f32"]) < 0.5, (static, dynamic)
        assert static["title"] == dynamic["title"].replace("LoRA fused", "LoRA fused + static")
    assert rows["ov_int8_weights_20"]["precision"].startswith("int8+")
    assert "| recipe | adherence (2 held-out prompts) | PSNR dB vs OpenVINO f32 | precision |" in (
        wq.format_table(measured[0])
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"taesd": TAESD}, "pass lora= with taesd="),
        ({"variants": ("int4",)}, "Unknown INT8 recipes"),
        ({"num_prompts": 0}, "at least 1"),
        ({"lora": REPO / "checkpoints"}, "no LoRA weights"),
        ({"stack_interval": 0}, "stack_interval and stack_layer_interval >= 1"),
        ({"stack_layer_interval": 0}, "stack_interval and stack_layer_interval >= 1"),
        ({"stack_interval": 3, "seed": 1}, "seeds image i"),
        ({"replayed": {"int4": "x.json"}}, "'int4' is not a replayed recipe"),
        ({"replayed": {"full_int8_accuracy_control": "no/such.json"}}, "no/such.json, which is not there"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(tmp_path, kwargs, message):
    work = tmp_path / "work"
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        wq.measure(TOY, work, **kwargs)
    assert not work.exists()


def test_the_stack_row_is_the_stack_quality_runs_last_row_under_the_benchmarks_key(tmp_path, monkeypatch):
    """The stack's row is stack_quality.measure's last row (DeepCache on static shapes and INT8),
    asked for with the same prompts, steps and guidance, and keyed as the benchmark's stack row;
    the same for the stack with DeepCache cut at the last layer."""
    from sdaccel.toy import adherence, stack_quality

    asked = []
    last = {"adherence": {"score": 0.75}, "psnr_mean": 31.5, "s_per_image": 0.5}

    def fake_stack(folder, work, **kwargs):
        asked.append(kwargs)
        names = stack_quality.stack_names(0.5, kwargs["interval"], kwargs["levers"], kwargs["cut"])
        return {"rows": {**{name: {} for name in names[:-1]}, names[-1]: last}}

    def fake_usual(folder, work, **kwargs):
        return {"images": {"ov_f32": []}, "rows": {}, "prompts": [], "config": {"size": 32, "prompts": 4}}

    monkeypatch.setattr(stack_quality, "measure", fake_stack)
    monkeypatch.setattr(adherence, "evaluate", fake_usual)
    result = wq.measure(
        TOY, tmp_path / "work", num_prompts=4, steps=5, stack_interval=3, stack_layer_interval=2
    )
    assert wq.STACK_ROW == whole_image_rows.OV_STACK_20
    assert wq.STACK_LAYER_ROW == whole_image_rows.OV_STACK_LAYER_20
    assert tuple(wq.STACK_ROWS.values()) == whole_image_rows.STACK_ROWS
    row = result["rows"][wq.STACK_ROW]
    assert (row["adherence"], row["psnr_vs_f32"], row["steps"], row["seconds"]) == (0.75, 31.5, 5, 2.0)
    assert "DeepCache N=3," in row["title"] and result["config"]["stack_interval"] == 3
    assert "DeepCache N=2 (layer cut)" in result["rows"][wq.STACK_LAYER_ROW]["title"]
    assert result["config"]["stack_layer_interval"] == 2
    for kwargs in asked:
        assert (kwargs["num_prompts"], kwargs["steps"], kwargs["guidance_scale"]) == (4, 5, 6.0)
        assert kwargs["levers"] == ("static", "int8", "deepcache")
    assert [(kwargs["interval"], kwargs["cut"]) for kwargs in asked] == [(3, "block"), (2, "layer")]


def test_a_replayed_recipe_is_a_row_of_the_usual_steps_under_the_benchmarks_key(tmp_path, monkeypatch):
    """What the toy's accuracy control kept in float, checked against the toy's export, quantized
    by evaluate() beside the other recipes, and keyed as bench_whole_image.py's replayed row."""
    from sdaccel.cpu import export
    from sdaccel.toy import adherence, replayed_recipes

    name = replayed_recipes.ACCURACY_CONTROL
    found = replayed_recipes.found_file(name, REPO / "benchmarks" / "results")
    knobs = replayed_recipes.knobs(name, found)
    asked, checked = {}, []

    def fake_usual(folder, work, **kwargs):
        asked.update(kwargs)
        row = {
            "adherence": {"score": 0.9},
            "vs_ov_f32": {"psnr_mean": 33.0},
            "precision": "int8+f32",
            "seconds": 1.0,
        }
        return {
            "images": {"ov_f32": []},
            "rows": {name: row},
            "prompts": [],
            "config": {"size": 32, "prompts": 4},
        }

    monkeypatch.setattr(export, "export_pipeline", lambda folder, dst, **kwargs: dst)
    monkeypatch.setattr(replayed_recipes, "check", lambda ir, n, k: checked.append((Path(ir).name, n, k)))
    monkeypatch.setattr(adherence, "evaluate", fake_usual)
    result = wq.measure(TOY, tmp_path / "work", num_prompts=4, steps=5, variants=(), replayed={name: found})
    assert checked == [("openvino_model.xml", name, knobs)]  # on the toy's export, before evaluate()
    assert asked["recipes"] == {name: knobs} and asked["variants"] == ()
    key = whole_image_rows.OV_ACCURACY_CONTROL_20
    assert list(result["rows"]) == [key] and key in whole_image_rows.ROWS  # a row bench_whole_image.py times
    n = len(replayed_recipes.kept_in_float(knobs))
    assert (
        result["rows"][key]["title"]
        == f"OpenVINO full INT8, accuracy control's {n} operations in float, 5 steps"
    )
    assert (result["rows"][key]["adherence"], result["rows"][key]["psnr_vs_f32"]) == (0.9, 33.0)
    assert result["config"]["replayed"] == {name: found.name}
