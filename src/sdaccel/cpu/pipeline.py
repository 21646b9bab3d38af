"""Text-to-image with the exported OpenVINO models, as a readable Python loop.

This is the diffusers ``StableDiffusionPipeline`` / ``StableDiffusionXLPipeline`` loop written out
over OpenVINO compiled models, so every step is visible and can be timed, hooked or swapped:

1. **Prompts -> embeddings.** The HF ``CLIPTokenizer`` pads every prompt to 77 tokens; the text
   encoder(s) turn them into ``encoder_hidden_states``. SD uses the last hidden state; SDXL
   concatenates the second-to-last hidden states of both encoders and also feeds the UNet the
   second encoder's pooled ``text_embeds`` and six ``time_ids`` (original size, crop, target size).
2. **Noise.** ``torch.randn`` with a seeded generator, exactly as diffusers draws it, so the same
   seed gives the same starting latents here, in diffusers and in GenAI's ``TorchGenerator``.
3. **Denoising loop.** With classifier-free guidance the UNet sees the batch twice (negative,
   positive) and the two predictions are mixed ``uncond + scale * (text - uncond)``; the
   scheduler takes a step: diffusers' own class, named by ``_class_name`` in the folder's
   ``scheduler/scheduler_config.json`` as GenAI reads it (diffusers itself reads the name from
   ``model_index.json``; published checkpoints name the same class in both).
4. **Decode.** Latents / ``scaling_factor`` through the VAE decoder, then [-1, 1] -> 8-bit RGB.

Precision: OpenVINO's CPU plugin runs a model in the precision of its
``INFERENCE_PRECISION_HINT``. Its default is **bf16 on CPUs with bf16 instructions**
(AVX512_BF16 or AMX) and f32 elsewhere, whatever the precision of the stored weights.
``precision="f32"`` forces full precision (for parity checks), ``"bf16"`` asks for bf16, and
``None`` keeps the plugin's choice; ``pipe.precision`` reports what the compiled UNet really uses.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sdaccel.checkpoint import CheckpointError, read_config, read_json
from sdaccel.cpu.export import (
    MODEL_XML,
    PIPELINE_COMPONENTS,
    StaticShape,
    reshape_static,
    vae_scale_factor_of,
)

PRECISIONS = ("f32", "bf16", "f16")


@dataclass
class PipelineOutput:
    """What one call returns.

    ``images`` are PIL images; ``arrays`` the same images as float32 NHWC in [0, 1] (before the
    8-bit rounding, handy for parity checks); ``latents`` the final latents (NCHW); ``timings``
    seconds for ``text_encoder``, ``unet_steps`` (one UNet inference per denoising step, the
    scheduler arithmetic not included), ``vae_decoder`` and ``total``.
    """

    images: list
    arrays: np.ndarray
    latents: np.ndarray
    timings: dict = field(default_factory=dict)

    @property
    def unet_step_median(self) -> float:
        return float(np.median(self.timings["unet_steps"]))


def _precision_name(value) -> str:
    """``ov.Type`` (or its string) -> ``"f32"`` / ``"bf16"`` / ``"f16"``."""
    name = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(name, name)


def _as_list(value, n: int | None = None) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    if n is not None and len(items) == 1 and n > 1:
        items = items * n
    if n is not None and len(items) != n:
        raise ValueError(f"Got {len(items)} negative prompts for {n} prompts.")
    return items


class OVPipeline:
    """Stable Diffusion 1.x/2.x or SDXL over an export folder from :func:`export_pipeline`."""

    def __init__(self, folder: Path, core, device: str, precision: str | None, static, ov_config: dict):
        from diffusers import schedulers
        from transformers import CLIPTokenizer

        self.folder = folder
        self.core = core
        self.device = device
        self.static = StaticShape.coerce(static)
        self.compile_config = dict(ov_config)
        if precision is not None:
            self.compile_config["INFERENCE_PRECISION_HINT"] = precision
        index = read_json(folder / "model_index.json")
        self.pipeline_class = index["_class_name"]
        self.is_sdxl = self.pipeline_class == "StableDiffusionXLPipeline"
        self.force_zeros_for_empty_prompt = index.get("force_zeros_for_empty_prompt", True)
        self.scheduler_config = read_config(folder, "scheduler")
        self.scheduler_class = getattr(schedulers, self.scheduler_config["_class_name"])
        self.vae_config = read_config(folder, "vae_decoder")
        self.vae_scale_factor = vae_scale_factor_of(folder)
        self.unet_config = read_config(folder, "unet")

        encoders = ("text_encoder", "text_encoder_2") if self.is_sdxl else ("text_encoder",)
        self.tokenizers = [
            CLIPTokenizer.from_pretrained(folder / e.replace("text_encoder", "tokenizer")) for e in encoders
        ]
        encoder_configs = [read_config(folder, e) for e in encoders]
        self.text_encoder_layers = [c["num_hidden_layers"] for c in encoder_configs]
        self.max_length = encoder_configs[0].get("max_position_embeddings", 77)  # 77 tokens in SD
        self.text_encoders = [self._compile(e) for e in encoders]
        self.unet = self._compile("unet")
        self.vae_decoder = self._compile("vae_decoder")
        self._requests = {}

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike,
        device: str = "CPU",
        precision: str | None = None,
        static=None,
        ov_config: dict | None = None,
        core=None,
    ) -> OVPipeline:
        """Load and compile an export folder.

        Args:
          folder: written by :func:`sdaccel.cpu.export.export_pipeline`.
          device: an OpenVINO device name (``"CPU"``; ``"GPU"`` where an Intel GPU is present).
          precision: ``"f32"``, ``"bf16"`` or ``None`` (the plugin's default; see the module doc).
          static: ``None`` (dynamic shapes) or a ``StaticShape`` / ``(batch, height, width)``: the
            models are reshaped before compiling and then only accept that shape.
          ov_config: extra compile properties (``{"NUM_STREAMS": "1"}``, ``{"CACHE_DIR": ...}``).
        """
        import openvino as ov

        folder = Path(folder)
        if not (folder / "model_index.json").is_file():
            raise CheckpointError(
                f"No OpenVINO export at {folder} (missing model_index.json). Export a diffusers "
                "checkpoint first with sdaccel.cpu.export.export_pipeline(src, folder)."
            )
        kind = read_json(folder / "model_index.json").get("_class_name")
        if kind not in PIPELINE_COMPONENTS:
            raise CheckpointError(
                f"{folder} holds a {kind!r} export; OVPipeline runs {sorted(PIPELINE_COMPONENTS)}."
            )
        needed = [
            c for c in PIPELINE_COMPONENTS[kind] if c.startswith(("text_encoder", "unet", "vae_decoder"))
        ]
        missing = [f"{c}/{MODEL_XML}" for c in needed if not (folder / c / MODEL_XML).is_file()]
        if missing:
            raise CheckpointError(
                f"{folder} is not a complete OpenVINO export (missing {missing}); is it a diffusers "
                "checkpoint? Export it first with sdaccel.cpu.export.export_pipeline(src, folder)."
            )
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS} or None, got {precision!r}.")
        return cls(folder, core or ov.Core(), device, precision, static, ov_config or {})

    # -- models ------------------------------------------------------------------------------

    def _compile(self, component_or_model):
        """Read (if a component name or a path), reshape when static, compile."""
        import openvino as ov

        model = component_or_model
        if isinstance(model, str) and not model.endswith(".xml"):
            model = self.folder / model / MODEL_XML
        if isinstance(model, str | os.PathLike):
            model = self.core.read_model(model)
        if isinstance(model, ov.CompiledModel):
            return model
        if self.static is not None:
            reshape_static(
                model,
                **asdict(self.static),
                vae_scale_factor=self.vae_scale_factor,
                max_length=self.max_length,
            )
        return self.core.compile_model(model, self.device, self.compile_config)

    def replace_unet(self, model) -> None:
        """Swap in another UNet: an ``ov.Model`` (e.g. NNCF-quantized; reshaped in place when the
        pipeline is static), a path to its ``.xml``, or an already compiled model. It must have the
        same inputs and outputs; it is compiled with this pipeline's device and precision."""
        self.unet = self._compile(str(model) if isinstance(model, Path) else model)
        self._requests.pop("unet", None)

    def _request(self, name: str, compiled):
        if name not in self._requests:
            self._requests[name] = compiled.create_infer_request()
        return self._requests[name]

    @property
    def precisions(self) -> dict[str, str]:
        """The inference precision each compiled model actually runs in."""
        models = {"unet": self.unet, "vae_decoder": self.vae_decoder}
        models.update({f"text_encoder{'_2' if i else ''}": m for i, m in enumerate(self.text_encoders)})
        return {k: _precision_name(m.get_property("INFERENCE_PRECISION_HINT")) for k, m in models.items()}

    @property
    def precision(self) -> str:
        """The inference precision of the compiled UNet (where nearly all the time goes)."""
        return self.precisions["unet"]

    # -- the steps ---------------------------------------------------------------------------

    def _tokenize(self, tokenizer, prompts: list[str]) -> np.ndarray:
        ids = tokenizer(prompts, padding="max_length", max_length=self.max_length, truncation=True).input_ids
        return np.asarray(ids, dtype=np.int64)

    def encode_prompts(self, prompts: list[str], negatives: list[str] | None, guidance: bool) -> dict:
        """The UNet's conditioning inputs: ``encoder_hidden_states`` (and SDXL's ``text_embeds``),
        negative half first when ``guidance``."""
        texts = list(prompts)
        if guidance:
            texts = [*(negatives or [""] * len(prompts)), *prompts]
        hidden, pooled = [], None
        for i, (tokenizer, encoder) in enumerate(zip(self.tokenizers, self.text_encoders, strict=True)):
            request = self._request(f"text_encoder_{i}", encoder)
            request.infer({"input_ids": self._tokenize(tokenizer, texts)})
            if not self.is_sdxl:
                hidden.append(request.get_tensor("last_hidden_state").data.copy())
                continue
            # SDXL: the second-to-last hidden state of each encoder, and the pooled projection
            hidden.append(request.get_tensor(f"hidden_states.{self.text_encoder_layers[i] - 1}").data.copy())
            if i == len(self.text_encoders) - 1:
                pooled = request.get_tensor("text_embeds").data.copy()
        states = np.concatenate(hidden, axis=-1)
        if guidance and negatives is None and self.is_sdxl and self.force_zeros_for_empty_prompt:
            # diffusers' SDXL uses zeros, not the embedding of "", when no negative prompt is given
            n = len(prompts)
            states[:n] = 0
            pooled[:n] = 0
        return {"encoder_hidden_states": states} | ({"text_embeds": pooled} if self.is_sdxl else {})

    def prepare_latents(self, batch: int, height: int, width: int, seed: int | None):
        """Gaussian noise as diffusers draws it: ``torch.randn`` on a CPU generator seeded with ``seed``."""
        import torch

        shape = (
            batch,
            self.unet_config["in_channels"],
            height // self.vae_scale_factor,
            width // self.vae_scale_factor,
        )
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        return torch.randn(shape, generator=generator, dtype=torch.float32)

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """Latents -> float32 NHWC images in [0, 1] (diffusers' ``VaeImageProcessor`` post-processing)."""
        cfg = self.vae_config
        if cfg.get("latents_mean") is not None and cfg.get("latents_std") is not None:
            mean = np.asarray(cfg["latents_mean"], np.float32).reshape(1, -1, 1, 1)
            std = np.asarray(cfg["latents_std"], np.float32).reshape(1, -1, 1, 1)
            latents = latents * std / cfg["scaling_factor"] + mean
        else:
            latents = latents / cfg["scaling_factor"]
        request = self._request("vae_decoder", self.vae_decoder)
        request.infer({"latent_sample": np.ascontiguousarray(latents, dtype=np.float32)})
        image = request.get_tensor("sample").data
        return np.clip(image / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1).astype(np.float32)

    @staticmethod
    def to_pil(arrays: np.ndarray) -> list:
        from PIL import Image

        return [Image.fromarray(a) for a in (arrays * 255).round().astype(np.uint8)]

    # -- the whole call ----------------------------------------------------------------------

    def __call__(
        self,
        prompts: str | list[str],
        negative_prompts: str | list[str] | None = None,
        steps: int = 25,
        guidance_scale: float = 7.5,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = 0,
        latents=None,
        callback: Callable[[int, int, np.ndarray], None] | None = None,
        unet_input_callback: Callable[[dict], None] | None = None,
        deepcache: Callable[[int, dict], np.ndarray] | None = None,
    ) -> PipelineOutput:
        """Generate one image per prompt.

        Args:
          height, width: default the UNet's ``sample_size * 8`` (512 for SD 1.5, 1024 for SDXL).
          seed: seeds ``torch.randn`` for the initial noise (ignored when ``latents`` is given).
          latents: start from these (``[batch, 4, h/8, w/8]``, *before* ``init_noise_sigma``).
          callback: ``callback(step, timestep, latents)`` after every scheduler step.
          unet_input_callback: called with the dict of UNet inputs before every UNet call (to
            collect calibration data for quantization, say).
          deepcache: a :class:`sdaccel.cpu.deepcache.DeepCache` (any ``deepcache(step, inputs)``
            returning ``out_sample``) that runs the UNet in place of this pipeline's own: the full
            UNet every N-th step, its shallow part with a cached deep feature in between.
        """
        import torch

        start = time.perf_counter()
        prompts = _as_list(prompts)
        negatives = None if negative_prompts is None else _as_list(negative_prompts, len(prompts))
        default = self.unet_config["sample_size"] * self.vae_scale_factor
        height, width = height or default, width or default
        if height % self.vae_scale_factor or width % self.vae_scale_factor:
            raise ValueError(
                f"height and width must be multiples of {self.vae_scale_factor}, got {height}x{width}."
            )
        guidance = guidance_scale > 1.0
        if self.static is not None:
            wanted = (len(prompts), height, width, guidance)
            have = (self.static.batch, self.static.height, self.static.width, self.static.guidance)
            if wanted != have:
                raise ValueError(
                    f"This pipeline was compiled static for (batch, height, width, guidance)={have}; "
                    f"got {wanted}. Load it again with static=None or the new shape."
                )
        timings = {}

        tick = time.perf_counter()
        conditioning = self.encode_prompts(prompts, negatives, guidance)
        batch = len(prompts) * (2 if guidance else 1)
        if self.is_sdxl:
            time_ids = np.array([height, width, 0, 0, height, width], np.float32)
            conditioning["time_ids"] = np.tile(time_ids, (batch, 1))
        timings["text_encoder"] = time.perf_counter() - tick

        scheduler = self.scheduler_class.from_config(self.scheduler_config)  # fresh state per call
        scheduler.set_timesteps(steps)
        if latents is None:
            latents = self.prepare_latents(len(prompts), height, width, seed)
        latents = torch.as_tensor(np.asarray(latents, np.float32)) * scheduler.init_noise_sigma

        unet = self._request("unet", self.unet)
        timings["unet_steps"] = []
        for step, t in enumerate(scheduler.timesteps):
            model_input = torch.cat([latents] * 2) if guidance else latents
            model_input = scheduler.scale_model_input(model_input, t)
            inputs = {
                "sample": model_input.numpy(),
                "timestep": np.array([int(t)], dtype=np.int64),
                **conditioning,
            }
            if unet_input_callback is not None:
                unet_input_callback(inputs)
            tick = time.perf_counter()
            if deepcache is None:
                unet.infer(inputs)
                noise = unet.get_tensor("out_sample").data.copy()
            else:
                noise = deepcache(step, inputs)
            timings["unet_steps"].append(time.perf_counter() - tick)
            noise = torch.from_numpy(noise)
            if guidance:
                uncond, text = noise.chunk(2)
                noise = uncond + guidance_scale * (text - uncond)
            latents = scheduler.step(noise, t, latents, return_dict=False)[0]
            if callback is not None:
                callback(step, int(t), latents.numpy())

        tick = time.perf_counter()
        arrays = self.decode(latents.numpy())
        timings["vae_decoder"] = time.perf_counter() - tick
        timings["total"] = time.perf_counter() - start
        return PipelineOutput(self.to_pil(arrays), arrays, latents.numpy(), timings)

    generate = __call__


def run_diffusers(
    src: str | os.PathLike,
    prompts: list[str],
    negative_prompts: list[str] | None = None,
    *,
    latents,
    steps: int,
    guidance_scale: float,
    height: int,
    width: int,
) -> np.ndarray:
    """The same call through diffusers' own PyTorch pipeline (f32, CPU), as the reference for
    parity: float32 NHWC images in [0, 1] from the given initial ``latents`` (before
    ``init_noise_sigma``, as :meth:`OVPipeline.prepare_latents` returns them)."""
    import torch
    from diffusers import DiffusionPipeline

    from sdaccel.checkpoint import resolve_checkpoint

    folder = resolve_checkpoint(src)
    # components that resolve_checkpoint does not download (SD 1.5's safety checker) are left out
    index = read_json(folder / "model_index.json")
    skipped = {
        name: None for name in ("safety_checker", "feature_extractor", "image_encoder") if name in index
    }
    reference = DiffusionPipeline.from_pretrained(folder, dtype=torch.float32, **skipped)
    reference.set_progress_bar_config(disable=True)
    with torch.no_grad():
        images = reference(
            prompts,
            negative_prompt=negative_prompts,
            num_inference_steps=steps,
            guidance_scale=guidance_scale,
            height=height,
            width=width,
            latents=torch.as_tensor(np.asarray(latents, np.float32)),
            output_type="np",
        ).images
    return np.asarray(images, np.float32)
