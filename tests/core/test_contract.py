"""The shared front-end contract (sdaccel.core.contract) on its own: defaults from a checkpoint's
configs, the input checks and their messages, the timings, and the shared image helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdaccel.core import contract
from sdaccel.core.contract import Defaults, check_inputs, check_seed

SDXL_INDEX = {"_class_name": "StableDiffusionXLPipeline"}
SD15_INDEX = {"_class_name": "StableDiffusionPipeline"}


def sdxl_defaults() -> Defaults:
    """SDXL base: sample_size 128, 3 UNet levels, VAE factor 8."""
    return Defaults.from_checkpoint(SDXL_INDEX, 128, 3, 8, 1000)


def test_defaults_from_checkpoint():
    sdxl = sdxl_defaults()
    assert (sdxl.steps, sdxl.guidance_scale, sdxl.height, sdxl.width) == (20, 5.0, 1024, 1024)
    assert sdxl.size_multiple == 32 and sdxl.max_steps == 1000
    sd15 = Defaults.from_checkpoint(SD15_INDEX, 64, 4, 8)
    assert (sd15.guidance_scale, sd15.height, sd15.size_multiple) == (7.5, 512, 64)
    own = {**SD15_INDEX, "sdaccel_defaults": {"steps": 4, "guidance_scale": 0.0}}
    few = Defaults.from_checkpoint(own, (96, 64), 2, 4, 500)
    assert (few.steps, few.guidance_scale, few.height, few.width, few.size_multiple, few.max_steps) == (
        4, 0.0, 384, 256, 8, 500,
    )  # fmt: skip
    assert contract.vae_scale_factor([128, 256, 512, 512]) == 8
    assert contract.size_multiple(1, 8) == 8


def test_a_good_call_gets_its_defaults():
    request = check_inputs("a red circle", defaults=sdxl_defaults())
    assert request.prompts == ["a red circle"] and request.batch == 1 and request.negative_prompts is None
    assert (request.steps, request.guidance_scale, request.height, request.width, request.seed) == (
        20, 5.0, 1024, 1024, 0,
    )  # fmt: skip
    assert request.guided
    request = check_inputs(
        ("a", "b"), "blurry", np.int64(3), 1, 512, 768, 2**32 - 1, defaults=sdxl_defaults()
    )
    assert request.negative_prompts == ["blurry", "blurry"] and request.steps == 3 and not request.guided
    assert type(request.steps) is int and type(request.guidance_scale) is float and request.seed == 2**32 - 1


#: (arguments, error type, a piece of the message that names the fix)
BAD = [
    (dict(prompts=[]), ValueError, "pass one prompt"),
    (dict(prompts=None), TypeError, "string or a list of strings"),
    (dict(prompts=b"bytes"), TypeError, "string or a list of strings"),
    (dict(prompts=["a", 3]), TypeError, r"prompts\[1\] is a int"),
    (dict(negative_prompts=["x", "y"]), ValueError, "2 negative prompts for 1 prompts"),
    (dict(negative_prompts=5), TypeError, "negative_prompts must be None"),
    (dict(steps=2.5), ValueError, "integer from 1 to 1000"),
    (dict(steps=0), ValueError, "integer from 1 to 1000"),
    (dict(steps=1001), ValueError, "integer from 1 to 1000"),
    (dict(steps=True), ValueError, "integer from 1 to 1000"),
    (dict(guidance_scale=math.nan), ValueError, "finite number >= 0"),
    (dict(guidance_scale=math.inf), ValueError, "finite number >= 0"),
    (dict(guidance_scale=-1.0), ValueError, "finite number >= 0"),
    (dict(guidance_scale="5"), ValueError, "finite number >= 0"),
    (dict(height=0), ValueError, "nearest valid size is 32x1024"),
    (dict(height=1000, width=1000), ValueError, "multiples of 32.*nearest valid size is 992x992"),
    (dict(height=-64), ValueError, "positive multiples of 32"),
    (dict(height=512.0), TypeError, "height must be an integer"),
    (dict(seed=None), TypeError, r"random.randrange\(2\*\*32\)"),
    (dict(seed=1.0), TypeError, r"integer in \[0, 2\*\*32\)"),
    (dict(seed=2**40), ValueError, r"seed % 2\*\*32"),
    (dict(seed=-1), ValueError, r"seed % 2\*\*32"),
]


@pytest.mark.parametrize("kwargs, error, fix", BAD, ids=[f"{k}" for k, *_ in BAD])
def test_bad_inputs_name_the_fix(kwargs, error, fix):
    call = {"prompts": "a red circle", **kwargs}
    with pytest.raises(error, match=fix):
        check_inputs(**call, defaults=sdxl_defaults())


def test_check_seed():
    assert check_seed(0) == 0 and check_seed(np.uint32(7)) == 7 and check_seed(2**32 - 1) == 2**32 - 1
    for bad in (None, 2**32, -1, 0.0, True):
        with pytest.raises((TypeError, ValueError)):
            check_seed(bad)


def test_normalize_prompts_never_splits_a_string():
    assert contract.normalize_prompts("a red circle") == ["a red circle"]
    assert contract.normalize_prompts(("a", "b")) == ["a", "b"]
    assert contract.normalize_negative_prompts(None, 3) is None
    assert contract.normalize_negative_prompts("x", 2) == ["x", "x"]


def test_make_timings_counts_real_images_only():
    t = contract.make_timings(
        compile_s=1.0, run_s=4.0, encode_s=1.0, denoise_decode_s=3.0, images=1, steps=2, height=32, width=32,
        padded=3,
    )  # fmt: skip
    assert set(contract.TIMING_KEYS) <= set(t) and t["padded"] == 3
    assert t["images_per_s"] == 0.25 and t["per_image_s"] == 4.0  # 1 image in 4 s, not 4


def test_unscale_latents_numpy_nhwc_and_nchw():
    x = np.ones((1, 2, 2, 4), np.float32)
    np.testing.assert_allclose(contract.unscale_latents(x, 0.5), 2.0)
    mean, std = [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 1.0, 2.0]
    out = contract.unscale_latents(x, 0.5, mean, std)
    np.testing.assert_allclose(out[0, 0, 0], [2.0, 5.0, 4.0, 7.0])
    nchw = contract.unscale_latents(x.transpose(0, 3, 1, 2), 0.5, mean, std, channel_axis=1)
    np.testing.assert_allclose(nchw.transpose(0, 2, 3, 1), out)


def test_to_pil_and_image_grid():
    array = np.zeros((3, 4, 6, 3), np.float32)
    array[1] = 1.0
    array[2] = 0.5
    images = contract.to_pil(array)
    assert [im.size for im in images] == [(6, 4)] * 3
    assert np.asarray(images[2])[0, 0].tolist() == [128, 128, 128]  # 127.5 rounds to 128
    grid = contract.image_grid(images, cols=2)
    assert grid.size == (12, 8)
    np.testing.assert_array_equal(np.asarray(grid)[:4, 6:], np.asarray(images[1]))
    np.testing.assert_array_equal(np.asarray(grid)[4:, 6:], 255)  # the empty cell stays white
    result = contract.GenerationResult(images, array, {})
    assert len(result) == 3 and result.latents is None


def test_scheduler_names_are_one_table():
    """Every front-end resolves ``scheduler=`` through the same table: a short name (any case) or a
    class name the front-end runs; anything else is refused naming the choices."""
    known = {"EulerDiscreteScheduler", "LCMScheduler"}
    assert contract.scheduler_class_name("lcm", known) == "LCMScheduler"
    assert contract.scheduler_class_name("EULER", known) == "EulerDiscreteScheduler"
    assert contract.scheduler_class_name("LCMScheduler", known) == "LCMScheduler"
    with pytest.raises(
        ValueError, match=r"Unknown scheduler kind 'euler_a'; choose 'euler', 'lcm' or one of"
    ):
        contract.scheduler_class_name("euler_a", known)  # a short name of a class this front-end lacks
    with pytest.raises(ValueError, match="must be a string"):
        contract.scheduler_class_name(3, known)
    assert set(contract.SCHEDULER_NAMES.values()) == {
        "EulerDiscreteScheduler",
        "DDIMScheduler",
        "EulerAncestralDiscreteScheduler",
        "LCMScheduler",
    }


def test_every_front_end_runs_every_short_scheduler_name():
    jax_track = pytest.importorskip("sdaccel.tpu.schedulers")
    assert set(contract.SCHEDULER_NAMES.values()) <= set(jax_track.SCHEDULERS)
    pytest.importorskip("openvino_genai")
    from sdaccel.cpu.genai import GENAI_SCHEDULERS
    from sdaccel.cpu.pipeline import diffusers_schedulers

    assert set(contract.SCHEDULER_NAMES.values()) <= set(GENAI_SCHEDULERS) <= diffusers_schedulers()
