"""The rows of ``bench_whole_image.py``, each loaded and timed in a child process (``Bench.row``):
diffusers' pipeline, the OpenVINO pipeline (and the stack, DeepCache on it), our JAX pipeline; each
one warm-up call, then the timed calls, or the calls of two lengths composed into one image."""

from __future__ import annotations

from pathlib import Path

PROMPT = "a photo of an astronaut riding a horse on mars"


def torch_row(
    src: str,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    warmup_steps: int,
    compose: list[int] | None = None,
) -> dict:
    """diffusers' pipeline in f32 (``DiffusionPipeline``: SD 1.5 or SDXL, with both of SDXL's text
    encoders); encode and decode timed around its own methods."""
    import time

    import torch
    from diffusers import DiffusionPipeline

    from sdaccel.core.checkpoint import read_json

    index = read_json(Path(src) / "model_index.json")
    skipped = {n: None for n in ("safety_checker", "feature_extractor", "image_encoder") if n in index}
    if index.get("_class_name") == "StableDiffusionPipeline":
        skipped["requires_safety_checker"] = False
    start = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(src, dtype=torch.float32, **skipped)
    load_s = time.perf_counter() - start
    pipe.set_progress_bar_config(disable=True)
    spans: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            tick = time.perf_counter()
            out = fn(*args, **kwargs)
            spans[name] = spans.get(name, 0.0) + time.perf_counter() - tick
            return out

        return wrapper

    pipe.encode_prompt = timed("encode_s", pipe.encode_prompt)
    pipe.vae.decode = timed("vae_decoder_s", pipe.vae.decode)
    kwargs = {"height": size, "width": size}
    if guidance is not None:
        kwargs["guidance_scale"] = guidance

    class Result:
        def __init__(self, image, timings):
            self.image, self.timings = image, timings

    def call(n=steps):
        spans.clear()
        tick = time.perf_counter()
        with torch.no_grad():
            image = pipe(
                PROMPT, num_inference_steps=n, generator=torch.Generator().manual_seed(0), **kwargs
            ).images[0]
        wall = time.perf_counter() - tick
        enc, dec = spans.get("encode_s", 0.0), spans.get("vae_decoder_s", 0.0)
        return Result(image, {"encode_s": enc, "vae_decoder_s": dec, "denoise_decode_s": wall - enc})

    timed = _timed(call, steps, runs, lambda: call(warmup_steps), compose)
    return {
        **timed,
        "load_s": load_s,
        "precision": {"unet": "f32", "vae_decoder": "f32", "text_encoder": "f32"},
        "guidance_scale": pipe.guidance_scale,
        "unet_batch": 2 if pipe.do_classifier_free_guidance else 1,
        "torch_threads": torch.get_num_threads(),
    }


def ov_row(
    folder: str,
    unet_xml: str | None,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    warmup_steps: int,
    scheduler: str | None = None,
    vae: str | None = None,
    compose: list[int] | None = None,
    static: bool = False,
) -> dict:
    """One OpenVINO row: the export ``folder`` (its UNet replaced by ``unet_xml`` when given), in the
    precision ``sdaccel.cpu.precision`` measures fastest; ``static``: compiled for its one shape, one
    image of ``size`` with guidance above 1 or without it."""
    import time

    from sdaccel.cpu.export import StaticShape
    from sdaccel.cpu.pipeline import OVPipeline

    start = time.perf_counter()
    shape = StaticShape(1, size, size, guidance is None or guidance > 1) if static else None
    pipe = OVPipeline.from_pretrained(folder, precision="auto", scheduler=scheduler, vae=vae, static=shape)
    if unet_xml:
        pipe.replace_unet(Path(unet_xml))
    load_s = time.perf_counter() - start

    def call(n=steps):
        return pipe.generate(PROMPT, steps=n, guidance_scale=guidance, height=size, width=size, seed=0)

    timed = _timed(call, steps, runs, lambda: call(warmup_steps), compose)
    return {**timed, **ov_record(pipe, pipe.unet, guidance, load_s)}


def ov_record(pipe, unet, guidance: float | None, load_s: float) -> dict:
    """What every OpenVINO row records beside its timings, one rule for ov_row and stack_row: the
    load time, the precision hint as the plugin reports it, the output precision of ``unet``'s heavy
    layers as it ran, the UNet's batch per image, the scheduler, and whether ``unet`` was compiled
    static (every input of one shape). The batch is 2 (the prompt and its negative) when the
    guidance asked for (``None``: the pipeline's default) is above 1 and the model does not embed
    guidance, else 1."""
    from sdaccel.cpu.precision_timing import runtime_precisions

    scale = guidance if guidance is not None else pipe.defaults.guidance_scale
    return {
        "load_s": load_s,
        "precision": pipe.precisions,  # INFERENCE_PRECISION_HINT as the plugin reports it
        "unet_layers": runtime_precisions(unet),  # output precision of the heavy layers
        "unet_batch": 2 if scale > 1 and not pipe.guidance_embedded else 1,
        "scheduler": pipe.scheduler_class.__name__,
        "unet_static": all(port.get_partial_shape().is_static for port in unet.inputs),
    }


def jax_row(
    src: str,
    steps: int,
    guidance: float | None,
    size: int,
    runs: int,
    scheduler: str | None = None,
    vae: str | None = None,
    lora: str | None = None,
    compose: list[int] | None = None,
) -> dict:
    """Our JAX pipeline on this CPU. It compiles once per number of steps: every length timed is
    warmed up (compiled) first, and the compile time of the first is reported apart."""
    import time

    import jax
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import JaxPipeline

    start = time.perf_counter()
    pipe = JaxPipeline.from_pretrained(src, dtype=jnp.float32, scheduler=scheduler, vae=vae, progress=False)
    if lora:
        pipe.fuse_lora([(lora, 1.0)])
    load_s = time.perf_counter() - start
    first = {}

    def call(n=steps):
        return pipe.generate(PROMPT, steps=n, guidance_scale=guidance, height=size, width=size, seed=0)

    def warmup(n=None):  # the first call of each length compiles: its compile time is reported apart
        result = call(compose[0] if compose else steps) if n is None else call(n)
        first.setdefault("compile_s", result.timings.get("compile_s"))

    timed = _timed(call, steps, runs, warmup, compose, warm_each=True)
    return {
        **timed,
        "load_s": load_s,
        "compile_s": first.get("compile_s"),
        "precision": {"all": "f32"},
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
    }


def stack_row(
    folder: str,
    deepcache: str,
    interval: int,
    steps: int,
    size: int,
    runs: int,
    warmup_steps: int,
    cut: str = "block",
) -> dict:
    """The stack: the pipeline compiled static for one image of ``size`` with CFG, and each UNet
    step run by DeepCache at ``interval`` from the INT8 IRs in ``deepcache`` (cut at ``cut``). The
    warm-up call runs at least 2 steps, so that both IRs have run once before the timed calls."""
    import time

    from sdaccel.cpu.deepcache import DeepCache
    from sdaccel.cpu.pipeline import OVPipeline

    start = time.perf_counter()
    pipe = OVPipeline.from_pretrained(folder, precision="auto", static=(1, size, size))
    cache = DeepCache.load(deepcache, pipe, interval=interval)
    load_s = time.perf_counter() - start

    def call(n=steps):
        return pipe.generate(PROMPT, steps=n, height=size, width=size, seed=0, deepcache=cache)

    def warmup():
        call(max(warmup_steps, 2))
        cache.calls = {part: 0 for part in cache.calls}  # count the timed calls' UNet runs only

    timed = _timed(call, steps, runs, warmup, None)
    return {
        **timed,
        # DeepCache's full UNet, as it ran; the pipeline's own guidance, as call() runs it
        **ov_record(pipe, cache.models["full"], None, load_s),
        "deepcache": {
            "interval": interval,
            "cut": cut,
            "unet_calls_per_image": {k: v / runs for k, v in cache.calls.items()},
        },
    }


def _timed(call, steps: int, runs: int, warmup, compose: list[int] | None, warm_each: bool = False) -> dict:
    """``{"timed": ...}``: :func:`sdaccel.course.whole_image.time_calls` of ``call(steps)``; or, with
    ``compose = [a, b]``, of ``call(a)`` and of ``call(b)`` in turns (``warm_each``: ``warmup(b)`` before
    the calls of ``b``, for a front-end that compiles per length), composed into one image of
    ``steps`` steps by :func:`sdaccel.course.whole_image.compose`, with the calls kept under ``"calls"``."""
    from sdaccel.course.whole_image import compose as compose_calls
    from sdaccel.course.whole_image import time_calls, time_in_turns

    if not compose:
        return {"timed": time_calls(lambda: call(steps), runs, warmup=warmup)}
    a, b = compose
    # in turns (a, b, a, b, ...): a load that comes and goes while it measures moves both alike
    calls = {a: lambda: call(a), b: lambda: call(b)}
    times = time_in_turns(calls, runs, {a: warmup, b: (lambda: warmup(b)) if warm_each else None})
    short, long = times[a], times[b]
    return {
        "timed": compose_calls(short, long, a, b, steps),
        "calls": {str(a): short, str(b): long},
        "composed": {"from_steps": [a, b]},
    }
