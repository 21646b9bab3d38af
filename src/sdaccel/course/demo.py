"""The interactive demo of notebook 07: type a prompt, choose the steps and the levers (INT8,
LCM-LoRA, TAESD), and see the picture, the seconds it took and the precision that ran, on the
OpenVINO (CPU) pipeline. It is a gradio app (``gr.Blocks``), as openvino_notebooks end with.

Standalone, it is a web page served from your computer::

    python -m sdaccel.course.demo --profile smoke   # the repository's toy checkpoints
    python -m sdaccel.course.demo --profile full    # SD 1.5, lcm-lora-sdv1-5 and TAESD from the hub

and prints its address (``http://127.0.0.1:7860/`` unless ``--port`` says otherwise). In a notebook,
``launch(app(demo))`` shows the same page inline: in Jupyter from the kernel's port, in Colab through
Colab's own proxy of the kernel's port (never a public ``share`` link). gradio's frontend is in its
wheel (fonts included): the page fetches nothing from elsewhere, so it works on a workshop's offline
laptop. gradio 6.x requires ``pillow<13``: requirements-cpu.txt pins pillow 12.3.0 for it.

**What is prepared, and when.** Each lever is prepared once, on the first click that needs it,
with the package's own functions: the exports (:func:`sdaccel.cpu.export.export_pipeline`, the
LCM-LoRA fused at export, both folders shared with notebooks 04-07), TAESD
(:func:`sdaccel.core.checkpoint.resolve_tiny_vae`, or :func:`sdaccel.course.few_steps.random_tiny_vae`
for ``"random"``) and the INT8 UNet (:func:`sdaccel.cpu.quantize_parts.quantize_ir`, weights-only INT8:
no calibration run; notebook 05 measures the other recipes). The compiled pipelines stay loaded
between clicks (the last :attr:`Demo.keep` of them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import os
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from sdaccel.core.checkpoint import resolve_checkpoint, resolve_lora, resolve_tiny_vae
from sdaccel.course.few_steps import random_tiny_vae
from sdaccel.course.run_profiles import PROFILES, active_profile, overrides
from sdaccel.cpu import quantize_parts
from sdaccel.cpu.export import MODEL_XML, default_export_dir, export_pipeline, text_to_image_components
from sdaccel.cpu.pipeline import OVPipeline

NOTEBOOK = "07_fewer_steps"
DEFAULT_PORT = 7860
#: The INT8 recipe of the demo: weights-only INT8 needs no calibration run, so it is ready in seconds.
INT8_VARIANT = "int8_weights"
MAX_PROMPT_CHARS = 500
TITLE = "Stable Diffusion on the CPU: fewer steps, TAESD and INT8"
#: the picture fills its frame (a toy's 32 pixels too), scaled up as squares, not blurred
CSS = "#picture img { width: 100%; height: 100%; object-fit: contain; image-rendering: pixelated; }"


@dataclass(frozen=True)
class Settings:
    """What the demo runs: the checkpoint, its LCM-LoRA and TAESD, and the defaults of the controls.
    The defaults are notebook 07's (the real models); :func:`settings_for` gives the smoke profile's."""

    model: str = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    lora: str = "latent-consistency/lcm-lora-sdv1-5"
    #: TAESD: a hub id, a folder, or ``"random"`` (random weights of TAESD's shape: only its time is real)
    tiny_vae: str = "madebyollin/taesd"
    height: int | None = None  # None: the model's native size
    width: int | None = None
    precision: str = "auto"
    base_steps: int = 20
    lcm_steps: int = 4
    guidance_scale: float = 7.5  # without the LCM-LoRA (classifier-free guidance)
    lcm_guidance_scale: float = 1.0  # with it (no guidance batch)
    seed: int = 42
    #: where the exports and the INT8 UNets go (notebooks 04-07 share ``outputs/openvino``)
    work_dir: str = "outputs/openvino"
    #: a toy checkpoint: the page says so
    toy: bool = False
    prompt: str = "a photo of an astronaut riding a horse on mars"


#: The parameters of notebook 07 that the demo takes over from a profile's overrides, by setting.
PARAMETERS = {
    "CPU_MODEL_ID": "model",
    "CPU_LORA": "lora",
    "FAST_VAE": "tiny_vae",
    "PRECISION": "precision",
    "BASE_STEPS": "base_steps",
    "LCM_STEPS": "lcm_steps",
    "SEED": "seed",
}


def settings_for(profile: str, work_dir: str | os.PathLike | None = None) -> Settings:
    """The demo's settings under ``profile``: notebook 07's defaults (the real models), with the
    profile's overrides of its OpenVINO parameters (:func:`sdaccel.course.run_profiles.overrides`;
    ``"smoke"``: the trained toy, and the LCM-LoRA and the TAESD distilled from it)."""
    values = overrides(NOTEBOOK, profile)
    changes = {field: values[name] for name, field in PARAMETERS.items() if name in values}
    if values.get("PROMPTS"):
        changes["prompt"] = values["PROMPTS"][0]
    if work_dir is not None:
        changes["work_dir"] = str(work_dir)
    return dataclasses.replace(Settings(), toy=profile == "smoke", **changes)


@dataclass(frozen=True)
class Choice:
    """The levers of one click: each a different compiled pipeline."""

    lora: bool
    taesd: bool
    int8: bool

    def describe(self) -> str:
        levers = [name for name, on in (("LCM-LoRA", self.lora), ("TAESD", self.taesd)) if on]
        levers += ["INT8 UNet"] if self.int8 else []
        return " + ".join(levers) if levers else "the base model"


@dataclass
class Picture:
    """One click's result: the image, the seconds of the generation alone, and what ran."""

    image: object  # PIL.Image.Image
    seconds: float
    steps: int
    precision: str
    choice: Choice
    prepare_s: float  # seconds spent preparing this combination of levers (0 once it is loaded)

    def summary(self) -> str:
        text = (
            f"{self.seconds:.2f} s for {self.steps} step{'s' if self.steps != 1 else ''} at "
            f"{self.image.width}x{self.image.height} pixels; UNet in {self.precision}; {self.choice.describe()}"
        )
        if self.prepare_s > 0.05:
            text += f" (first use: {self.prepare_s:.1f} s to prepare it, not counted)"
        return text


class Demo:
    """The levers, prepared lazily and kept: :meth:`generate` is what the button calls."""

    def __init__(self, settings: Settings, keep: int = 2):
        self.settings = settings
        self.keep = keep
        self.work_dir = Path(settings.work_dir)
        self._pipelines: OrderedDict[Choice, object] = OrderedDict()
        self._prepared: dict[tuple, Path] = {}
        self._lock = threading.Lock()

    # -- preparing the levers (each once) ---------------------------------------------------

    def _once(self, key: tuple, make) -> Path:
        if key not in self._prepared:
            self._prepared[key] = make()
        return self._prepared[key]

    def source(self) -> Path:
        return self._once(("source",), lambda: resolve_checkpoint(self.settings.model))

    def export(self, lora: bool) -> Path:
        """The OpenVINO export of the checkpoint, with the LCM-LoRA fused or not (reused when complete)."""
        return self._once(("export", lora), lambda: self._export(lora))

    def _export(self, lora: bool) -> Path:
        source = self.source()
        folder = default_export_dir(self.settings.model, "fp32", self.work_dir)
        adapters = [(resolve_lora(self.settings.lora), 1.0)] if lora else []
        if lora:
            folder = folder.with_name(folder.name + "-lcm-lora")  # notebook 07's name for it
        components = text_to_image_components(source)
        with contextlib.redirect_stdout(io.StringIO()):  # quiet: "already holds a complete export" is no news
            return export_pipeline(source, folder, components=components, progress=False, lora=adapters)

    def tiny_vae(self) -> Path:
        """TAESD's folder: downloaded or found, or written with random weights for ``"random"``."""
        return self._once(("taesd",), self._tiny_vae)

    def _tiny_vae(self) -> Path:
        if self.settings.tiny_vae == "random":
            return random_tiny_vae(self.source(), self.work_dir / f"random-taesd-{self.source().name}")
        return resolve_tiny_vae(self.source(), self.settings.tiny_vae)

    def int8_unet(self, lora: bool) -> Path:
        """The export's UNet with INT8 weights, quantized once (kept beside the export)."""
        return self._once(("int8", lora), lambda: self._int8_unet(lora))

    def _int8_unet(self, lora: bool) -> Path:
        export = self.export(lora)
        unet = export / "unet" / MODEL_XML
        target = export.with_name(f"{export.name}-unet-{INT8_VARIANT}") / MODEL_XML
        if not target.is_file() or target.stat().st_mtime < unet.stat().st_mtime:
            target.parent.mkdir(parents=True, exist_ok=True)
            quantize_parts.quantize_ir(
                unet, target, INT8_VARIANT, max_memory_gb=quantize_parts.default_budget_gb()
            )
        return target

    # -- the pipelines (compiled once per combination, the last `keep` kept) ----------------

    def pipeline(self, choice: Choice):
        if choice in self._pipelines:
            self._pipelines.move_to_end(choice)
            return self._pipelines[choice]
        while len(self._pipelines) >= max(self.keep, 1):
            self._pipelines.popitem(last=False)  # free the oldest one's memory first
        pipe = self._load(choice)
        self._pipelines[choice] = pipe
        return pipe

    def _load(self, choice: Choice):
        pipe = OVPipeline.from_pretrained(
            self.export(choice.lora),
            precision=self.settings.precision,
            scheduler="lcm" if choice.lora else None,
            vae=self.tiny_vae() if choice.taesd else None,
        )
        if choice.int8:
            pipe.replace_unet(self.int8_unet(choice.lora))
        # one step of warm-up (OpenVINO's first inference sets up its buffers): the clicks time the steady state
        pipe.generate(["warm-up"], **self._call(1, choice.lora))
        return pipe

    def _call(self, steps: int, lora: bool) -> dict:
        s = self.settings
        guidance = s.lcm_guidance_scale if lora else s.guidance_scale
        return dict(steps=steps, guidance_scale=guidance, height=s.height, width=s.width, seed=s.seed)

    # -- one click ---------------------------------------------------------------------------

    def generate(self, prompt: str, steps: int, int8: bool, lora: bool, taesd: bool) -> Picture:
        """Generate one picture of ``prompt`` with these levers: what the button calls."""
        prompt, steps = check_request(prompt, steps)
        choice = Choice(lora=bool(lora), taesd=bool(taesd), int8=bool(int8))
        with self._lock:  # one generation at a time: the compiled models are shared
            tick = time.perf_counter()
            pipe = self.pipeline(choice)
            prepare_s = time.perf_counter() - tick
            tick = time.perf_counter()
            result = pipe.generate([prompt], **self._call(steps, choice.lora))
            seconds = time.perf_counter() - tick
            precision = pipe.precisions["unet"]
        if int8:
            precision = f"INT8 weights, {precision} activations"
        return Picture(result.images[0], seconds, steps, precision, choice, prepare_s)

    def steps_for(self, lora: bool) -> int:
        """The steps the controls suggest: few with the LCM-LoRA, the base's usual number without."""
        return self.settings.lcm_steps if lora else self.settings.base_steps

    def notice(self) -> str:
        """What the page says about the model under it (plainly, for a toy)."""
        s = self.settings
        if not s.toy:
            return f"{Path(str(s.model)).name} with {Path(str(s.lora)).name}, on the CPU with OpenVINO."
        text = (
            f"This is the tiny trained model ({Path(str(s.model)).name}): a small UNet trained on coloured shapes, "
            "which draws small pictures of a shape on a background, not photographs. Try prompts such as "
            "“a red circle on a blue background, top left”. Its timings show the method, not what "
            "Stable Diffusion gains."
        )
        if s.tiny_vae == "random":
            text += (
                " Its TAESD has random weights: with TAESD on, the picture is noise; only its time is real."
            )
        return text


def check_request(prompt, steps) -> tuple[str, int]:
    """A prompt and a number of steps the pipeline accepts, or a ValueError that says what is wrong."""
    prompt = str(prompt or "").strip()
    if not prompt:
        raise ValueError("Type a prompt first.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(prompt)} characters long; keep it under {MAX_PROMPT_CHARS}.")
    try:
        steps = int(steps)
    except (TypeError, ValueError):
        raise ValueError(f"Steps must be a whole number, got {steps!r}.") from None
    if not 1 <= steps <= 100:
        raise ValueError(f"Steps must be between 1 and 100, got {steps}.")
    return prompt, steps


def enlarged(image, size: int = 256):
    """``image`` scaled up by whole pixels to at least ``size`` wide (a toy's 32 pixels are hard to see)."""
    factor = -(-size // image.width)
    if factor <= 1:
        return image
    return image.resize((image.width * factor, image.height * factor), resample=0)  # nearest


# ----------------------------------------------------------------------------------------------
# The gradio app (standalone, and inline in Jupyter and Colab)
# ----------------------------------------------------------------------------------------------


def respond(demo: Demo, prompt, steps, int8: bool, lora: bool, taesd: bool) -> tuple[object, str]:
    """What the Generate button shows: ``(picture, its seconds and precision)``, or no picture and
    what went wrong (a bad request, or an error of the pipeline: the app keeps running)."""
    try:
        picture = demo.generate(prompt, steps, int8=int8, lora=lora, taesd=taesd)
    except ValueError as error:
        return None, f"**Could not generate:** {error}"
    except Exception as error:  # shown under the picture; the controls stay usable
        return None, f"**Could not generate:** {type(error).__name__}: {error}"
    return picture.image, picture.summary()


def app(demo: Demo):
    """The demo's page as a ``gr.Blocks`` app (not started: :func:`launch` starts it)."""
    import gradio as gr

    s = demo.settings
    with gr.Blocks(title=TITLE, analytics_enabled=False) as blocks:
        gr.Markdown(f"# {TITLE}")
        gr.Markdown(demo.notice(), elem_id="notice")
        with gr.Row():
            with gr.Column():
                prompt = gr.Textbox(s.prompt, label="Prompt", lines=3, elem_id="prompt")
                steps = gr.Number(
                    demo.steps_for(True), label="Steps", minimum=1, maximum=100, precision=0, elem_id="steps"
                )
                lora = gr.Checkbox(True, label="LCM-LoRA (few steps, no guidance)", elem_id="lora")
                taesd = gr.Checkbox(False, label="TAESD (tiny autoencoder for the decode)", elem_id="taesd")
                int8 = gr.Checkbox(False, label="INT8 UNet (weights in INT8)", elem_id="int8")
                button = gr.Button("Generate", variant="primary", elem_id="generate")
                gr.Markdown(
                    "The first click with a new combination of levers prepares it (export, quantization, "
                    "compilation); later clicks reuse it. The seconds shown are the generation's alone."
                )
            with gr.Column():
                picture = gr.Image(
                    label="Picture",
                    type="pil",
                    format="png",
                    interactive=False,
                    height=384,
                    buttons=["download", "fullscreen"],  # no "share" (to Hugging Face Spaces)
                    elem_id="picture",
                )
                timing = gr.Markdown("No picture yet.", elem_id="timing")
        lora.change(demo.steps_for, inputs=lora, outputs=steps, api_name="steps")
        button.click(
            functools.partial(respond, demo),
            inputs=[prompt, steps, int8, lora, taesd],
            outputs=[picture, timing],
            api_name="generate",
        )
    return blocks


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def launch(blocks, host: str = "127.0.0.1", port: int = DEFAULT_PORT, inline: bool | None = None) -> str:
    """Start ``blocks`` (:func:`app`) on ``host:port`` (``port=0``: a free one) in the background and
    return its address; ``blocks.close()`` stops it. In a notebook (``inline`` None: gradio tells)
    it shows the page in the cell; in Colab through Colab's proxy of the port: no public link."""
    port = port or free_port(host)
    try:
        blocks.launch(
            server_name=host,
            server_port=port,
            inline=inline,
            share=False,  # gradio's default in Colab is a public tunnel: the proxy is enough
            prevent_thread_lock=True,
            quiet=True,  # the caller says where it runs
            css=CSS,
        )
    except OSError as error:
        raise OSError(
            f"Cannot serve the demo on {host}:{port} ({error}): choose another port (--port)."
        ) from error
    return blocks.local_url


# ----------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sdaccel.course.demo",
        description="Serve the interactive demo of notebook 07 (OpenVINO on the CPU) as a local web page.",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        help="smoke: the repository's toy checkpoints; full: the real models (default: $SDACCEL_PROFILE, else full)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to let other machines connect")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
    parser.add_argument("--work-dir", default="outputs/openvino", help="where the exports and INT8 UNets go")
    args = parser.parse_args(argv)
    args.profile = args.profile or active_profile()
    if args.profile == "smoke":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the random TAESD is written with JAX
    demo = Demo(settings_for(args.profile, args.work_dir))
    blocks = app(demo)
    url = launch(blocks, args.host, args.port, inline=False)
    print(f"The demo runs at {url} (Ctrl-C stops it).\n{demo.notice()}", flush=True)
    blocks.block_thread()  # until Ctrl-C; gradio closes the server then
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
