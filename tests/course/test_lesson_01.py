"""Notebook 01's cell "The loop, in the program": it lowers ``jax.jit(pipe.denoise_and_decode)`` and
reads its ``stablehlo.while`` loops. Run here on the tiny SDXL, the cell's program text is the one
``generate`` compiles (the pipeline's own jitted function, lowered with the arguments ``generate``
passed it), its first loop runs the steps, and the program holds one UNet: its convolutions are
the UNet's and the VAE decoder's conv kernels, once each."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from sdaccel.course import exercises as ex
from sdaccel.tpu.pipeline import JaxPipeline, initial_noise

NB01 = Path(__file__).resolve().parents[2] / "notebooks" / "01_sdxl_in_jax.ipynb"
STEPS, SIZE = 3, 32


@pytest.fixture(scope="module")
def pipe(tiny_sdxl):
    return JaxPipeline.from_pretrained(tiny_sdxl, dtype="float32", progress=False)


def run_cell(pipe, prompts: list[str]) -> dict:
    """The notebook's cell, run with what the notebook holds at that point."""
    namespace = {
        "jax": jax,
        "jnp": jnp,
        "nnx": nnx,
        "initial_noise": initial_noise,
        "pipe": pipe,
        "prompts": prompts,
        "NEGATIVE_PROMPT": None,
        "GUIDANCE_SCALE": 5.0,
        "HEIGHT": SIZE,
        "WIDTH": SIZE,
        "STEPS": STEPS,
        "SEED": 0,
        "shape": pipe.latent_shape(SIZE, SIZE),
        "results": {},
    }
    exec(compile(ex.code_cell(NB01, "stablehlo.while"), "01 the loop", "exec"), namespace)
    return namespace


def test_the_cell_shows_the_program_that_generate_runs(pipe, capsys):
    prompts = ["a red circle", "a blue square"]
    shown = run_cell(pipe, prompts)
    printed = capsys.readouterr().out
    assert "stablehlo.while" in printed and "cond {" in printed and "} do {" in printed

    passed = []
    compile_program = pipe._denoise.compile

    def spy(*args):  # the arguments generate hands its compiled program
        passed.append(args)
        return compile_program(*args)

    pipe._denoise.compile = spy
    try:
        pipe.generate(prompts, None, steps=STEPS, guidance_scale=5.0, height=SIZE, width=SIZE, seed=0)
    finally:
        del pipe._denoise.compile
    (args,) = passed
    assert shown["program"] == pipe._denoise.jitted.lower(*args).as_text()


def test_the_loop_runs_the_steps_and_the_unet_is_in_it_once(pipe):
    shown = run_cell(pipe, ["a red circle", "a blue square"])
    # the denoising loop, then the VAE's one image per trip
    assert shown["trips"] == [STEPS, 2] and shown["results"]["while_loops"] == 2
    assert shown["convs"] == shown["unet_convs"] + shown["vae_convs"] and shown["unet_convs"] > 0
    # the loop's body calls the function that holds the UNet's convolutions, all of them
    program = shown["program"]
    lines = program.splitlines()
    body = next(line for line in lines[shown["loops"][0] :] if "func.call @" in line)
    called = body.split("func.call @")[1].split("(")[0]
    function = program.split(f"func.func private @{called}(")[1].split("\n  func.func")[0]
    assert function.count("stablehlo.convolution") == shown["unet_convs"]


def test_unrolling_the_loop_would_show(pipe):
    """What the cell's assertion guards against: a Python loop over the steps puts one UNet per
    step into the program, and no ``while``."""
    shape = pipe.latent_shape(SIZE, SIZE)
    state = pipe.scheduler.set_timesteps(STEPS)
    cond = pipe.conditioning(["a red circle"], None, 5.0, SIZE, SIZE)
    unet = pipe.unet

    def unrolled(latents):
        for i in range(STEPS):
            x = jnp.repeat(pipe.scheduler.scale_model_input(state, latents, i), 2, axis=0)
            eps = unet(
                x,
                state.timesteps[i],
                cond.prompt_embeds.reshape(2, *cond.prompt_embeds.shape[2:]),
                cond.text_embeds.reshape(2, -1),
                cond.time_ids.reshape(2, -1),
            )
            latents = pipe.scheduler.step(state, eps[1:] + 5.0 * (eps[1:] - eps[:1]), i, latents)
        return latents

    text = jax.jit(unrolled).lower(initial_noise(0, jnp.arange(1), shape)).as_text()
    shown = run_cell(pipe, ["a red circle"])
    assert "stablehlo.while" not in text
    assert text.count("stablehlo.convolution") == STEPS * shown["unet_convs"]
