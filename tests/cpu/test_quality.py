"""Quality metrics behave as their definitions say: identical -> PSNR inf / SSIM 1, known noise ->
the PSNR it must give, relative errors, CLIP score absent without a local model, the grid's layout."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from sdaccel.cpu import quality


def _image(seed: int = 0, size: int = 64) -> np.ndarray:
    """A smooth test image (gradients and a disc), uint8 HxWx3."""
    y, x = np.mgrid[0:size, 0:size] / size
    disc = ((x - 0.5) ** 2 + (y - 0.5) ** 2 < 0.1).astype(float)
    rng = np.random.default_rng(seed)
    channels = [x, y, disc * rng.uniform(0.5, 1.0)]
    return np.clip(np.stack(channels, -1) * 200 + 20, 0, 255).astype(np.uint8)


def test_identical_images():
    image = _image()
    assert quality.psnr(image, image.copy()) == math.inf
    assert quality.ssim(image, image.copy()) == pytest.approx(1.0)
    assert quality.psnr(Image.fromarray(image), image) == math.inf  # PIL and arrays alike


@pytest.mark.parametrize("sigma", [2.0, 5.0, 10.0])
def test_psnr_of_known_gaussian_noise(sigma):
    # no clipping happens (values stay within [20, 220] +- 6 sigma), so MSE ~ sigma^2 after rounding
    image = _image()
    noise = np.random.default_rng(1).normal(0, sigma, image.shape)
    noisy = np.clip(np.rint(image + noise), 0, 255).astype(np.uint8)
    expected = 10 * math.log10(255**2 / (sigma**2 + 1 / 12))  # rounding adds uniform noise of variance 1/12
    assert quality.psnr(image, noisy) == pytest.approx(expected, abs=0.15)


def test_ssim_decreases_with_noise():
    image = _image()
    rng = np.random.default_rng(2)
    scores = [
        quality.ssim(image, np.clip(image + rng.normal(0, s, image.shape), 0, 255).astype(np.uint8))
        for s in (1, 5, 20)
    ]
    assert 1 > scores[0] > scores[1] > scores[2] > 0


def test_float_images_are_read_in_0_1():
    image = _image()
    assert quality.psnr(image, image / 255.0) == math.inf


def test_compare_images_means_and_identical_count():
    a, b = _image(0), _image(1)
    report = quality.compare_images([a, a], [a.copy(), b])
    assert report["identical"] == 1
    assert report["psnr"][0] == math.inf and report["psnr_mean"] == pytest.approx(report["psnr"][1])
    assert report["ssim_mean"] == pytest.approx((1 + report["ssim"][1]) / 2)
    with pytest.raises(ValueError):
        quality.compare_images([a], [a, b])


def test_paired_summary_is_a_json_row():
    a, b = _image(0), _image(1)
    report = quality.compare_images([a, a], [a.copy(), b])
    assert quality.paired_summary([a, a], [a.copy(), b]) == {
        "psnr_mean": report["psnr_mean"],
        "ssim_mean": report["ssim_mean"],
        "identical": 1,
    }
    same = quality.paired_summary([a, b], [a.copy(), b.copy()])
    assert same == {"psnr_mean": None, "ssim_mean": 1.0, "identical": 2}  # no inf in JSON


def test_relative_error():
    ref = np.array([3.0, 4.0])
    assert quality.relative_error(ref, ref) == 0
    assert quality.relative_error(ref, ref * 1.1) == pytest.approx(0.1)
    assert quality.relative_error(ref, np.array([3.0, 4.5])) == pytest.approx(0.1)


def test_unet_relative_error_on_a_small_openvino_model():
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    def model(scale: float):
        x = ops.parameter([2, 8], np.float32, name="sample")
        weight = ops.constant(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8) * scale)
        out = ops.matmul(x, weight, False, False)
        return ov.Model([out], [x])

    rngs = [np.random.default_rng(i) for i in range(3)]
    inputs = [{"sample": rng.standard_normal((2, 8), dtype=np.float32)} for rng in rngs]
    assert quality.unet_relative_error(model(1.0), model(1.0), inputs) == [0.0, 0.0, 0.0]
    errors = quality.unet_relative_error(model(1.0), model(1.02), inputs)
    assert errors == pytest.approx([0.02] * 3, rel=1e-4)


def test_clip_score_without_a_local_model_is_none(tmp_path):
    assert quality.clip_score([_image()], ["a disc"], model=tmp_path / "no-clip-here") is None


def test_comparison_grid_layout():
    images = {"f32": [_image(0), _image(1)], "int8": [Image.fromarray(_image(2)), _image(3)]}
    grid = quality.comparison_grid(images, captions={"int8": "PSNR 30 dB"}, cell=32, label_width=100)
    assert grid.size == (100 + 2 * 32, 2 * 32)
    pixels = np.asarray(grid)
    # the first image of the second row sits at (x=100, y=32), resized to 32x32
    expected = np.asarray(Image.fromarray(_image(2)).resize((32, 32), Image.NEAREST))
    assert np.array_equal(pixels[32:64, 100:132], expected)


def test_comparison_grid_keeps_the_aspect_ratio():
    wide = np.zeros((32, 64, 3), np.uint8)  # height 32, width 64
    grid = quality.comparison_grid({"f32": [wide, wide], "int8": [wide, wide]}, cell=16, label_width=10)
    assert grid.size == (10 + 2 * 32, 2 * 16)
