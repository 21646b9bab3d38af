"""The INT8 VAE decoder recipes (sdaccel.cpu.quantize_vae) on the trained tiny-shapes decoder: they
change the IR as they should, stay close to the f32 decoder, and refuse bad input before writing
anything."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from sdaccel.cpu import quantize_vae as QV  # noqa: E402
from sdaccel.cpu.quality import compare_images, compile_f32  # noqa: E402

SHAPES_SD15 = "checkpoints/tiny-shapes-sd15"


@pytest.fixture(scope="module")
def vae(tmp_path_factory):
    """The trained tiny-shapes SD 1.5 VAE decoder as an f32 IR, its config, and decoder inputs."""
    import json

    import torch
    from diffusers import AutoencoderKL

    from sdaccel.cpu.convert import convert_vae_decoder

    module = AutoencoderKL.from_pretrained(f"{SHAPES_SD15}/vae", torch_dtype=torch.float32).eval()
    xml = tmp_path_factory.mktemp("vae") / "vae_decoder.xml"
    ov.save_model(convert_vae_decoder(module, example_size=8), str(xml), compress_to_fp16=False)
    config = json.loads(open(f"{SHAPES_SD15}/vae/config.json").read())
    rng = np.random.default_rng(1)
    latents = QV.decoder_inputs(rng.standard_normal((8, 4, 8, 8), dtype=np.float32), config)
    return xml, config, latents


def test_decoder_inputs_unscale_as_the_pipeline_does():
    latents = np.arange(2 * 4 * 2 * 2, dtype=np.float32).reshape(2, 4, 2, 2)
    np.testing.assert_array_equal(QV.decoder_inputs(latents, {"scaling_factor": 0.5}), latents * 2)
    config = {"scaling_factor": 0.5, "latents_mean": [1, 2, 3, 4], "latents_std": [2, 2, 2, 2]}
    mean = np.array([1, 2, 3, 4], np.float32).reshape(1, 4, 1, 1)
    np.testing.assert_allclose(QV.decoder_inputs(latents, config), latents * 2 / 0.5 + mean)


def test_vae_decoder_recipes_and_their_pixel_cost(vae, tmp_path):
    xml, _, latents = vae
    calibration, held_out = latents[:4], latents[4:]
    reference = QV.decode(compile_f32(xml), held_out)
    assert reference.shape == (4, 32, 32, 3)
    reports, psnr = {}, {}
    for variant in QV.VARIANTS:
        dst = tmp_path / f"{variant}.xml"
        reports[variant] = QV.quantize_vae_decoder(
            xml, dst, variant, None if variant == "int8_weights" else calibration
        )
        images = QV.decode(compile_f32(dst), held_out)
        psnr[variant] = compare_images(list(reference), list(images))["psnr_mean"]
    weights, hybrid, full = reports["int8_weights"], reports["hybrid"], reports["full_int8"]
    assert weights["fake_quantize"] == 0 and weights["float_weight_elements"] == 0
    assert weights["calibration_samples"] == 0 and hybrid["calibration_samples"] == 4
    assert hybrid["fake_quantize"] > 0 and full["fake_quantize"] >= hybrid["fake_quantize"]
    # conv_in and conv_out stay in float in the calibrated recipes (SENSITIVE_LAYER_PATTERNS)
    assert full["float_weight_elements"] > 0
    assert weights["size_bytes"] < 0.4 * (xml.stat().st_size + xml.with_suffix(".bin").stat().st_size)
    # weight-only INT8 is close to invisible; activation INT8 costs visibly more on this tiny VAE
    assert psnr["int8_weights"] > 40
    assert 15 < psnr["full_int8"] < psnr["int8_weights"] and 15 < psnr["hybrid"] < psnr["int8_weights"]


def test_quantize_vae_decoder_refuses_bad_input_before_writing(vae, tmp_path):
    xml, _, latents = vae
    dst = tmp_path / "out" / "vae.xml"
    with pytest.raises(ValueError, match="unknown INT8 variant"):
        QV.quantize_vae_decoder(xml, dst, "int4", latents)
    with pytest.raises(FileNotFoundError, match="export it first"):
        QV.quantize_vae_decoder(tmp_path / "missing.xml", dst, "int8_weights")
    with pytest.raises(ValueError, match="needs calibration latents"):
        QV.quantize_vae_decoder(xml, dst, "full_int8", None)
    with pytest.raises(ValueError, match="reads 4 latent channels"):
        QV.quantize_vae_decoder(xml, dst, "hybrid", latents[:, :3])
    with pytest.raises(ValueError, match="non-empty"):
        QV.quantize_vae_decoder(xml, dst, "hybrid", latents[:0])
    assert not dst.parent.exists()
