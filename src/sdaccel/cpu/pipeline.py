"""Text-to-image with the exported OpenVINO models, as a readable Python loop.

This is the diffusers ``StableDiffusionPipeline`` / ``StableDiffusionXLPipeline`` loop written out
over OpenVINO compiled models, so every step is visible and can be timed, hooked or swapped:

1. **Prompts -> embeddings.** The HF ``CLIPTokenizer`` pads every prompt to 77 tokens; the text
   encoder(s) turn them into ``encoder_hidden_states``. SD uses the last hidden state; SDXL
   concatenates the second-to-last hidden states of both encoders and also feeds the UNet the
   second encoder's pooled ``text_embeds`` and six ``time_ids`` (original size, crop, target size).
2. **Noise.** ``torch.randn`` with a seeded generator, exactly as diffusers draws it, so the same
   seed gives the same starting latents here, in diffusers and in GenAI's ``TorchGenerator``
   (seeds are integers in ``[0, 2**32)``, as everywhere in :mod:`sdaccel.core.contract`).
3. **Denoising loop.** With classifier-free guidance the UNet sees the batch twice (negative,
   positive) and the two predictions are mixed ``uncond + scale * (text - uncond)``; the
   scheduler takes a step: diffusers' own class, named by ``_class_name`` in the folder's
   ``scheduler/scheduler_config.json`` as GenAI reads it (diffusers itself reads the name from
   ``model_index.json``; published checkpoints name the same class in both), or the one
   ``scheduler=`` names (the names of :data:`sdaccel.core.contract.SCHEDULER_NAMES`, as the JAX
   pipeline takes them, or any diffusers scheduler class). An LCM-distilled UNet
   (``time_cond_proj_dim``) gets the guidance scale as an embedding, ``timestep_cond``, instead
   of the doubled batch, as diffusers does.
4. **Decode.** Latents / ``scaling_factor`` through the VAE decoder, then [-1, 1] -> 8-bit RGB.

Precision: OpenVINO's CPU plugin runs a model in the precision of its
``INFERENCE_PRECISION_HINT``. Its default is **bf16 on CPUs with bf16 instructions**
(AVX512_BF16 or AMX) and f32 elsewhere, whatever the precision of the stored weights, and bf16 is
not always the faster: with AMX it wins, with AVX-512 BF16 alone it can lose to f32. So the default
here, ``precision="auto"``, *measures*: :func:`sdaccel.cpu.precision.choose_precision` times each
component in every precision the plugin offers on this CPU and compiles each in the fastest
(``pipe.precision_choice`` holds the measurement; it is cached in the export folder, so only the
first load on a CPU pays for it). ``"f32"`` forces full precision (for parity checks), ``"bf16"``
asks for bf16, ``None`` keeps the plugin's choice, and a dict sets each component's own
(``{"unet": "f32", "vae_decoder": "bf16"}``; the ones left out keep the plugin's choice), e.g. to
reproduce an ``"auto"`` choice without measuring. ``pipe.precisions`` reports what each compiled
model really runs in. On an x86 CPU with AVX512-FP16 the plugin offers f16 too, and "auto" can
choose it; a full-INT8 or hybrid UNet swapped in then runs its float layers in bf16, because
OpenVINO cannot run a quantized model under the f16 hint there
(:func:`sdaccel.cpu.precision.quantized_hint`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from inspect import signature
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import (
    CheckpointError,
    read_config,
    read_defaults,
    read_json,
    resolve_checkpoint,
    resolve_tiny_vae,
)
from sdaccel.core.contract import (
    GenerationResult,
    check_inputs,
    check_seed,
    make_timings,
    scheduler_class_name,
    to_pil,
    unscale_latents,
)
from sdaccel.cpu.convert import no_loading_bars
from sdaccel.cpu.export import (
    MODEL_XML,
    PIPELINE_COMPONENTS,
    StaticShape,
    reshape_static,
    vae_scale_factor_of,
)
from sdaccel.cpu.ir_files import read_ir
from sdaccel.cpu.precision import (
    CANDIDATES,
    choose_precision,
    device_capabilities,
    pipeline_components,
    quantized_hint,
)
from sdaccel.cpu.precision_timing import precision_name
from sdaccel.cpu.tiny_vae import with_tiny_decoder

#: What ``precision`` accepts besides ``None`` (the plugin's default).
PRECISIONS = ("auto", *CANDIDATES)


def _check_precision(precision) -> None:
    """Refuse, before anything is read or compiled, a precision ``from_pretrained`` cannot take."""
    values = precision.values() if isinstance(precision, dict) else [precision]
    bad = [
        v
        for v in values
        if v is not None and (v not in PRECISIONS or (isinstance(precision, dict) and v == "auto"))
    ]
    if bad or (isinstance(precision, dict) and not precision):
        raise ValueError(
            f"precision must be one of {PRECISIONS}, None (the plugin's default) or a non-empty dict "
            f"of component -> one of {CANDIDATES} or None; got {precision!r}."
        )


def _component(name: str) -> str:
    """The export component behind a loaded model's name: ``text_encoder_1`` -> ``text_encoder_2``."""
    if name.startswith("text_encoder_"):
        index = int(name.rsplit("_", 1)[1])
        return f"text_encoder_{index + 1}" if index else "text_encoder"
    return name


class OVPipeline:
    """Stable Diffusion 1.x/2.x or SDXL over an export folder from :func:`export_pipeline`.

    Called as every front-end of :mod:`sdaccel.core.contract` is: ``pipe.generate(prompts, ...)`` (or
    ``pipe(...)``) returns a :class:`~sdaccel.core.contract.GenerationResult`; ``pipe.defaults`` holds
    what a call leaves out (20 steps, the guidance of the checkpoint's pipeline class, the UNet's
    native size) and the sizes it accepts. A failed call, wherever it fails (even inside
    OpenVINO), leaves the pipeline as it was: the next valid call works.
    """

    def __init__(
        self,
        folder: Path,
        core,
        device: str,
        precision,
        static,
        ov_config: dict,
        scheduler: str | None = None,
    ):
        from diffusers import schedulers
        from transformers import CLIPTokenizer

        self.folder = folder
        self.core = core
        self.device = device
        self.static = StaticShape.coerce(static)
        self.ov_config = dict(ov_config)
        index = read_json(folder / "model_index.json")
        self.pipeline_class = index["_class_name"]
        self.is_sdxl = self.pipeline_class == "StableDiffusionXLPipeline"
        self.force_zeros_for_empty_prompt = index.get("force_zeros_for_empty_prompt", True)
        self.scheduler_config = read_config(folder, "scheduler")
        if scheduler is None:
            self.scheduler_class = getattr(schedulers, self.scheduler_config["_class_name"])
        else:
            self.scheduler_class = getattr(
                schedulers, scheduler_class_name(scheduler, diffusers_schedulers())
            )
        self.vae_config = read_config(folder, "vae_decoder")
        self.vae_scale_factor = vae_scale_factor_of(folder)
        self.unet_config = read_config(folder, "unet")
        #: an LCM UNet: the guidance scale goes in as ``timestep_cond``, with no negative batch
        self.guidance_embedded = self.unet_config.get("time_cond_proj_dim") is not None
        if self.guidance_embedded and self.static is not None and self.static.guidance:
            # such a UNet never sees a negative batch: its one static shape is the unguided one
            self.static = dataclasses.replace(self.static, guidance=False)
        self.defaults = read_defaults(folder, "vae_decoder")
        if self.static is not None:  # a static pipeline takes one size: make it the default
            self.defaults = dataclasses.replace(
                self.defaults, height=self.static.height, width=self.static.width
            )

        # the INFERENCE_PRECISION_HINT each component is compiled with (None: the plugin's default),
        # and, with "auto", the measurement that chose them
        self.precision_choice = None
        if precision == "auto":
            shape = self.static or StaticShape(1, self.defaults.height, self.defaults.width, True)
            self.precision_choice = choose_precision(
                folder,
                **asdict(shape),
                static=self.static is not None,
                device=device,
                ov_config=ov_config,
                core=core,
            )
            self.hints = dict(self.precision_choice.chosen)
        elif isinstance(precision, dict):
            self.hints = dict.fromkeys(pipeline_components(folder)) | precision
        else:
            self.hints = dict.fromkeys(pipeline_components(folder), precision)

        encoders = ("text_encoder", "text_encoder_2") if self.is_sdxl else ("text_encoder",)
        self.tokenizers = [
            CLIPTokenizer.from_pretrained(folder / e.replace("text_encoder", "tokenizer")) for e in encoders
        ]
        encoder_configs = [read_config(folder, e) for e in encoders]
        self.text_encoder_layers = [c["num_hidden_layers"] for c in encoder_configs]
        self.max_length = encoder_configs[0].get("max_position_embeddings", 77)  # 77 tokens in SD
        self._sources, self._requests, self._running = {}, {}, None
        self.text_encoders = [self._load(f"text_encoder_{i}", e) for i, e in enumerate(encoders)]
        self.unet = self._load("unet", "unet")
        self.vae_decoder = self._load("vae_decoder", "vae_decoder")

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike,
        device: str = "CPU",
        precision: str | dict[str, str | None] | None = "auto",
        static=None,
        ov_config: dict | None = None,
        core=None,
        scheduler: str | None = None,
        vae: str | os.PathLike | None = None,
    ) -> OVPipeline:
        """Load and compile an export folder.

        Args:
          folder: written by :func:`sdaccel.cpu.export.export_pipeline`.
          device: an OpenVINO device name (``"CPU"``; ``"GPU"`` where an Intel GPU is present).
          precision: ``"auto"`` (each component in the precision measured fastest on this CPU,
            :func:`sdaccel.cpu.precision.choose_precision`), ``"f32"``, ``"bf16"``, ``"f16"``,
            ``None`` (the plugin's default), or a dict of these per component
            (``pipe.precision_choice.chosen``, say); see the module doc.
          static: ``None`` (dynamic shapes) or a ``StaticShape`` / ``(batch, height, width)``: the
            models are reshaped before compiling and then only accept that shape.
          ov_config: extra compile properties (``{"NUM_STREAMS": "1"}``, ``{"CACHE_DIR": ...}``).
          scheduler: ``None`` (the folder's own), a short name of
            :data:`sdaccel.core.contract.SCHEDULER_NAMES` (``"euler"``, ``"ddim"``, ``"euler_a"``,
            ``"lcm"``: the names ``Pipeline.from_pretrained`` takes) or a diffusers scheduler class
            name; it is built from the folder's scheduler config, as
            ``NewScheduler.from_config(old.config)`` in diffusers.
          vae: ``None`` (the export's own VAE decoder), ``"tiny"`` (TAESD for SD 1.x/2.x, TAESDXL
            for SDXL, from the hub) or the folder of an ``AutoencoderTiny``: decode with that tiny
            autoencoder, converted once into the export and run from the folder
            :func:`sdaccel.cpu.tiny_vae.with_tiny_decoder` makes beside it.
        """
        import openvino as ov

        _check_precision(precision)
        if scheduler is not None:
            scheduler_class_name(scheduler, diffusers_schedulers())  # a clear error before any loading
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
        if isinstance(precision, dict):
            unknown = sorted(set(precision) - set(pipeline_components(folder)))
            if unknown:
                raise ValueError(
                    f"precision names {unknown}, which this {kind} export does not run; name any of "
                    f"{list(pipeline_components(folder))}."
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
        if vae is not None:
            folder = with_tiny_decoder(folder, resolve_tiny_vae(folder, vae))
        return cls(folder, core or ov.Core(), device, precision, static, ov_config or {}, scheduler)

    # -- models ------------------------------------------------------------------------------

    def compile_config_for(self, component: str) -> dict:
        """The compile properties of ``component`` (``"unet"``, ``"text_encoder"``, ...): the
        pipeline's ``ov_config`` plus the component's ``INFERENCE_PRECISION_HINT``, if any."""
        hint = self.hints.get(component)
        return self.ov_config | ({"INFERENCE_PRECISION_HINT": hint} if hint is not None else {})

    @property
    def compile_config(self) -> dict:
        """The UNet's compile properties (what a swapped-in or DeepCache UNet is compiled with)."""
        return self.compile_config_for("unet")

    def _compile(self, component_or_model, name: str):
        """Read (if a component name or a path; :func:`sdaccel.cpu.ir_files.read_ir` refuses an IR
        that an interrupted save left), reshape when static, compile with the compile properties
        of the component loaded as ``name`` (see :meth:`_load`)."""
        import openvino as ov

        model = component_or_model
        if isinstance(model, str) and not model.endswith(".xml"):
            model = self.folder / model / MODEL_XML
        if isinstance(model, str | os.PathLike):
            model = read_ir(model, self.core)
        if isinstance(model, ov.CompiledModel):
            return model
        if self.static is not None:
            reshape_static(
                model,
                **asdict(self.static),
                vae_scale_factor=self.vae_scale_factor,
                max_length=self.max_length,
            )
        config = self.compile_config_for(_component(name))
        hint = config.get("INFERENCE_PRECISION_HINT")
        if hint == "f16":  # an INT8 model with f16 fails on an x86 CPU: its float layers in bf16 there
            capabilities = device_capabilities(self.core, self.device)
            config = config | {"INFERENCE_PRECISION_HINT": quantized_hint(hint, model, capabilities)}
        return self.core.compile_model(model, self.device, config)

    def compile_as_unet(self, model):
        """Compile ``model`` (an IR's path or an ``ov.Model``) as this pipeline compiles its UNet:
        reshaped to its static shape when it has one, with the UNet's compile properties (device,
        precision). DeepCache's two IRs are compiled this way (:func:`sdaccel.cpu.deepcache.compile_parts`)."""
        return self._compile(Path(model) if isinstance(model, str) else model, "unet")

    def _load(self, name: str, source):
        """Compile ``source`` (see :meth:`_compile`) and remember it, to compile again after a
        failure (:meth:`_recover`). ``name``: ``text_encoder_<i>``, ``unet`` or ``vae_decoder``."""
        compiled = self._compile(source, name)
        self._sources[name] = source
        return compiled

    def replace_unet(self, model) -> None:
        """Swap in another UNet: an ``ov.Model`` (e.g. NNCF-quantized; reshaped in place when the
        pipeline is static), a path to its ``.xml``, or an already compiled model. It must have the
        same inputs and outputs; it is compiled with this pipeline's device and the UNet's precision,
        but in bf16 where that is f16 for an activation-quantized UNet on an x86 CPU, which OpenVINO
        cannot run (:func:`sdaccel.cpu.precision.quantized_hint`; ``precisions`` says what ran)."""
        self.unet = self._load("unet", str(model) if isinstance(model, Path) else model)
        self._requests.pop("unet", None)

    def _request(self, name: str, compiled):
        """One infer request per model, made on first use and reused (its buffers stay allocated)."""
        if name not in self._requests:
            self._requests[name] = compiled.create_infer_request()
        return self._requests[name]

    def _infer(self, name: str, compiled, inputs: dict):
        """Run one model on ``inputs``; returns its infer request (to read the outputs)."""
        request = self._request(name, compiled)
        self._running = name
        request.infer(inputs)
        self._running = None
        return request

    def _recover(self, error: BaseException) -> None:
        """After a failed call: drop every infer request, and compile again the model whose
        inference failed. The CPU plugin keeps state from a failed inference in the compiled
        model (a Concat that failed shape inference fails again at the next, valid, shape), so a
        new infer request alone would not do; compiling again from the same source does."""
        failed, self._running = self._running, None
        self._requests.clear()
        source = self._sources.get(failed)
        if failed is None or source is None or hasattr(source, "create_infer_request"):
            return  # nothing ran in OpenVINO, or only a compiled model was given (nothing to redo)
        try:
            compiled = self._compile(source, failed)
        except Exception as again:  # keep the original error; say the pipeline needs reloading
            error.add_note(f"Compiling {failed} again failed too ({again}): load the pipeline again.")
            return
        if failed.startswith("text_encoder_"):
            self.text_encoders[int(failed.rsplit("_", 1)[1])] = compiled
        else:
            setattr(self, failed, compiled)

    @property
    def precisions(self) -> dict[str, str]:
        """The inference precision each compiled model actually runs in."""
        models = {"unet": self.unet, "vae_decoder": self.vae_decoder}
        models.update({f"text_encoder{'_2' if i else ''}": m for i, m in enumerate(self.text_encoders)})
        return {k: precision_name(m.get_property("INFERENCE_PRECISION_HINT")) for k, m in models.items()}

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
            request = self._infer(
                f"text_encoder_{i}", encoder, {"input_ids": self._tokenize(tokenizer, texts)}
            )
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

    def prepare_latents(self, batch: int, height: int, width: int, seed: int, generator=None):
        """Gaussian noise as diffusers draws it: ``torch.randn`` on a CPU generator seeded with
        ``seed`` (an integer in ``[0, 2**32)``, :func:`sdaccel.core.contract.check_seed`), or drawn
        from ``generator`` when given (which then goes on to the scheduler's steps)."""
        import torch

        if generator is None:
            generator = torch.Generator().manual_seed(check_seed(seed))
        return torch.randn(self.latent_shape(batch, height, width), generator=generator, dtype=torch.float32)

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """Latents -> float32 NHWC images in [0, 1] (diffusers' ``VaeImageProcessor`` post-processing)."""
        cfg = self.vae_config
        latents = unscale_latents(
            latents, cfg["scaling_factor"], cfg.get("latents_mean"), cfg.get("latents_std"), channel_axis=1
        )
        request = self._infer(
            "vae_decoder",
            self.vae_decoder,
            {"latent_sample": np.ascontiguousarray(latents, dtype=np.float32)},
        )
        image = request.get_tensor("sample").data
        return np.clip(image / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1).astype(np.float32)

    # -- the whole call ----------------------------------------------------------------------

    def generate(
        self,
        prompts: str | list[str],
        negative_prompts: str | list[str] | None = None,
        steps: int | None = None,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int = 0,
        *,
        latents=None,
        callback: Callable[[int, int, np.ndarray], None] | None = None,
        unet_input_callback: Callable[[dict], None] | None = None,
        deepcache: Callable[[int, dict], np.ndarray] | None = None,
    ) -> GenerationResult:
        """Generate one image per prompt (the contract of :mod:`sdaccel.core.contract`).

        Args:
          prompts, negative_prompts, steps, guidance_scale, height, width: as in
            :func:`sdaccel.core.contract.check_inputs`; left out, they come from ``self.defaults``.
          seed: an integer in ``[0, 2**32)``; seeds the ``torch.Generator`` that draws the initial
            noise of the whole batch (unless ``latents`` is given) and then the noise a stochastic
            scheduler (Euler ancestral, LCM) adds at each step, as diffusers draws them.
          latents: start from these (``[batch, 4, h/f, w/f]``, *before* ``init_noise_sigma``).
          callback: ``callback(step, timestep, latents)`` after every scheduler step.
          unet_input_callback: called with the dict of UNet inputs before every UNet call (to
            collect calibration data for quantization, say).
          deepcache: a :class:`sdaccel.cpu.deepcache.DeepCache` (any ``deepcache(step, inputs)``
            returning ``out_sample``) that runs the UNet in place of this pipeline's own: the full
            UNet every N-th step, its shallow part with a cached deep feature in between.

        Returns a :class:`~sdaccel.core.contract.GenerationResult` with ``latents`` (the final ones,
        NCHW) and ``timings``: the keys of :data:`sdaccel.core.contract.TIMING_KEYS` (``encode_s``: the
        text encoders; ``compile_s`` is 0: the models were compiled when the pipeline was loaded),
        ``unet_steps`` (seconds of each UNet inference, the scheduler arithmetic not included),
        ``unet_step_median_s`` and ``vae_decoder_s``.
        """
        request = check_inputs(
            prompts, negative_prompts, steps, guidance_scale, height, width, seed, defaults=self.defaults
        )
        if self.static is not None:
            wanted = (request.batch, request.height, request.width, self.guided(request))
            have = (self.static.batch, self.static.height, self.static.width, self.static.guidance)
            if wanted != have:
                raise ValueError(
                    f"This pipeline was compiled static for (batch, height, width, guidance)={have}; "
                    f"got {wanted}. Load it again with static=None or the new shape."
                )
        if latents is not None:
            expected = self.latent_shape(request.batch, request.height, request.width)
            if tuple(np.shape(latents)) != expected:
                raise ValueError(
                    f"latents must have the shape {expected} (batch, channels, height / "
                    f"{self.vae_scale_factor}, width / {self.vae_scale_factor}), got {tuple(np.shape(latents))}."
                )
        try:
            return self._generate(request, latents, callback, unet_input_callback, deepcache)
        except BaseException as error:
            self._recover(error)  # so that the next valid call works
            raise

    __call__ = generate

    def guided(self, request) -> bool:
        """Whether a checked request runs classifier-free guidance (the doubled batch): a scale > 1,
        and a UNet that does not take the scale as an embedding."""
        return request.guided and not self.guidance_embedded

    def latent_shape(self, batch: int, height: int, width: int) -> tuple[int, int, int, int]:
        f = self.vae_scale_factor
        return (batch, self.unet_config["in_channels"], height // f, width // f)

    def _generate(self, request, latents, callback, unet_input_callback, deepcache) -> GenerationResult:
        import torch

        start = time.perf_counter()
        guidance, height, width = self.guided(request), request.height, request.width
        conditioning = self.encode_prompts(request.prompts, request.negative_prompts, guidance)
        batch = request.batch * (2 if guidance else 1)
        if self.is_sdxl:
            time_ids = np.array([height, width, 0, 0, height, width], np.float32)
            conditioning["time_ids"] = np.tile(time_ids, (batch, 1))
        if self.guidance_embedded:
            w = np.full((batch,), request.guidance_scale - 1, np.float32)
            conditioning["timestep_cond"] = guidance_scale_embedding(
                w, self.unet_config["time_cond_proj_dim"]
            )
        encode_s = time.perf_counter() - start

        scheduler = self.scheduler_class.from_config(self.scheduler_config)  # fresh state per call
        scheduler.set_timesteps(request.steps)
        # one generator for the initial latents and then the noise a stochastic scheduler (Euler
        # ancestral, LCM) adds at each step, as diffusers passes its generator to step()
        generator = torch.Generator().manual_seed(request.seed)
        step_kwargs = {"generator": generator} if "generator" in signature(scheduler.step).parameters else {}
        if latents is None:
            latents = self.prepare_latents(request.batch, height, width, request.seed, generator)
        latents = torch.as_tensor(np.asarray(latents, np.float32)) * scheduler.init_noise_sigma

        unet_steps = []
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
                noise = self._infer("unet", self.unet, inputs).get_tensor("out_sample").data.copy()
            else:
                noise = deepcache(step, inputs)
            unet_steps.append(time.perf_counter() - tick)
            noise = torch.from_numpy(noise)
            if guidance:
                uncond, text = noise.chunk(2)
                noise = uncond + request.guidance_scale * (text - uncond)
            latents = scheduler.step(noise, t, latents, return_dict=False, **step_kwargs)[0]
            if callback is not None:
                callback(step, int(t), latents.numpy())

        tick = time.perf_counter()
        array = self.decode(latents.numpy())
        vae_decoder_s = time.perf_counter() - tick
        run_s = time.perf_counter() - start
        timings = make_timings(
            compile_s=0.0,
            run_s=run_s,
            encode_s=encode_s,
            denoise_decode_s=run_s - encode_s,
            images=request.batch,
            steps=request.steps,
            height=height,
            width=width,
            unet_steps=unet_steps,
            unet_step_median_s=float(np.median(unet_steps)),
            vae_decoder_s=vae_decoder_s,
        )
        return GenerationResult(to_pil(array), array, timings, latents=latents.numpy())


def diffusers_schedulers() -> set[str]:
    """The names of diffusers' scheduler classes (what ``scheduler=`` may name beside the short names)."""
    from diffusers import schedulers

    return {name for name in dir(schedulers) if name.endswith("Scheduler") and name[0].isupper()}


def guidance_scale_embedding(w: np.ndarray, dim: int) -> np.ndarray:
    """(N,) guidance weights -> (N, dim) float32: the ``timestep_cond`` of an LCM UNet
    (``w = guidance_scale - 1``), computed by diffusers' own ``get_guidance_scale_embedding``
    (a method that uses nothing of its pipeline). The JAX track's is
    :func:`sdaccel.tpu.models.unet.guidance_scale_embedding`."""
    import torch
    from diffusers import LatentConsistencyModelPipeline

    w = torch.from_numpy(np.asarray(w, np.float32))
    return LatentConsistencyModelPipeline.get_guidance_scale_embedding(None, w, embedding_dim=dim).numpy()


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

    folder = resolve_checkpoint(src)
    # components that resolve_checkpoint does not download (SD 1.5's safety checker) are left out
    index = read_json(folder / "model_index.json")
    skipped = {
        name: None for name in ("safety_checker", "feature_extractor", "image_encoder") if name in index
    }
    if index.get("_class_name") == "StableDiffusionPipeline":  # its safety checker is never downloaded
        skipped["requires_safety_checker"] = False
    with no_loading_bars():
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
