"""Prompt adherence of every pipeline on the committed shapes checkpoints, beside PSNR/SSIM.

The thresholds come from ``python -m sdaccel.toy.adherence checkpoints/tiny-shapes-<layout>
--prompts 96`` (see the checkpoints' README.md); these tests use the first 24 of those prompts,
where one image is 4 points, and leave room for another torch/OpenVINO build's last bits.
"""

import json
from pathlib import Path

import pytest

from sdaccel.toy import adherence

REPO = Path(__file__).resolve().parents[2]
PROMPTS = 24

#: Measured on 96 held-out prompts: torch, JAX and OpenVINO f32 drew 96/96 (SDXL layout) and
#: 95-96/96 (SD 1.5 layout) right.
MIN_FLOAT = 0.9
#: Weight-only INT8 lost at most 2 of 96 images (2 points) against OpenVINO f32.
MAX_WEIGHT_ONLY_LOSS = 0.1
#: Activation quantization (hybrid, full INT8) of these 1 M-parameter UNets changes colours:
#: 0.78-0.81 of 96 for the SDXL layout. A floor, not a target: notebook 05 explains the loss.
MIN_ACTIVATION_INT8 = 0.6


@pytest.fixture(scope="module", params=["sdxl", "sd15"])
def evaluation(request, tmp_path_factory):
    checkpoint = REPO / "checkpoints" / f"tiny-shapes-{request.param}"
    if not (checkpoint / "model_index.json").is_file():
        pytest.skip(f"no committed checkpoint {checkpoint.name}")
    work = tmp_path_factory.mktemp(f"adherence-{request.param}")
    out = work / "adherence.json"
    result = adherence.main([str(checkpoint), "--prompts", str(PROMPTS), "--work-dir", str(work)])
    assert json.loads(out.read_text())["rows"].keys() == result["rows"].keys()
    return request.param, result


def test_float_pipelines_draw_the_prompt(evaluation):
    _, result = evaluation
    rows = result["rows"]
    assert set(rows) == {"torch_fp32", "jax_fp32", "ov_f32", "ov_default", *adherence.VARIANTS}
    for name in ("torch_fp32", "jax_fp32", "ov_f32", "ov_default"):
        assert rows[name]["adherence"]["score"] >= MIN_FLOAT, (name, rows[name])
        assert rows[name]["adherence"]["n"] == PROMPTS


def test_pipelines_agree_with_the_reference_pixels(evaluation):
    """Same noise, same sampler, f32: OpenVINO (and JAX, where it runs the same sampler) reproduce
    diffusers' pixels; the adherence numbers therefore compare like with like."""
    layout, result = evaluation
    rows = result["rows"]
    assert rows["ov_f32"]["vs_torch_fp32"]["psnr_mean"] > 45, rows["ov_f32"]
    assert rows["jax_fp32"]["vs_torch_fp32"]["psnr_mean"] > 45, rows["jax_fp32"]
    # both checkpoints ship a sampler the JAX pipeline implements (Euler, DDIM)
    assert adherence.different_samplers(result) == []
    assert rows["jax_fp32"]["sampler"] == {"sdxl": "EulerDiscreteScheduler", "sd15": "DDIMScheduler"}[layout]


def test_a_different_sampler_is_flagged():
    rows = {"torch_fp32": {"sampler": "PNDMScheduler"}, "jax_fp32": {"sampler": "EulerDiscreteScheduler"}}
    assert adherence.different_samplers({"rows": rows}) == ["jax_fp32"]


def test_int8_variants_cost_what_was_measured(evaluation):
    _, result = evaluation
    rows = result["rows"]
    f32 = rows["ov_f32"]["adherence"]["score"]
    assert rows["int8_weights"]["adherence"]["score"] >= f32 - MAX_WEIGHT_ONLY_LOSS, rows["int8_weights"]
    for variant in ("hybrid", "full_int8"):
        assert rows[variant]["adherence"]["score"] >= MIN_ACTIVATION_INT8, (variant, rows[variant])
        assert rows[variant]["precision"] == "int8+f32"
    # keeping the ResNets in float is the lever that gives the colours back (notebook 05)
    assert rows["full_int8, float resnets"]["adherence"]["score"] >= rows["full_int8"]["adherence"]["score"]
    # weight-only stays closest to the f32 pixels
    psnr = {v: rows[v]["vs_ov_f32"]["psnr_mean"] for v in ("int8_weights", "hybrid", "full_int8")}
    assert psnr["int8_weights"] > max(psnr["hybrid"], psnr["full_int8"]), psnr


def test_a_prompt_blind_pipeline_would_fail(evaluation):
    """The metric is not generous: the reference images scored against shifted prompts fail."""
    from sdaccel.toy import dataset

    _, result = evaluation
    prompts = result["prompts"]
    shifted = prompts[1:] + prompts[:1]
    assert dataset.adherence(result["images"]["torch_fp32"], shifted)["score"] < 0.4


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="must include 'torch_fp32'"):
        adherence.evaluate("unused", tmp_path, pipelines=("ov_f32",))
    with pytest.raises(ValueError, match="include it in pipelines"):
        adherence.evaluate("unused", tmp_path, pipelines=("torch_fp32",))


def test_format_table_is_markdown_with_a_note_per_other_sampler():
    a = {"score": 0.95, "colour": 0.97, "shape": 0.96, "background": 1.0, "position": 0.99}

    def vs(psnr, ssim, identical):
        return {"psnr_mean": psnr, "ssim_mean": ssim, "identical": identical}

    result = {
        "config": {"prompts": 24},
        "rows": {
            "torch_fp32": {"adherence": a, "precision": "f32", "sampler": "PNDMScheduler"},
            "jax_fp32": {
                "adherence": a,
                "precision": "f32",
                "sampler": "EulerDiscreteScheduler",
                "vs_torch_fp32": vs(30.54, 0.98, 0),
            },
            "ov_f32": {
                "adherence": a,
                "precision": "f32",
                "sampler": "PNDMScheduler",
                "vs_torch_fp32": vs(60.0, 1.0, 24),
            },
        },
    }
    assert adherence.format_table(result).splitlines() == [
        "| pipeline | precision | adherence (colour+shape) | colour | shape | background | position "
        "| PSNR vs torch (dB) | SSIM vs torch | PSNR vs ov_f32 (dB) | SSIM vs ov_f32 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        "| torch_fp32 | f32 | **0.950** | 0.970 | 0.960 | 1.000 | 0.990 | - | - | - | - |",
        "| jax_fp32 | f32 | **0.950** | 0.970 | 0.960 | 1.000 | 0.990 | 30.5 | 0.980 | - | - |",
        "| ov_f32 | f32 | **0.950** | 0.970 | 0.960 | 1.000 | 0.990 | identical | 1.000 | - | - |",
        "",
        "jax_fp32 ran EulerDiscreteScheduler (the checkpoint's PNDMScheduler is not implemented there): "
        "its PSNR/SSIM include the change of sampler.",
    ]
