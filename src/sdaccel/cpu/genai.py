"""The same export folder through OpenVINO GenAI's C++ ``Text2ImagePipeline``.

GenAI is the production way to run these models: tokenizers (the ``openvino_tokenizer.xml``
files), text encoders, the scheduler, the denoising loop and the VAE all run in C++, with no
Python or PyTorch at generation time. It reads the folder that
:func:`sdaccel.cpu.export.export_pipeline` writes, the same layout optimum-intel writes.

Its ``TorchGenerator`` reproduces ``torch.randn`` on a seeded CPU generator, so with the same seed
GenAI starts from the same noise as diffusers and :class:`sdaccel.cpu.pipeline.OVPipeline`, and
the three can be compared image against image.

:class:`GenAIPipeline` is called as every front-end of :mod:`sdaccel.core.contract` is. GenAI's own
``generate`` takes one prompt at a time, so a list of prompts is generated one prompt after the
other, all from **one** ``TorchGenerator(seed)``: prompt ``k`` takes the next latents from the
same stream. For noise tensors whose size is a multiple of 16 values (every latent of 4 channels
and an even side), ``torch.randn`` draws its values in blocks of 16 from one stream of uniforms,
so these consecutive draws are exactly the batch that ``OVPipeline`` draws for the same prompts
and seed: the same seed gives the same images in both (``tests/cpu/test_pipeline.py`` checks it).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np
from PIL import Image

from sdaccel.core.checkpoint import CheckpointError, read_config, read_defaults, resolve_tiny_vae
from sdaccel.core.contract import GenerationResult, check_inputs, make_timings, scheduler_class_name
from sdaccel.cpu.export import MODEL_XML, StaticShape
from sdaccel.cpu.ir_files import check_ir
from sdaccel.cpu.precision import CANDIDATES, choose_precision, device_capabilities, quantized_hint
from sdaccel.cpu.tiny_vae import with_tiny_decoder

#: The diffusers scheduler classes GenAI implements, by the name of their ``Scheduler.Type``.
GENAI_SCHEDULERS = {
    "EulerDiscreteScheduler": "EULER_DISCRETE",
    "EulerAncestralDiscreteScheduler": "EULER_ANCESTRAL_DISCRETE",
    "DDIMScheduler": "DDIM",
    "LCMScheduler": "LCM",
    "PNDMScheduler": "PNDM",
    "LMSDiscreteScheduler": "LMS_DISCRETE",
}


#: The prediction types that GenAI's scheduler of each class computes the denoised sample for,
#: where it does not take all three. GenAI's ``LCMScheduler::step`` fills its buffer of predicted
#: samples for ``"epsilon"`` only and then reads it whatever the type: on a ``"v_prediction"``
#: export (SD 2.x) it reads an empty buffer and the process dies of SIGSEGV, with no Python error.
GENAI_PREDICTION_TYPES = {"LCMScheduler": ("epsilon",)}


def check_genai_scheduler(folder: str | os.PathLike, scheduler: str | None) -> None:
    """Raise ``ValueError``, naming the reason and what runs instead, if GenAI's ``scheduler``
    (a class name; ``None``: the export's own) cannot run the prediction type of the export
    ``folder``'s scheduler config (:data:`GENAI_PREDICTION_TYPES`). Reads that config only."""
    config = read_config(folder, "scheduler")
    name = scheduler or config.get("_class_name")
    prediction = config.get("prediction_type", "epsilon")
    supported = GENAI_PREDICTION_TYPES.get(name)
    if supported is not None and prediction not in supported:
        raise ValueError(
            f"OpenVINO GenAI's {name} (LCM) handles prediction_type {' or '.join(map(repr, supported))} "
            f"only, and the scheduler config of {folder} has prediction_type {prediction!r} (an SD 2.x "
            "checkpoint): GenAI would crash the whole process (SIGSEGV) at its first step. Run LCM on "
            "this export with OVPipeline.from_pretrained(folder, scheduler='lcm'), whose sampler handles "
            "it, or give GenAIPipeline another scheduler (scheduler='ddim' or 'euler')."
        )


class GenAIPipeline:
    """A thin wrapper: ``openvino_genai.Text2ImagePipeline(folder, device)`` on the contract of
    :mod:`sdaccel.core.contract` (``generate(prompts, ...) -> GenerationResult``).

    Args:
      folder: an export folder (SD 1.x/2.x or SDXL).
      precision: ``"auto"`` (the default, as in ``OVPipeline``: the precision measured fastest
        for the UNet on this CPU, :func:`sdaccel.cpu.precision.choose_precision`, from the same
        cached measurement), ``"f32"``, ``"bf16"``, ``"f16"`` or ``None`` (OpenVINO's default).
        GenAI takes one set of properties for the whole pipeline, so one
        ``INFERENCE_PRECISION_HINT`` goes to every model: with ``"auto"``, the UNet's choice (nearly
        all the time is the UNet's). ``"f16"`` for a folder whose UNet is activation-quantized
        (full INT8 or hybrid) on an x86 CPU becomes bf16 for every model, as OpenVINO cannot run
        that UNet under f16 there (:func:`sdaccel.cpu.precision.quantized_hint`).
        ``self.precision`` says which hint was given.
      static: ``None`` or a ``StaticShape`` / ``(1, height, width)``: GenAI's own
        ``reshape(1, height, width, guidance_scale)`` before compiling (one image per call, as
        this wrapper generates them).
      scheduler: ``None`` (the folder's own) or the names the other front-ends take (a short name
        of :data:`sdaccel.core.contract.SCHEDULER_NAMES`, or a class name) for the schedulers GenAI
        implements (:data:`GENAI_SCHEDULERS`); GenAI builds it from the folder's scheduler config.
        LCM on a v-prediction (SD 2.x) export is refused before GenAI runs
        (:func:`check_genai_scheduler`): GenAI's LCM would crash the process.
      vae: ``None`` (the export's own VAE decoder), ``"tiny"`` or the folder of an
        ``AutoencoderTiny``: GenAI loads the folder :func:`sdaccel.cpu.tiny_vae.with_tiny_decoder`
        makes beside the export, whose ``vae_decoder`` is the tiny one (as ``OVPipeline`` does).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        device: str = "CPU",
        precision: str | None = "auto",
        static=None,
        ov_config: dict | None = None,
        scheduler: str | None = None,
        vae: str | os.PathLike | None = None,
    ):
        import openvino_genai

        self.folder = Path(folder)
        # checked before anything is loaded: a name GenAI does not implement is an error, not a fallback
        self.scheduler = None if scheduler is None else scheduler_class_name(scheduler, GENAI_SCHEDULERS)
        if precision is not None and precision != "auto" and precision not in CANDIDATES:
            raise ValueError(f"precision must be 'auto', one of {CANDIDATES} or None, got {precision!r}.")
        if not (self.folder / "model_index.json").is_file():
            raise CheckpointError(f"No OpenVINO export at {self.folder} (missing model_index.json).")
        check_genai_scheduler(self.folder, self.scheduler)
        self.defaults = read_defaults(self.folder, "vae_decoder")
        properties = dict(ov_config or {})
        self.static = StaticShape.coerce(static)
        if self.static is not None and self.static.batch != 1:
            raise ValueError(
                f"GenAIPipeline generates one image per GenAI call: static batch must be 1, got "
                f"{self.static.batch}. Use static=(1, height, width)."
            )
        if vae is not None:
            self.folder = with_tiny_decoder(self.folder, resolve_tiny_vae(self.folder, vae))
        for xml in sorted(self.folder.glob(f"*/{MODEL_XML}")):  # GenAI would read a broken IR as it is
            check_ir(xml)
        self.precision_choice = None
        if precision == "auto":
            shape = self.static or StaticShape(1, self.defaults.height, self.defaults.width, True)
            self.precision_choice = choose_precision(
                self.folder,
                **dataclasses.asdict(shape),
                static=self.static is not None,
                device=device,
                ov_config=ov_config,
            )  # all components, as OVPipeline measures them: one cached measurement serves both
            precision = self.precision_choice.chosen["unet"]
        if precision == "f16" and self.precision_choice is None:  # "auto" never picks f16 for an INT8 UNet
            import openvino as ov

            # one hint for every model, and an INT8 UNet fails f16 on an x86 CPU (its IR is read only there)
            capabilities = device_capabilities(ov.Core(), device)
            precision = quantized_hint(precision, self.folder / "unet" / MODEL_XML, capabilities)
        self.precision = precision
        if precision is not None:
            properties["INFERENCE_PRECISION_HINT"] = precision
        if self.static is None:
            self.pipe = openvino_genai.Text2ImagePipeline(self.folder, device, **properties)
            self._set_scheduler()
        else:
            self.defaults = dataclasses.replace(
                self.defaults, height=self.static.height, width=self.static.width
            )
            self.pipe = openvino_genai.Text2ImagePipeline(self.folder)
            self._set_scheduler()
            guidance = 7.5 if self.static.guidance else 1.0  # GenAI only asks whether it is > 1
            self.pipe.reshape(1, self.static.height, self.static.width, guidance)
            self.pipe.compile(device, **properties)

    def _set_scheduler(self) -> None:
        import openvino_genai

        if self.scheduler is not None:
            kind = getattr(openvino_genai.Scheduler.Type, GENAI_SCHEDULERS[self.scheduler])
            config = self.folder / "scheduler" / "scheduler_config.json"
            self.pipe.set_scheduler(openvino_genai.Scheduler.from_config(config, kind))

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
        torch_generator: bool = True,
    ) -> GenerationResult:
        """Generate one image per prompt (see the module doc for how ``seed`` maps to images).

        ``torch_generator=True`` draws the noise with GenAI's ``TorchGenerator(seed)``, which
        matches ``torch.randn`` (and so diffusers and ``OVPipeline``); ``False`` uses GenAI's
        default C++ generator (``rng_seed``, prompt ``k`` seeded with ``seed + k``).

        ``array`` holds GenAI's 8-bit images as floats (it truncates to 8 bits where
        ``OVPipeline`` rounds). ``timings``: the keys of :data:`sdaccel.core.contract.TIMING_KEYS`, from
        GenAI's own performance metrics summed over the prompts, plus ``unet_steps`` (each UNet
        inference), ``unet_step_median_s`` and ``vae_decoder_s``.
        """
        import openvino_genai

        request = check_inputs(
            prompts, negative_prompts, steps, guidance_scale, height, width, seed, defaults=self.defaults
        )
        if self.static is not None:
            wanted = (request.height, request.width, request.guided)
            have = (self.static.height, self.static.width, self.static.guidance)
            if wanted != have:
                raise ValueError(
                    f"This pipeline was compiled static for (height, width, guidance)={have}; got "
                    f"{wanted}. Load it again with static=None or the new shape."
                )
        generator = openvino_genai.TorchGenerator(request.seed) if torch_generator else None
        images, unet_steps = [], []
        encode_s = vae_decoder_s = 0.0
        start = time.perf_counter()
        for k, prompt in enumerate(request.prompts):
            kwargs = {
                "num_inference_steps": request.steps,
                "guidance_scale": request.guidance_scale,
                "num_images_per_prompt": 1,
                "height": request.height,
                "width": request.width,
            }
            if request.negative_prompts is not None:
                kwargs["negative_prompt"] = request.negative_prompts[k]
            if generator is not None:
                kwargs["generator"] = generator
            else:
                kwargs["rng_seed"] = request.seed + k
            tensor = self.pipe.generate(prompt, **kwargs)
            images.append(np.array(tensor.data[0], copy=True))  # GenAI reuses its output buffer
            metrics = self.pipe.get_performance_metrics()
            unet_steps += [us / 1e6 for us in metrics.raw_metrics.unet_inference_durations]
            encode_s += sum(metrics.get_text_encoder_infer_duration().values()) / 1e3
            vae_decoder_s += metrics.get_vae_decoder_infer_duration() / 1e3
        run_s = time.perf_counter() - start
        timings = make_timings(
            compile_s=0.0,
            run_s=run_s,
            encode_s=encode_s,
            denoise_decode_s=run_s - encode_s,
            images=request.batch,
            steps=request.steps,
            height=request.height,
            width=request.width,
            unet_steps=unet_steps,
            unet_step_median_s=float(np.median(unet_steps)) if unet_steps else 0.0,
            vae_decoder_s=vae_decoder_s,
        )
        array = np.stack(images).astype(np.float32) / 255.0
        return GenerationResult([Image.fromarray(image) for image in images], array, timings)

    __call__ = generate
