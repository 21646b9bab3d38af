"""Coloured shapes: a procedural text-to-image data set and a prompt-adherence metric.

A trained model is needed to tell whether an optimised pipeline still draws *what the prompt
says*; a random-weight checkpoint draws noise whatever the prompt. This module makes the smallest
data set on which that question has a clear answer, entirely in code (no downloads):

    "a red circle on a blue background, top left"

Four attributes compose freely, so a model can only match the caption by reading it:

* the shape's colour (6 :data:`SHAPE_COLOURS`),
* the shape (:data:`SHAPES`: circle, square, triangle; all three have the same area, so size
  tells nothing and only the outline does),
* the background colour (any of the 8 :data:`COLOURS` except the shape's),
* the position (:data:`POSITIONS`: the four quadrants and the center).

That is 6 x 3 x 7 x 5 = 630 prompts. A fixed tenth of them (:func:`heldout_combinations`) never
appears in the training data, so :func:`heldout_prompts` asks for combinations a model has not
seen (every colour/shape pair *has* been seen, on other backgrounds or in other places).

Images are 32x32 by default (any size works), rendered with 4x4 supersampling (anti-aliased
edges), with a little jitter in size and place, deterministically from a seed: :func:`make_dataset`.

The metric needs no model either. :func:`classify` reads an image with pixel rules:

1. background = the palette colour nearest to the median of a 2-pixel frame along the border
   (only the tip of a triangle at the top ever reaches it: a few pixels the median ignores);
2. shape mask = the largest connected region of pixels far (in RGB) from that background;
3. colour = the palette colour nearest to the median of the mask's interior;
4. position = the anchor nearest to the mask's centroid;
5. shape = the template (circle, square, triangle with the mask's area and centroid) that overlaps
   the mask best (intersection over union).

:func:`adherence` compares these readings with the prompts: its ``score`` is the fraction of images
whose colour *and* shape both match, and it gives each attribute's accuracy. On the data set's own
images every attribute reads right (``tests/toy/test_dataset.py``); on noise the readings do not depend
on the prompt, so each accuracy falls to chance (:data:`CHANCE`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The palette, in sRGB. Every pair is at least 94 apart (Euclidean RGB; the closest pair is
#: orange/yellow), so the nearest colour is unambiguous even for a blurry or slightly off image.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (225, 30, 30),
    "green": (30, 170, 60),
    "blue": (35, 75, 235),
    "yellow": (250, 225, 40),
    "purple": (150, 40, 190),
    "orange": (250, 135, 10),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
SHAPE_COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple", "orange")
BACKGROUNDS: tuple[str, ...] = tuple(COLOURS)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
#: Centre of the shape as a fraction of the image side, (x, y) with y downwards.
POSITIONS: dict[str, tuple[float, float]] = {
    "top left": (0.32, 0.32),
    "top right": (0.68, 0.32),
    "bottom left": (0.32, 0.68),
    "bottom right": (0.68, 0.68),
    "center": (0.5, 0.5),
}
ATTRIBUTES: tuple[str, ...] = ("colour", "shape", "background", "position")
#: Accuracy of a reading that ignores the image, for prompts drawn uniformly.
CHANCE: dict[str, float] = {
    "colour": 1 / len(SHAPE_COLOURS),
    "shape": 1 / len(SHAPES),
    "background": 1 / (len(BACKGROUNDS) - 1),
    "position": 1 / len(POSITIONS),
}

#: Radius of the circle as a fraction of the image side; the square and triangle have its area.
RADIUS = 0.17
SIZE_JITTER = 0.06  # relative
PLACE_JITTER = 0.02  # fraction of the side
HELDOUT_FRACTION = 0.1
_SUPERSAMPLE = 4


@dataclass(frozen=True)
class Attributes:
    """What a caption asks for, or what :func:`classify` reads in an image (``None``: unreadable)."""

    colour: str | None
    shape: str | None
    background: str | None
    position: str | None

    def __str__(self) -> str:
        """The caption of these attributes (``?`` for one that could not be read)."""
        return caption(*(value or "?" for value in _values(self)))


def caption(colour: str, shape: str, background: str, position: str) -> str:
    """The prompt for one combination, e.g. ``"a red circle on a blue background, top left"``."""
    return (
        f"{_article(colour)} {colour} {shape} on {_article(background)} {background} background, {position}"
    )


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


_CAPTION = re.compile(r"^an? (\w+) (\w+) on an? (\w+) background, (.+)$")


def parse_prompt(prompt: str) -> Attributes:
    """The attributes a caption of :func:`caption`'s form asks for."""
    match = _CAPTION.match(prompt.strip().lower())
    if match is None:
        raise ValueError(
            f"Not a shapes caption: {prompt!r} (expected e.g. {caption('red', 'circle', 'blue', 'center')!r})"
        )
    attributes = Attributes(*match.groups())
    known = (SHAPE_COLOURS, SHAPES, BACKGROUNDS, POSITIONS)
    for name, value, options in zip(ATTRIBUTES, match.groups(), known, strict=True):
        if value not in options:
            raise ValueError(f"Unknown {name} {value!r} in {prompt!r}; known: {list(options)}")
    return attributes


def is_caption(prompt: str) -> bool:
    """Whether ``prompt`` is a caption of this data set (so :func:`adherence` can score it)."""
    try:
        parse_prompt(prompt)
    except ValueError:
        return False
    return True


def all_combinations() -> list[Attributes]:
    """The 630 (colour, shape, background, position) combinations, background != colour."""
    return [
        Attributes(c, s, b, p)
        for c, s, b, p in itertools.product(SHAPE_COLOURS, SHAPES, BACKGROUNDS, POSITIONS)
        if b != c
    ]


def heldout_combinations() -> frozenset[Attributes]:
    """The fixed tenth of the combinations that :func:`make_dataset` never draws for training."""
    combos = all_combinations()
    rng = np.random.default_rng(1234)  # fixed forever: changing it changes the split
    chosen = rng.choice(len(combos), size=round(HELDOUT_FRACTION * len(combos)), replace=False)
    return frozenset(combos[i] for i in chosen)


def _combinations(split: str) -> list[Attributes]:
    heldout = heldout_combinations()
    if split == "train":
        return [c for c in all_combinations() if c not in heldout]
    if split == "heldout":
        return sorted(heldout, key=lambda a: caption(*_values(a)))
    if split == "all":
        return all_combinations()
    raise ValueError(f"split must be 'train', 'heldout' or 'all', got {split!r}")


def _draw(n: int, rng: np.random.Generator, split: str) -> list[Attributes]:
    """``n`` combinations of ``split`` in shuffled rounds: each appears equally often."""
    combos = _combinations(split)
    order = np.concatenate([rng.permutation(len(combos)) for _ in range(n // len(combos) + 1)])
    return [combos[i] for i in order[:n]]


def prompts(n: int, seed: int = 0, split: str = "heldout") -> list[str]:
    """``n`` captions of ``split`` ('train', 'heldout' or 'all'), each combination used once
    before any repeats, in an order fixed by ``seed``."""
    return [caption(*_values(a)) for a in _draw(n, np.random.default_rng(seed), split)]


def heldout_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` prompts of held-out combinations, which the training data never shows."""
    return prompts(n, seed, "heldout")


def _values(attributes: Attributes) -> tuple:
    return (attributes.colour, attributes.shape, attributes.background, attributes.position)


# --------------------------------------------------------------------------------------------
# Rendering


def _shape_mask(shape: str, x: np.ndarray, y: np.ndarray, cx: float, cy: float, r: float) -> np.ndarray:
    """Boolean mask of ``shape`` centred (by centroid) at (cx, cy), with the area of a circle of
    radius ``r``; x and y are pixel-centre coordinates (broadcastable)."""
    if shape == "circle":
        return (x - cx) ** 2 + (y - cy) ** 2 <= r**2
    if shape == "square":
        half = r * np.sqrt(np.pi) / 2  # side^2 = pi r^2
        return (np.abs(x - cx) <= half) & (np.abs(y - cy) <= half)
    if shape == "triangle":
        # Equilateral, pointing up. Area sqrt(3)/4 s^2 = pi r^2; the centroid lies a third of
        # the height above the base.
        side = r * np.sqrt(4 * np.pi / np.sqrt(3))
        height = side * np.sqrt(3) / 2
        top, base = cy - 2 * height / 3, cy + height / 3
        half_width = (y - top) / height * side / 2  # widens linearly from the apex
        return (y >= top) & (y <= base) & (np.abs(x - cx) <= half_width)
    raise ValueError(f"Unknown shape {shape!r}; known: {SHAPES}")


def render(
    attributes: Attributes, size: int = 32, scale: float = 1.0, offset: tuple[float, float] = (0.0, 0.0)
) -> np.ndarray:
    """Draw one image, ``(size, size, 3)`` uint8, anti-aliased by supersampling.

    ``scale`` multiplies the shape's radius and ``offset`` (fractions of the side) moves it from
    its anchor: :func:`make_dataset` draws both at random.
    """
    n = size * _SUPERSAMPLE
    coords = (np.arange(n) + 0.5) / _SUPERSAMPLE  # pixel-centre coordinates in output pixels
    ax, ay = POSITIONS[attributes.position]
    cx, cy = (ax + offset[0]) * size, (ay + offset[1]) * size
    mask = _shape_mask(attributes.shape, coords[None, :], coords[:, None], cx, cy, RADIUS * scale * size)
    coverage = mask.reshape(size, _SUPERSAMPLE, size, _SUPERSAMPLE).mean(axis=(1, 3))[..., None]
    fg = np.asarray(COLOURS[attributes.colour], np.float64)
    bg = np.asarray(COLOURS[attributes.background], np.float64)
    return np.rint(coverage * fg + (1 - coverage) * bg).astype(np.uint8)


def make_dataset(n: int, seed: int = 0, size: int = 32, split: str = "train") -> tuple[np.ndarray, list[str]]:
    """``n`` images ``(n, size, size, 3)`` uint8 and their captions, the same for the same seed.

    ``split="train"`` draws from the combinations outside :func:`heldout_combinations`,
    ``"heldout"`` from those inside it, ``"all"`` from all of them. Combinations are drawn in
    shuffled rounds (as :func:`prompts`); size and place jitter uniformly.
    """
    rng = np.random.default_rng(seed)
    combos = _draw(n, rng, split)
    scales = 1 + rng.uniform(-SIZE_JITTER, SIZE_JITTER, n)
    offsets = rng.uniform(-PLACE_JITTER, PLACE_JITTER, (n, 2))
    images = np.stack([render(a, size, s, tuple(o)) for a, s, o in zip(combos, scales, offsets, strict=True)])
    return images, [caption(*_values(a)) for a in combos]


# --------------------------------------------------------------------------------------------
# Reading an image back


def _nearest_colour(rgb: np.ndarray, names: Sequence[str]) -> str:
    palette = np.asarray([COLOURS[c] for c in names], np.float64)
    return names[int(np.argmin(((palette - rgb) ** 2).sum(-1)))]


def _min_palette_distance() -> float:
    palette = np.asarray(list(COLOURS.values()), np.float64)
    d = np.sqrt(((palette[:, None] - palette[None]) ** 2).sum(-1))
    return float(d[~np.eye(len(palette), dtype=bool)].min())


#: A pixel belongs to the shape when it is further than this from the background colour.
MASK_THRESHOLD = _min_palette_distance() / 2
#: Masks smaller than this fraction of the circle's area are "no shape".
MIN_AREA = 0.25


def _as_rgb(image) -> np.ndarray:
    """A PIL image, or an (H, W, 3) array in uint8 or float [0, 1] -> float64 array in [0, 255]."""
    array = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"Expected an (H, W, 3) RGB image, got shape {array.shape}")
    if array.dtype == np.uint8:
        return array.astype(np.float64)
    return np.clip(array.astype(np.float64), 0, 1) * 255


def _largest_component(mask: np.ndarray) -> np.ndarray:
    from scipy import ndimage

    labels, count = ndimage.label(mask)
    if count <= 1:
        return mask
    sizes = np.bincount(labels.ravel())[1:]
    return labels == 1 + int(np.argmax(sizes))


def classify(image) -> Attributes:
    """Read colour, shape, background and position from one image (any size, square).

    Fields the rules cannot read (no shape-sized region apart from the background) are ``None``.
    """
    from scipy import ndimage

    rgb = _as_rgb(image)
    size = rgb.shape[0]
    border = np.concatenate(
        [
            rgb[:2].reshape(-1, 3),
            rgb[-2:].reshape(-1, 3),
            rgb[:, :2].reshape(-1, 3),
            rgb[:, -2:].reshape(-1, 3),
        ]
    )
    bg_rgb = np.median(border, axis=0)
    background = _nearest_colour(bg_rgb, BACKGROUNDS)

    far = np.sqrt(((rgb - bg_rgb) ** 2).sum(-1)) > MASK_THRESHOLD
    mask = _largest_component(far)
    area = float(mask.sum())
    if area < MIN_AREA * np.pi * (RADIUS * size) ** 2:
        return Attributes(None, None, background, None)

    interior = ndimage.binary_erosion(mask)
    colour = _nearest_colour(np.median(rgb[interior if interior.any() else mask], axis=0), tuple(COLOURS))

    ys, xs = np.nonzero(mask)
    cx, cy = xs.mean() + 0.5, ys.mean() + 0.5
    anchors = {name: (ax * size, ay * size) for name, (ax, ay) in POSITIONS.items()}
    position = min(anchors, key=lambda p: (anchors[p][0] - cx) ** 2 + (anchors[p][1] - cy) ** 2)

    coords = np.arange(size) + 0.5
    radius = np.sqrt(area / np.pi)

    def iou(shape: str) -> float:
        template = _shape_mask(shape, coords[None, :], coords[:, None], cx, cy, radius)
        return (template & mask).sum() / (template | mask).sum()

    shape = max(SHAPES, key=iou)
    return Attributes(colour, shape, background, position)


def adherence(images: Sequence, prompts: Sequence[str]) -> dict[str, float]:
    """How well ``images`` (PIL images or (H, W, 3) arrays) show their ``prompts``.

    Returns ``score`` (fraction with colour and shape both right, the headline number), ``all``
    (all four attributes right), the accuracy of each attribute in :data:`ATTRIBUTES`, and ``n``.
    """
    if len(images) != len(prompts):
        raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
    if not prompts:
        raise ValueError("adherence needs at least one image")
    hits = {name: [] for name in ATTRIBUTES}
    for image, prompt in zip(images, prompts, strict=True):
        want, got = parse_prompt(prompt), classify(image)
        for name in ATTRIBUTES:
            hits[name].append(getattr(want, name) == getattr(got, name))
    table = {name: np.asarray(h) for name, h in hits.items()}
    result = {name: float(h.mean()) for name, h in table.items()}
    result["score"] = float((table["colour"] & table["shape"]).mean())
    result["all"] = float(np.logical_and.reduce(list(table.values())).mean())
    result["n"] = len(prompts)
    return result


def read_back(images: Sequence, prompts: Sequence[str]) -> str:
    """One line per image: the prompt it was asked for, and the caption :func:`classify` reads
    from its pixels (what a miss got wrong, at a glance)."""
    return "\n".join(
        f"  asked: {prompt:55s} read back: {classify(image)}"
        for image, prompt in zip(images, prompts, strict=True)
    )
