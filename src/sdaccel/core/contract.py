"""One contract for every text-to-image front-end: the JAX ``JaxPipeline``, the ``ShardedPipeline``,
the OpenVINO ``OVPipeline`` and the OpenVINO GenAI wrapper.

Every front-end is called the same way and returns the same thing::

    result = pipe.generate(prompts, negative_prompts=None, steps=None, guidance_scale=None,
                           height=None, width=None, seed=0)
    result.images    # one PIL image per prompt
    result.array     # the same images, (B, H, W, 3) float32 in [0, 1]
    result.timings   # seconds, with at least the keys of TIMING_KEYS

``pipe(...)`` is the same call. Front-ends may take extra keyword-only arguments (``latents``,
``first_index``, ``callback``...) after these, and may add keys to ``timings``; they never change
the meaning of the shared ones.

**Defaults come from the checkpoint** (:class:`Defaults`): the size the UNet was trained at, and
the guidance scale of the checkpoint's pipeline class (diffusers' own defaults: 5.0 for SDXL, 7.5
for SD 1.x / 2.x). A checkpoint may state its own in ``model_index.json`` under
``"sdaccel_defaults"`` (``{"steps": 4, "guidance_scale": 0.0}`` for a few-step model).

**Inputs are checked before anything is compiled, written or downloaded** (:func:`check_inputs`),
and every error names the argument and the fix:

- prompts: one string (one image) or a non-empty list of strings;
- negative prompts: ``None``, one string for all, or one per prompt;
- height and width: positive multiples of what the model can take (:func:`size_multiple`: the
  VAE's factor times the UNet's downsampling), with the nearest valid size suggested;
- steps: an integer from 1 to the scheduler's training timesteps;
- guidance_scale: a finite number >= 0 (<= 1 turns classifier-free guidance off);
- seed: an integer in ``[0, 2**32)``. The same seed means the same image in every front-end that
  shares a random number generator: OpenVINO, GenAI and diffusers all draw ``torch.randn`` from
  ``torch.Generator().manual_seed(seed)``; the JAX front-ends draw image ``k`` from
  ``fold_in(key(seed), k)``, the same on 1 or N devices, but not the same numbers as torch.

**Schedulers have the same names everywhere**: each front-end's loader takes ``scheduler=``, a
short name of :data:`SCHEDULER_NAMES` (``"euler"``, ``"ddim"``, ``"euler_a"``, ``"lcm"``...) or a
diffusers class name, to run in place of the checkpoint's own (:func:`scheduler_class_name`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

#: Seeds are 32-bit: torch's generator and JAX's default keys both take them without loss.
SEED_LIMIT = 2**32

#: Keys that every front-end's ``timings`` holds (seconds unless named otherwise).
#: ``compile_s``: compiling for this call's shapes (0 when already compiled; OpenVINO compiles at
#: load time, so 0 there). ``run_s``: the call's wall time without ``compile_s``. ``encode_s``:
#: prompts to embeddings. ``denoise_decode_s``: the sampling loop and the VAE decode.
#: ``per_image_s = run_s / images``, ``images_per_s = images / run_s``, where ``images`` counts
#: only the images returned (never padding).
TIMING_KEYS = (
    "compile_s",
    "run_s",
    "encode_s",
    "denoise_decode_s",
    "per_image_s",
    "images_per_s",
    "images",
    "steps",
    "height",
    "width",
)

#: diffusers' default guidance scale per pipeline class.
GUIDANCE_BY_PIPELINE = {"StableDiffusionXLPipeline": 5.0, "StableDiffusionPipeline": 7.5}
DEFAULT_STEPS = 20

#: The short scheduler names every front-end's ``scheduler=`` takes, and the diffusers class each
#: means (the JAX track implements these four; the OpenVINO track runs diffusers' or GenAI's own).
SCHEDULER_NAMES = {
    "euler": "EulerDiscreteScheduler",
    "ddim": "DDIMScheduler",
    "euler_a": "EulerAncestralDiscreteScheduler",
    "euler_ancestral": "EulerAncestralDiscreteScheduler",
    "lcm": "LCMScheduler",
}


@dataclass
class GenerationResult:
    """What every front-end returns. ``images``: PIL images; ``array``: (B, H, W, 3) float32 in
    [0, 1]; ``timings``: see :data:`TIMING_KEYS`; ``latents``: the final latents when the front-end
    keeps them (in its own layout), else ``None``."""

    images: list
    array: np.ndarray
    timings: dict = field(default_factory=dict)
    latents: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.images)


@dataclass(frozen=True)
class Defaults:
    """The values a call uses for what it leaves out, and the limits its inputs must respect."""

    steps: int
    guidance_scale: float
    height: int
    width: int
    size_multiple: int
    max_steps: int = 1000

    @classmethod
    def from_checkpoint(
        cls,
        model_index: dict,
        unet_sample_size: int | Sequence[int] | None,
        unet_levels: int,
        vae_scale_factor: int,
        num_train_timesteps: int = 1000,
    ) -> Defaults:
        """From ``model_index.json``, the UNet's ``sample_size`` and number of blocks, the VAE's
        factor and the scheduler's ``num_train_timesteps``."""
        own = model_index.get("sdaccel_defaults") or {}
        size = unet_sample_size or 128
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        cls_name = model_index.get("_class_name", "StableDiffusionPipeline")
        return cls(
            steps=int(own.get("steps", DEFAULT_STEPS)),
            guidance_scale=float(own.get("guidance_scale", GUIDANCE_BY_PIPELINE.get(cls_name, 7.5))),
            height=h * vae_scale_factor,
            width=w * vae_scale_factor,
            size_multiple=size_multiple(unet_levels, vae_scale_factor),
            max_steps=int(num_train_timesteps),
        )


@dataclass(frozen=True)
class Request:
    """A checked call: every field has its final value."""

    prompts: list[str]
    negative_prompts: list[str] | None
    steps: int
    guidance_scale: float
    height: int
    width: int
    seed: int

    @property
    def batch(self) -> int:
        return len(self.prompts)

    @property
    def guided(self) -> bool:
        """Classifier-free guidance runs the UNet on (negative, positive) when the scale is > 1."""
        return self.guidance_scale > 1.0


def size_multiple(unet_levels: int, vae_scale_factor: int) -> int:
    """Height and width must be multiples of this: the VAE divides by ``vae_scale_factor`` and the
    UNet halves the latents ``unet_levels - 1`` times (64 for SD 1.x / 2.x, 32 for SDXL)."""
    return vae_scale_factor * 2 ** max(unet_levels - 1, 0)


def vae_scale_factor(vae_block_out_channels: Sequence[int]) -> int:
    """2 ** (number of VAE levels - 1): 8 for every Stable Diffusion VAE."""
    return 2 ** (len(vae_block_out_channels) - 1)


def _nearest(value: int, multiple: int) -> int:
    return max(multiple, int(round(value / multiple)) * multiple)


def normalize_prompts(prompts) -> list[str]:
    """One string -> one prompt; a list or tuple of strings -> those prompts (never a string's
    characters)."""
    if isinstance(prompts, str):
        return [prompts]
    if not isinstance(prompts, Sequence) or isinstance(prompts, bytes):
        raise TypeError(f"prompts must be a string or a list of strings, not {type(prompts).__name__}.")
    items = list(prompts)
    if not items:
        raise ValueError("prompts is empty: pass one prompt (a string) or a list of at least one.")
    bad = [i for i, p in enumerate(items) if not isinstance(p, str)]
    if bad:
        raise TypeError(
            f"prompts[{bad[0]}] is a {type(items[bad[0]]).__name__}: every prompt must be a string."
        )
    return items


def normalize_negative_prompts(negative_prompts, batch: int) -> list[str] | None:
    """``None`` stays ``None`` (the model's own unconditional input); one string -> that string for
    every prompt; a list must have one entry per prompt."""
    if negative_prompts is None:
        return None
    if isinstance(negative_prompts, str):
        return [negative_prompts] * batch
    if not isinstance(negative_prompts, Sequence):
        raise TypeError(
            f"negative_prompts must be None, a string or a list of strings, "
            f"not {type(negative_prompts).__name__}."
        )
    items = list(negative_prompts)
    if len(items) != batch or not all(isinstance(n, str) for n in items):
        raise ValueError(
            f"Got {len(items)} negative prompts for {batch} prompts: pass one string per prompt, a "
            "single string for all of them, or None."
        )
    return items


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_seed(seed) -> int:
    if not _is_int(seed):
        raise TypeError(
            f"seed must be an integer in [0, 2**32), not {seed!r}; for a fresh random image pass "
            "random.randrange(2**32) and print it, so the image can be made again."
        )
    if not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}; use seed % 2**32.")
    return int(seed)


def scheduler_class_name(kind, known) -> str:
    """The diffusers class name that a ``scheduler=`` value means: a short name of
    :data:`SCHEDULER_NAMES` (any case) or a class name in ``known`` (what the front-end can run).
    Anything else raises ``ValueError`` naming the choices."""
    if not isinstance(kind, str):
        raise ValueError(f"scheduler must be a string (a short name or a class name), got {kind!r}.")
    name = SCHEDULER_NAMES.get(kind.lower(), kind)
    if name not in known:
        shorts = ", ".join(repr(k) for k, v in SCHEDULER_NAMES.items() if v in known)
        raise ValueError(f"Unknown scheduler kind {kind!r}; choose {shorts} or one of {sorted(known)}.")
    return name


def check_inputs(
    prompts,
    negative_prompts=None,
    steps=None,
    guidance_scale=None,
    height=None,
    width=None,
    seed=0,
    *,
    defaults: Defaults,
) -> Request:
    """Check a call against the contract and fill in the defaults; raise ``TypeError`` or
    ``ValueError`` naming the argument and the fix. Nothing else happens here."""
    prompts = normalize_prompts(prompts)
    negatives = normalize_negative_prompts(negative_prompts, len(prompts))

    steps = defaults.steps if steps is None else steps
    if not _is_int(steps) or not 1 <= int(steps) <= defaults.max_steps:
        raise ValueError(
            f"steps must be an integer from 1 to {defaults.max_steps} (the scheduler's training "
            f"timesteps), got {steps!r}."
        )

    guidance_scale = defaults.guidance_scale if guidance_scale is None else guidance_scale
    if (
        not isinstance(guidance_scale, numbers.Real)
        or isinstance(guidance_scale, bool)
        or not math.isfinite(float(guidance_scale))
        or guidance_scale < 0
    ):
        raise ValueError(
            f"guidance_scale must be a finite number >= 0 (<= 1 turns guidance off), got {guidance_scale!r}."
        )

    height = defaults.height if height is None else height
    width = defaults.width if width is None else width
    m = defaults.size_multiple
    for name, value in (("height", height), ("width", width)):
        if not _is_int(value):
            raise TypeError(f"{name} must be an integer number of pixels, got {value!r}.")
    if height <= 0 or width <= 0 or height % m or width % m:
        raise ValueError(
            f"height and width must be positive multiples of {m} for this model (its VAE and UNet "
            f"downsampling); got {height}x{width}. The nearest valid size is "
            f"{_nearest(height, m)}x{_nearest(width, m)}."
        )
    return Request(
        prompts, negatives, int(steps), float(guidance_scale), int(height), int(width), check_seed(seed)
    )


def make_timings(
    *,
    compile_s: float,
    run_s: float,
    encode_s: float,
    denoise_decode_s: float,
    images: int,
    steps: int,
    height: int,
    width: int,
    **extra,
) -> dict:
    """The timings dict of :data:`TIMING_KEYS` (plus a front-end's ``extra`` keys); throughput
    counts the ``images`` returned, never padding."""
    return {
        "compile_s": float(compile_s),
        "run_s": float(run_s),
        "encode_s": float(encode_s),
        "denoise_decode_s": float(denoise_decode_s),
        "per_image_s": run_s / images,
        "images_per_s": images / run_s if run_s > 0 else float("inf"),
        "images": int(images),
        "steps": int(steps),
        "height": int(height),
        "width": int(width),
        **extra,
    }


def unscale_latents(latents, scaling_factor: float, latents_mean=None, latents_std=None, channel_axis=-1):
    """Diffusion latents -> VAE latents: ``/ scaling_factor``, and the per-channel
    ``latents_mean`` / ``latents_std`` when the VAE config has them (as diffusers does). Works on
    numpy and JAX arrays; ``channel_axis`` is -1 for NHWC (JAX) and 1 for NCHW (OpenVINO)."""
    if latents_mean is None or latents_std is None:
        return latents / scaling_factor
    shape = [1] * latents.ndim
    shape[channel_axis] = -1
    mean = np.asarray(latents_mean, np.float32).reshape(shape)
    std = np.asarray(latents_std, np.float32).reshape(shape)
    return latents * std / scaling_factor + mean


def to_pil(images: np.ndarray) -> list:
    """(B, H, W, 3) floats in [0, 1] -> PIL images, rounded as diffusers' ``numpy_to_pil``."""

    return [Image.fromarray(img) for img in (np.asarray(images) * 255).round().astype(np.uint8)]


def image_grid(images: Sequence, cols: int | None = None):
    """Paste PIL images (all the same size) into one grid image, ``cols`` per row."""

    cols = cols or min(len(images), 4)
    rows = -(-len(images) // cols)
    w, h = images[0].size
    grid = Image.new("RGB", (cols * w, rows * h), "white")
    for i, img in enumerate(images):
        grid.paste(img, ((i % cols) * w, (i // cols) * h))
    return grid
