"""The interactive demo of notebook 07: type a prompt, choose the steps and the levers (INT8,
LCM-LoRA, TAESD), and see the picture, the seconds it took and the precision that ran, on the
OpenVINO (CPU) pipeline.

Standalone, it is a web page served from your computer::

    python -m sdaccel.course.demo --profile smoke   # the repository's toy checkpoints
    python -m sdaccel.course.demo --profile full    # SD 1.5, lcm-lora-sdv1-5 and TAESD from the hub

and prints its address (``http://127.0.0.1:7860/`` unless ``--port`` says otherwise). In a notebook,
:func:`widgets` shows the same controls inline (``ipywidgets``), and :func:`serve` starts the page
in the background.

**Why no gradio.** openvino_notebooks end with a gradio app, but every gradio release caps pillow
below the version this course pins (gradio 6.x requires ``pillow<13``, 5.x ``pillow<12``): adding
it would make the requirements unresolvable or move pillow back. The page here needs no package
at all (Python's ``http.server`` and one HTML page with its script inline): nothing to install, no
fonts or scripts from a CDN, nothing sent anywhere, so it works on a workshop's offline laptop. In
Jupyter the controls are ``ipywidgets`` (already pinned), which also work where the kernel's ports
cannot be reached from the browser (Colab, a TPU VM behind an SSH tunnel).

**What is prepared, and when.** Each lever is prepared once, on the first click that needs it,
with the package's own functions: the exports (:func:`sdaccel.cpu.export.export_pipeline`, the
LCM-LoRA fused at export, both folders shared with notebooks 04-07), TAESD
(:func:`sdaccel.core.checkpoint.resolve_tiny_vae`, or :func:`sdaccel.course.few_steps.random_tiny_vae`
for ``"random"``) and the INT8 UNet (:func:`sdaccel.cpu.quantize.quantize_ir`, weights-only INT8:
no calibration run; notebook 05 measures the other recipes). The compiled pipelines stay loaded
between clicks (the last :attr:`Demo.keep` of them).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import html
import io
import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NOTEBOOK = "07_fewer_steps"
DEFAULT_PORT = 7860
#: The INT8 recipe of the demo: weights-only INT8 needs no calibration run, so it is ready in seconds.
INT8_VARIANT = "int8_weights"
MAX_PROMPT_CHARS = 500


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
    "CPU_HEIGHT": "height",
    "CPU_WIDTH": "width",
    "PRECISION": "precision",
    "CPU_BASE_STEPS": "base_steps",
    "CPU_LCM_STEPS": "lcm_steps",
    "CPU_GUIDANCE_SCALE": "guidance_scale",
    "LCM_GUIDANCE_SCALE": "lcm_guidance_scale",
    "SEED": "seed",
}


def settings_for(profile: str, work_dir: str | os.PathLike | None = None) -> Settings:
    """The demo's settings under ``profile``: notebook 07's defaults (the real models), with the
    profile's overrides of its OpenVINO parameters (:func:`sdaccel.course.run_profiles.overrides`;
    ``"smoke"``: the trained toy, and the LCM-LoRA and the TAESD distilled from it)."""
    from sdaccel.course.run_profiles import overrides

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
        from sdaccel.core.checkpoint import resolve_checkpoint

        return self._once(("source",), lambda: resolve_checkpoint(self.settings.model))

    def export(self, lora: bool) -> Path:
        """The OpenVINO export of the checkpoint, with the LCM-LoRA fused or not (reused when complete)."""
        return self._once(("export", lora), lambda: self._export(lora))

    def _export(self, lora: bool) -> Path:
        from sdaccel.core.checkpoint import resolve_lora
        from sdaccel.cpu.export import default_export_dir, export_pipeline, text_to_image_components

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
        from sdaccel.core.checkpoint import resolve_tiny_vae

        if self.settings.tiny_vae == "random":
            from sdaccel.course.few_steps import random_tiny_vae

            return random_tiny_vae(self.source(), self.work_dir / f"random-taesd-{self.source().name}")
        return resolve_tiny_vae(self.source(), self.settings.tiny_vae)

    def int8_unet(self, lora: bool) -> Path:
        """The export's UNet with INT8 weights, quantized once (kept beside the export)."""
        return self._once(("int8", lora), lambda: self._int8_unet(lora))

    def _int8_unet(self, lora: bool) -> Path:
        from sdaccel.cpu import quantize
        from sdaccel.cpu.export import MODEL_XML

        export = self.export(lora)
        unet = export / "unet" / MODEL_XML
        target = export.with_name(f"{export.name}-unet-{INT8_VARIANT}") / MODEL_XML
        if not target.is_file() or target.stat().st_mtime < unet.stat().st_mtime:
            target.parent.mkdir(parents=True, exist_ok=True)
            quantize.quantize_ir(unet, target, INT8_VARIANT, max_memory_gb=quantize.default_budget_gb())
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
        from sdaccel.cpu.pipeline import OVPipeline

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
            f"This is a toy model ({Path(str(s.model)).name}): a tiny UNet trained on coloured shapes, "
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


def png_data_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


# ----------------------------------------------------------------------------------------------
# The web page (standalone, and in a browser tab from a notebook)
# ----------------------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Stable Diffusion on the CPU: fewer steps</title>
<style>
 body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
        margin: 2rem auto; max-width: 980px; padding: 0 1rem; color: #1f2328; background: #fff; }
 h1 { font-size: 1.5rem; margin-bottom: .25rem; }
 .notice { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: .6rem .8rem; }
 .columns { display: flex; gap: 2rem; flex-wrap: wrap; margin-top: 1rem; }
 .controls { flex: 1 1 320px; display: flex; flex-direction: column; gap: .8rem; }
 .result { flex: 1 1 400px; }
 textarea { font: inherit; width: 100%; box-sizing: border-box; padding: .5rem; }
 label { display: flex; gap: .5rem; align-items: center; }
 button { font: inherit; font-size: 1.1rem; padding: .6rem; background: #1f6feb; color: #fff;
          border: 0; border-radius: 6px; cursor: pointer; }
 button:disabled { background: #8c959f; cursor: wait; }
 #picture { width: 384px; height: 384px; image-rendering: pixelated; object-fit: contain;
            background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; display: block; }
 #timing { font-size: 1.05rem; }
 .error { color: #cf222e; }
</style></head>
<body>
<h1>Stable Diffusion on the CPU: fewer steps, TAESD and INT8</h1>
<p class="notice">__NOTICE__</p>
<div class="columns">
 <div class="controls">
  <label for="prompt"><b>Prompt</b></label>
  <textarea id="prompt" rows="3">__PROMPT__</textarea>
  <label>Steps <input id="steps" type="number" min="1" max="100" value="__STEPS__"></label>
  <label><input id="lora" type="checkbox" checked> LCM-LoRA (few steps, no guidance)</label>
  <label><input id="taesd" type="checkbox"> TAESD (tiny autoencoder for the decode)</label>
  <label><input id="int8" type="checkbox"> INT8 UNet (weights in INT8)</label>
  <button id="generate">Generate</button>
  <small>The first click with a new combination of levers prepares it (export, quantization,
  compilation); later clicks reuse it. The seconds shown are the generation's alone.</small>
 </div>
 <div class="result">
  <img id="picture" alt="The generated picture appears here">
  <p id="timing">No picture yet.</p>
 </div>
</div>
<script>
const $ = (id) => document.getElementById(id);
$("lora").addEventListener("change", () => {
  $("steps").value = $("lora").checked ? __LCM_STEPS__ : __BASE_STEPS__;
});
$("generate").addEventListener("click", async () => {
  const button = $("generate");
  button.disabled = true;
  button.textContent = "Generating…";
  $("timing").className = "";
  $("timing").textContent = "Generating…";
  const request = {prompt: $("prompt").value, steps: $("steps").value,
                   lora: $("lora").checked, taesd: $("taesd").checked, int8: $("int8").checked};
  try {
    const reply = await fetch("generate", {method: "POST", body: JSON.stringify(request),
                                           headers: {"Content-Type": "application/json"}});
    const answer = await reply.json();
    if (!reply.ok) throw new Error(answer.error || reply.statusText);
    $("picture").src = answer.image;
    $("timing").textContent = answer.text;
  } catch (error) {
    $("timing").className = "error";
    $("timing").textContent = "Could not generate: " + error.message;
  } finally {
    button.disabled = false;
    button.textContent = "Generate";
  }
});
</script>
</body></html>
"""


def page(demo: Demo) -> str:
    """The demo's HTML page: everything inline, nothing fetched from elsewhere."""
    s = demo.settings
    fill = {
        "__NOTICE__": html.escape(demo.notice()),
        "__PROMPT__": html.escape(s.prompt),
        "__STEPS__": str(demo.steps_for(True)),
        "__LCM_STEPS__": str(s.lcm_steps),
        "__BASE_STEPS__": str(s.base_steps),
    }
    text = PAGE
    for key, value in fill.items():
        text = text.replace(key, value)
    return text


def answer(demo: Demo, body: bytes) -> tuple[int, dict]:
    """The reply to one ``POST /generate``: ``(200, {image, text})``, or an error status and message."""
    try:
        request = json.loads(body or b"{}")
        picture = demo.generate(
            request.get("prompt"),
            request.get("steps", demo.steps_for(True)),
            int8=bool(request.get("int8")),
            lora=bool(request.get("lora")),
            taesd=bool(request.get("taesd")),
        )
    except (ValueError, AttributeError) as error:
        return 400, {"error": str(error) or "The request could not be read."}
    except Exception as error:  # shown on the page; the server keeps running
        return 500, {"error": f"{type(error).__name__}: {error}"}
    return 200, {"image": png_data_url(picture.image), "text": picture.summary()}


class _Handler(BaseHTTPRequestHandler):
    demo: Demo  # set on the class built by serve()

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.split("?")[0] not in ("/", "/index.html"):
            return self._send(404, "text/plain; charset=utf-8", b"Not found")
        self._send(200, "text/html; charset=utf-8", page(self.demo).encode())

    def do_POST(self):  # noqa: N802
        if self.path.split("?")[0] != "/generate":
            return self._send(404, "text/plain; charset=utf-8", b"Not found")
        length = int(self.headers.get("Content-Length") or 0)
        status, reply = answer(self.demo, self.rfile.read(length))
        self._send(status, "application/json", json.dumps(reply).encode())

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # quiet: the page shows what happened
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> Server:
        """Serve in a background thread (in a notebook, or a test); :meth:`stop` ends it."""
        threading.Thread(target=self.serve_forever, name="sdaccel-demo", daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def serve(demo: Demo, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> Server:
    """A server of the demo's page on ``host:port`` (``port=0``: a free one), not yet started:
    call ``.serve_forever()``, or ``.start()`` for a background thread."""
    handler = type("DemoHandler", (_Handler,), {"demo": demo})
    try:
        return Server((host, port), handler)
    except OSError as error:
        raise OSError(
            f"Cannot serve the demo on {host}:{port} ({error}): choose another port (--port)."
        ) from error


# ----------------------------------------------------------------------------------------------
# In a notebook: the same controls as ipywidgets
# ----------------------------------------------------------------------------------------------


def widgets(demo: Demo):
    """The demo's controls as ipywidgets, calling :meth:`Demo.generate` like the page's button."""
    import ipywidgets as w

    prompt = w.Textarea(value=demo.settings.prompt, description="Prompt", layout=w.Layout(width="95%"))
    steps = w.BoundedIntText(value=demo.steps_for(True), min=1, max=100, description="Steps")
    lora = w.Checkbox(value=True, description="LCM-LoRA")
    taesd = w.Checkbox(value=False, description="TAESD")
    int8 = w.Checkbox(value=False, description="INT8 UNet")
    button = w.Button(description="Generate", button_style="primary")
    picture = w.Image(format="png", width=384, height=384, layout=w.Layout(object_fit="contain"))
    timing = w.HTML(f"<i>{html.escape(demo.notice())}</i>")

    def on_lora(change):
        steps.value = demo.steps_for(change["new"])

    def on_click(_):
        button.disabled, button.description = True, "Generating…"
        try:
            result = demo.generate(prompt.value, steps.value, int8.value, lora.value, taesd.value)
            buffer = io.BytesIO()
            result.image.save(buffer, format="PNG")
            picture.value = buffer.getvalue()
            timing.value = html.escape(result.summary())
        except Exception as error:  # shown under the picture; the controls stay usable
            timing.value = f"<b>Could not generate:</b> {html.escape(str(error))}"
        finally:
            button.disabled, button.description = False, "Generate"

    lora.observe(on_lora, names="value")
    button.on_click(on_click)
    controls = w.VBox([prompt, steps, lora, taesd, int8, button])
    return w.VBox([w.HBox([controls, picture]), timing])


# ----------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from sdaccel.course.run_profiles import PROFILES, active_profile

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
    server = serve(demo, args.host, args.port)
    print(f"The demo runs at {server.url} (Ctrl-C stops it).\n{demo.notice()}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("Stopped.")
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
