"""The shapes data set is deterministic and the adherence metric reads it back exactly, and only it."""

import numpy as np
import pytest

from sdaccel.toy import dataset


@pytest.fixture(scope="module")
def every_combination():
    """One image of each of the 630 combinations (rendered with jitter), and its caption."""
    return dataset.make_dataset(len(dataset.all_combinations()), seed=3, split="all")


def test_dataset_is_deterministic():
    a, captions_a = dataset.make_dataset(40, seed=7)
    b, captions_b = dataset.make_dataset(40, seed=7)
    c, captions_c = dataset.make_dataset(40, seed=8)
    assert a.shape == (40, 32, 32, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and captions_a == captions_b
    assert not np.array_equal(a, c) and captions_a != captions_c


def test_split_keeps_heldout_combinations_out_of_training():
    heldout = dataset.heldout_combinations()
    assert len(heldout) == 63 and heldout == dataset.heldout_combinations()
    _, train = dataset.make_dataset(600, seed=0, split="train")
    heldout_captions = {dataset.caption(a.colour, a.shape, a.background, a.position) for a in heldout}
    assert not heldout_captions & set(train)
    prompts = dataset.heldout_prompts(100, seed=1)
    assert set(prompts) == heldout_captions  # every held-out combination, before any repeats
    assert dataset.heldout_prompts(100, seed=1) == prompts != dataset.heldout_prompts(100, seed=2)
    # every colour/shape pair of the held-out set is seen in training, elsewhere
    pairs = {(a.colour, a.shape) for a in map(dataset.parse_prompt, train)}
    assert {(a.colour, a.shape) for a in heldout} <= pairs


def test_captions_parse_and_compose():
    prompt = dataset.caption("orange", "triangle", "white", "top left")
    assert prompt == "an orange triangle on a white background, top left"
    assert dataset.parse_prompt(prompt) == dataset.Attributes("orange", "triangle", "white", "top left")
    with pytest.raises(ValueError, match="Unknown shape"):
        dataset.parse_prompt("a red star on a blue background, center")
    with pytest.raises(ValueError, match="Not a shapes caption"):
        dataset.parse_prompt("an astronaut riding a horse")
    assert dataset.is_caption(prompt) and not dataset.is_caption("an astronaut riding a horse")
    assert not dataset.is_caption("a red star on a blue background, center")
    with pytest.raises(ValueError, match="split must be"):
        dataset.prompts(3, split="test")


def test_metric_reads_every_ground_truth_image(every_combination):
    images, captions = every_combination
    result = dataset.adherence(list(images), captions)
    assert result == {**{name: 1.0 for name in dataset.ATTRIBUTES}, "score": 1.0, "all": 1.0, "n": 630}


@pytest.mark.parametrize("size", [64, 128])
def test_metric_reads_other_sizes_and_input_types(size):
    from PIL import Image

    images, captions = dataset.make_dataset(60, seed=5, size=size, split="all")
    as_pil = [Image.fromarray(image) for image in images]
    as_float = [image / 255.0 for image in images]
    assert dataset.adherence(as_pil, captions)["all"] == 1.0
    assert dataset.adherence(as_float, captions)["all"] == 1.0


def test_metric_rejects_the_wrong_captions(every_combination):
    images, captions = every_combination
    shifted = captions[1:] + captions[:1]  # each image judged against another image's caption
    result = dataset.adherence(list(images), shifted)
    for name in dataset.ATTRIBUTES:
        assert result[name] < 0.5, (name, result)
    assert result["score"] < 0.15


def test_metric_is_at_chance_on_noise(every_combination):
    """Readings of noise cannot depend on the prompt, so each accuracy is near chance."""
    from scipy.ndimage import gaussian_filter

    _, captions = every_combination  # every combination once: balanced prompts
    rng = np.random.default_rng(0)
    pixel_noise = rng.integers(0, 256, (len(captions), 32, 32, 3), dtype=np.uint8)
    blobs = [
        np.clip((gaussian_filter(x, (2, 2, 0)) - 0.5) * 6 + 0.5, 0, 1)
        for x in rng.random((len(captions), 32, 32, 3))
    ]
    for images in (list(pixel_noise), blobs):
        result = dataset.adherence(images, captions)
        for name, chance in dataset.CHANCE.items():
            assert abs(result[name] - chance) < 0.08, (name, result)
        assert result["score"] < 0.12


def test_blank_image_reads_as_no_shape():
    blank = np.full((32, 32, 3), dataset.COLOURS["blue"], np.uint8)
    assert dataset.classify(blank) == dataset.Attributes(None, None, "blue", None)
    result = dataset.adherence([blank], ["a red circle on a blue background, center"])
    assert result["background"] == 1.0 and result["score"] == 0.0
    # what a notebook prints for a miss: the caption asked for, and what the pixels say
    assert dataset.read_back([blank], ["a red circle on a blue background, center"]) == (
        f"  asked: {'a red circle on a blue background, center':55s} read back: a ? ? on a blue background, ?"
    )
