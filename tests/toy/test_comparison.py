"""What the pipelines of a comparison share: image i starts from the same noise whatever the
batch, and float images become uint8 the same way."""

from pathlib import Path

import numpy as np
import pytest

from sdaccel.toy import comparison

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "checkpoints" / "tiny-shapes-sdxl"


def test_paired_latents_draw_image_i_from_seed_plus_i():
    import torch

    if not (BASE / "model_index.json").is_file():
        pytest.skip("no committed checkpoint")
    three = comparison.paired_latents(BASE, 3, 32, seed=5)
    assert three.shape == (3, 4, 8, 8) and three.dtype == np.float32  # 32x32 images, latents 1/4
    np.testing.assert_array_equal(three[:2], comparison.paired_latents(BASE, 2, 32, seed=5))
    np.testing.assert_array_equal(
        three[2], torch.randn((4, 8, 8), generator=torch.Generator().manual_seed(7))
    )


def test_uint8_images_round_and_clip():
    arrays = np.array([[[[0.0, 0.5, 1.0], [-0.2, 1.3, 0.998]]]], np.float32)  # (1, 1, 2, 3)
    (image,) = comparison.uint8_images(arrays)
    assert image.dtype == np.uint8 and image.tolist() == [[[0, 128, 255], [0, 255, 254]]]
