"""The same export folder through OpenVINO GenAI's C++ ``Text2ImagePipeline``.

GenAI is the production way to run these models: tokenizers (the ``openvino_tokenizer.xml``
files), text encoders, the scheduler, the denoising loop and the VAE all run in C++, with no
Python or PyTorch at generation time. It reads the folder that
:func:`sdaccel.cpu.export.export_pipeline` writes, the same layout optimum-intel writes.

Its ``TorchGenerator`` reproduces ``torch.randn`` on a seeded CPU generator, so with the same seed
GenAI starts from the same noise as diffusers and :class:`sdaccel.cpu.pipeline.OVPipeline`, and
the three can be compared image against image.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sdaccel.checkpoint import CheckpointError
from sdaccel.cpu.export import StaticShape


@dataclass
class GenAIOutput:
    """PIL ``images`` and ``timings`` in seconds: ``unet_steps`` (each UNet inference, from
    GenAI's own performance metrics), ``text_encoder``, ``vae_decoder`` and ``total`` (wall)."""

    images: list
    timings: dict = field(default_factory=dict)

    @property
    def unet_step_median(self) -> float:
        return float(np.median(self.timings["unet_steps"]))


class GenAIPipeline:
    """A thin wrapper: ``openvino_genai.Text2ImagePipeline(folder, device)`` that returns PIL images.

    Args:
      folder: an export folder (SD 1.x/2.x or SDXL).
      precision: ``"f32"``, ``"bf16"`` or ``None`` (OpenVINO's default), passed to every model as
        ``INFERENCE_PRECISION_HINT``.
      static: ``None`` or a ``StaticShape`` / ``(batch, height, width)``: GenAI's own
        ``reshape(num_images_per_prompt, height, width, guidance_scale)`` before compiling.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        device: str = "CPU",
        precision: str | None = None,
        static=None,
        ov_config: dict | None = None,
    ):
        import openvino_genai

        self.folder = Path(folder)
        if not (self.folder / "model_index.json").is_file():
            raise CheckpointError(f"No OpenVINO export at {self.folder} (missing model_index.json).")
        properties = dict(ov_config or {})
        if precision is not None:
            properties["INFERENCE_PRECISION_HINT"] = precision
        self.static = StaticShape.coerce(static)
        if self.static is None:
            self.pipe = openvino_genai.Text2ImagePipeline(self.folder, device, **properties)
        else:
            self.pipe = openvino_genai.Text2ImagePipeline(self.folder)
            guidance = 7.5 if self.static.guidance else 1.0  # GenAI only asks whether it is > 1
            self.pipe.reshape(self.static.batch, self.static.height, self.static.width, guidance)
            self.pipe.compile(device, **properties)

    def __call__(
        self,
        prompt: str,
        negative_prompt: str | None = None,
        steps: int = 25,
        guidance_scale: float = 7.5,
        height: int | None = None,
        width: int | None = None,
        seed: int = 0,
        num_images: int = 1,
        torch_generator: bool = True,
    ) -> GenAIOutput:
        """Generate ``num_images`` images for one prompt.

        ``torch_generator=True`` draws the noise with GenAI's ``TorchGenerator(seed)``, which
        matches ``torch.randn`` (and so diffusers and ``OVPipeline``); ``False`` uses GenAI's
        default C++ generator (``rng_seed``).
        """
        import openvino_genai
        from PIL import Image

        kwargs = {
            "num_inference_steps": steps,
            "guidance_scale": guidance_scale,
            "num_images_per_prompt": num_images,
        }
        kwargs.update({k: v for k, v in (("height", height), ("width", width)) if v is not None})
        if negative_prompt is not None:
            kwargs["negative_prompt"] = negative_prompt
        if torch_generator:
            kwargs["generator"] = openvino_genai.TorchGenerator(seed)
        else:
            kwargs["rng_seed"] = seed
        start = time.perf_counter()
        tensor = self.pipe.generate(prompt, **kwargs)
        total = time.perf_counter() - start
        metrics = self.pipe.get_performance_metrics()
        timings = {
            "unet_steps": [us / 1e6 for us in metrics.raw_metrics.unet_inference_durations],
            "text_encoder": sum(metrics.get_text_encoder_infer_duration().values()) / 1e3,
            "vae_decoder": metrics.get_vae_decoder_infer_duration() / 1e3,
            "total": total,
        }
        return GenAIOutput([Image.fromarray(a) for a in np.asarray(tensor.data)], timings)

    generate = __call__
