"""The TPU floor of one image, from the plans' recorded FLOPs."""

import json
from pathlib import Path

import pytest

from sdaccel.tpu import plan_floor

PLANS = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "results").glob("tpu_plan_*.json"))


def _plan(path, rows):
    path.write_text(json.dumps({"rows": rows}))
    return path


def _row(unet_call, batch, guidance=True, size=1024):
    return {
        "flops": {"unet_call": unet_call},
        "global_batch": batch,
        "guidance": guidance,
        "height": size,
        "width": size,
        "dtype": "bfloat16",
    }


def test_unet_row_flops_divides_by_the_latents_and_checks_agreement(tmp_path):
    a = _plan(tmp_path / "a.json", [_row(80.0, 4), _row(None, 4)])
    b = _plan(tmp_path / "b.json", [_row(10.0, 1, guidance=False)])
    out = plan_floor.unet_row_flops([a, b])
    assert out["flops"] == pytest.approx(10.0)
    assert (out["height"], out["width"]) == (1024, 1024)
    assert [s["latents"] for s in out["sources"]] == [8, 1]
    c = _plan(tmp_path / "c.json", [_row(11.0, 1, guidance=False)])
    with pytest.raises(ValueError, match="disagree"):
        plan_floor.unet_row_flops([a, c])
    d = _plan(tmp_path / "d.json", [_row(10.0, 1, guidance=False, size=512)])
    with pytest.raises(ValueError, match="different sizes"):
        plan_floor.unet_row_flops([a, d])
    with pytest.raises(ValueError, match="no row"):
        plan_floor.unet_row_flops([_plan(tmp_path / "e.json", [_row(None, 1)])])


@pytest.mark.skipif(not PLANS, reason="no tpu_plan JSON in benchmarks/results")
def test_the_recorded_plans_agree_on_sdxl_unet_flops():
    out = plan_floor.unet_row_flops(PLANS)
    # SDXL's UNet at 1024x1024 (128x128 latents): about 6.8 TFLOP per latent, in every plan
    assert out["flops"] == pytest.approx(6.779e12, rel=1e-3)
    assert (out["height"], out["width"]) == (1024, 1024)


def test_tpu_floor():
    out = plan_floor.tpu_floor(6.0e12, 4, False, 10.0e12, 200e12, encode_flops=1.0e12)
    assert out["unet_flops"] == pytest.approx(24.0e12)
    assert out["flops"] == pytest.approx(35.0e12)
    assert out["floor_s"] == pytest.approx(0.175)
    assert out["unet_floor_s"] == pytest.approx(0.12)
    guided = plan_floor.tpu_floor(6.0e12, 20, True, None, 200e12)
    assert guided["flops"] == pytest.approx(240.0e12)
    with pytest.raises(ValueError):
        plan_floor.tpu_floor(6.0e12, 0, False, None, 200e12)
