"""The library code that notebook 07's Part 3 shows in its cells is the code the JAX pipeline runs,
on the repository's trained toy (``checkpoints/tiny-shapes-sdxl``) and the LCM-LoRA distilled
beside it, as the smoke profile runs them:

- the cell that fuses one layer by hand (``W + alpha / r * (up @ down).T``) runs as written: its
  weight is the one ``pipe.fuse_lora`` writes, and :func:`sdaccel.tpu.fuse_layer`, which it
  prints, is what ``fuse_lora`` writes into every layer (convolutions too);
- ``unfuse_lora`` restores the weights up to one float32 rounding step, not exactly: what the
  corrected sentence says;
- the guidance embedding the cell prints is what ``denoise_and_decode`` passes as ``timestep_cond``;
- the cell's first LCM step (its UNet call, then ``LCMScheduler.step``) is the pipeline's own:
  a 1-step ``generate`` (same timestep, no re-noising) decodes the latent the cell computes;
- exercise 07.3 (one LCM step): the solution passes its check, the attendee copy and wrong
  answers fail it.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import jax
import jax.numpy as jnp
import nbformat
import numpy as np
import pytest
from flax import nnx

from sdaccel.core.checkpoint import resolve_lora
from sdaccel.core.lora_files import LoraAdapter, LoraLayer, read_lora
from sdaccel.course import exercises as ex
from sdaccel.course import few_steps
from sdaccel.tpu import fuse_layer, guidance_scale_embedding, lora, platform_compiler_options
from sdaccel.tpu.pipeline import JaxPipeline, classifier_free_guidance, initial_noise

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "07_fewer_steps.ipynb"
TOY, TOY_LORA = REPO / "checkpoints" / "tiny-shapes-sdxl", REPO / "checkpoints" / "tiny-shapes-sdxl-lcm-lora"
PROMPTS = ["a red circle on a blue background", "a green square on a white background"]
SIZE = 32


def lesson_cell(starts: str) -> str:
    """The source of the one code cell of notebook 07 that starts with ``starts``."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (found,) = [ex.source(c) for c in nb.cells if c.cell_type == "code" and ex.source(c).startswith(starts)]
    return found


BY_HAND = "print(inspect.getsource(fuse_layer))"
GUIDANCE = "print(inspect.getsource(guidance_scale_embedding))"
STEP = "lcm_scheduler = pipe.scheduler"
FACTS = "# NBVAL_CHECK_OUTPUT"
ONE_STEP = "# The first LCM step's UNet call"


def toy_pipeline() -> JaxPipeline:
    pipe = JaxPipeline.from_pretrained(TOY, dtype=jnp.float32, progress=False)
    few_steps.use_scheduler(pipe, "lcm")  # as the notebook's "no adapter" row does first
    return pipe


@pytest.fixture(scope="module")
def part3():
    """The namespace of notebook 07's Part 3 after its lesson cells ran as written on the toy
    (the timing and plotting cells between them left out)."""
    namespace = {
        "Path": Path,
        "inspect": inspect,
        "jax": jax,
        "jnp": jnp,
        "np": np,
        "nnx": nnx,
        "LoraLayer": LoraLayer,
        "read_lora": read_lora,
        "resolve_lora": resolve_lora,
        "fuse_layer": fuse_layer,
        "guidance_scale_embedding": guidance_scale_embedding,
        "platform_compiler_options": platform_compiler_options,
        "classifier_free_guidance": classifier_free_guidance,
        "initial_noise": initial_noise,
        "pipe": toy_pipeline(),
        "JAX_LORA": str(TOY_LORA),
        "JAX_DTYPE": "float32",
        "LCM_STEPS": 4,
        "LCM_GUIDANCE_SCALE": 1.0,
        "PROMPTS": PROMPTS,
        "SEED": 42,
        "jax_size": {"height": SIZE, "width": SIZE},
    }
    for starts in (BY_HAND, GUIDANCE, STEP, FACTS, ONE_STEP):
        exec(compile(lesson_cell(starts), f"<07: {starts}>", "exec"), namespace)
    return namespace


# ----------------------------------------------------------------------------------------------
# LoRA fusing: the cell, fuse_layer and fuse_lora agree; unfusing rounds
# ----------------------------------------------------------------------------------------------


def test_the_by_hand_cell_fuses_the_layer_as_the_pipeline_does(part3):
    """The cell asserted it (it ran without an error); here the weight is bit for bit the one the
    pipeline holds, and the layer the cell names is one of the adapter's."""
    pipe, layer, base = part3["pipe"], part3["layer"], part3["W"]
    fused = part3["to_q_kernel"](pipe)
    np.testing.assert_array_equal(np.asarray(fused), np.asarray(part3["by_hand"]))
    np.testing.assert_array_equal(np.asarray(fused), np.asarray(fuse_layer(base, layer, 1.0)))
    assert layer.rank < min(base.shape) and not np.array_equal(np.asarray(fused), np.asarray(base))


def test_fuse_layer_is_what_fuse_lora_writes_into_every_layer():
    pipe = JaxPipeline.from_pretrained(TOY, dtype=jnp.float32, progress=False)
    adapter = read_lora(resolve_lora(TOY_LORA))
    before = {m: v.get_value() for m, (_, v) in lora._kernels(pipe.params["unet"]).items()}
    (resolved,) = pipe.fuse_lora([(adapter, 0.7)])
    after = {m: v.get_value() for m, (_, v) in lora._kernels(pipe.params["unet"]).items()}
    layers = resolved.layers["unet"]
    assert len(layers) == len(adapter) and any(lo.down.ndim == 4 for lo in layers.values()), "convs too"
    for module, layer in layers.items():
        np.testing.assert_array_equal(
            np.asarray(after[module]), np.asarray(fuse_layer(before[module], layer, 0.7))
        )
        # fuse_layer is the formula: W + scale * alpha / r * up @ down, in our (transposed) layout
        delta = (
            0.7
            * layer.alpha
            / layer.rank
            * (layer.up.reshape(layer.up.shape[0], -1) @ layer.down.reshape(layer.rank, -1))
        )
        delta = delta.reshape(layer.shape)
        delta = delta.transpose(2, 3, 1, 0) if delta.ndim == 4 else delta.T
        np.testing.assert_allclose(
            np.asarray(after[module]), np.asarray(before[module]) + delta, rtol=1e-6, atol=1e-7
        )
    untouched = set(before) - set(layers)
    assert untouched and all(np.array_equal(before[m], after[m]) for m in untouched)

    # unfuse_lora: back within one float32 rounding step of |W| + |delta|, not always exactly
    pipe.unfuse_lora()
    back = {m: v.get_value() for m, (_, v) in lora._kernels(pipe.params["unet"]).items()}
    moved = 0
    for module in layers:
        w, b = np.asarray(before[module]), np.asarray(back[module])
        step = np.spacing(np.abs(w) + np.abs(np.asarray(after[module]) - w))
        assert np.all(np.abs(b - w) <= step), module
        moved += int(np.count_nonzero(b != w))
    assert moved > 0, "the round trip rounds: 'exactly in float32' would be wrong"


# ----------------------------------------------------------------------------------------------
# The guidance embedding and one LCM step: the cells compute what the pipeline runs
# ----------------------------------------------------------------------------------------------


def test_the_guidance_embedding_shown_is_the_one_the_pipeline_passes(part3):
    source = inspect.getsource(JaxPipeline.denoise_and_decode)
    assert "w = jnp.reshape(jnp.asarray(guidance_scale, jnp.float32) - 1, (1,))" in source
    assert "timestep_cond = guidance_scale_embedding(w, self.unet_config.time_cond_proj_dim)" in source
    assert "unet(x, t, context, text_embeds, time_ids, timestep_cond)" in source
    assert part3["w_embedding"].shape == (2, 256)
    assert not part3["pipe"].guidance_embedded and part3["timestep_cond"] is None, (
        "the LCM-LoRA toy has no w input"
    )


def test_the_facts_cell_prints_the_4_step_schedule(part3, capsys):
    exec(compile(lesson_cell(FACTS), "<facts>", "exec"), dict(part3))
    printed = capsys.readouterr().out
    assert "timesteps      [999, 759, 499, 259]" in printed
    assert "LoRA: 79 layers (79 in the unet), (rank, alpha) [(4, 4.0)], so alpha / r = [1.0]" in printed
    assert "timestep_cond (2, 256)" in printed


def test_the_cells_first_lcm_step_is_the_pipelines(part3):
    """A 1-step LCM run has the 4-step schedule's first timestep (999) and does not re-noise: its
    image is the decode of the cell's denoised latent for the same prompt, seed and size."""
    pipe, state = part3["pipe"], part3["lcm_state"]
    one = pipe.scheduler.set_timesteps(1)
    assert int(one.timesteps[0]) == int(state.timesteps[0])
    denoised = pipe.scheduler.step(one, part3["eps"], 0, part3["step_latents"], part3["step_noise"])
    image = jnp.clip(pipe.vae.decode(pipe.unscale_latents(denoised)).astype(jnp.float32) / 2 + 0.5, 0, 1)
    result = pipe.generate(PROMPTS[:1], steps=1, guidance_scale=1.0, height=SIZE, width=SIZE, seed=42)
    np.testing.assert_allclose(np.asarray(result.array), np.asarray(image), atol=2e-5)


# ----------------------------------------------------------------------------------------------
# Exercise 07.3: the solution passes, the attendee copy and wrong answers fail
# ----------------------------------------------------------------------------------------------


def run(namespace: dict, *sources: str) -> None:
    for k, code in enumerate(sources):
        exec(compile(code, f"<cell {k}>", "exec"), namespace)


X0 = "a, a_next = lcm_state.alpha_prod[0], lcm_state.alpha_prod_prev[0]\nx0 = (step_latents - jnp.sqrt(1 - a) * eps) / jnp.sqrt(a)\n"
WRONG_LCM_STEPS = {
    "no re-noising (the last step's rule)": X0
    + "next_latents = lcm_state.c_out[0] * x0 + lcm_state.c_skip[0] * step_latents",
    "c_skip and c_out swapped": X0 + "d = lcm_state.c_skip[0] * x0 + lcm_state.c_out[0] * step_latents\n"
    "next_latents = jnp.sqrt(a_next) * d + jnp.sqrt(1 - a_next) * step_noise",
    "re-noised to the current level": X0
    + "d = lcm_state.c_out[0] * x0 + lcm_state.c_skip[0] * step_latents\n"
    "next_latents = jnp.sqrt(a) * d + jnp.sqrt(1 - a) * step_noise",
    "x0 not divided by sqrt(a)": "a, a_next = lcm_state.alpha_prod[0], lcm_state.alpha_prod_prev[0]\n"
    "x0 = step_latents - jnp.sqrt(1 - a) * eps\n"
    "d = lcm_state.c_out[0] * x0 + lcm_state.c_skip[0] * step_latents\n"
    "next_latents = jnp.sqrt(a_next) * d + jnp.sqrt(1 - a_next) * step_noise",
    "noise weights swapped": X0 + "d = lcm_state.c_out[0] * x0 + lcm_state.c_skip[0] * step_latents\n"
    "next_latents = jnp.sqrt(1 - a_next) * d + jnp.sqrt(a_next) * step_noise",
}


def as_lcm_step(body: str) -> str:
    """A wrong answer above, written with the cell's names, as the function the exercise asks for."""
    head = "def lcm_step(lcm_state, step_latents, eps, step_noise):\n"
    return head + "".join(f"    {line}\n" for line in body.splitlines()) + "    return next_latents\n"


def test_exercise_07_3_one_lcm_step(part3):
    solution, stub, check = ex.exercise_cells(NOTEBOOK, "07.3")
    assert "lcm_scheduler.step(" in check and "lcm_scheduler.step(" not in solution
    run(dict(part3), solution, check)  # the notebook's solution: no exception
    with pytest.raises(ex.ExerciseNotDone, match="not answered yet"):
        run(dict(part3), stub, check)
    for why, wrong in WRONG_LCM_STEPS.items():
        with pytest.raises(ex.ExerciseNotDone, match="not quite"):
            run(dict(part3), stub, as_lcm_step(wrong), check)
            pytest.fail(f"a wrong answer passed: {why}")


# ----------------------------------------------------------------------------------------------
# Exercise 07.2: a second LoRA at half weight, on the tiny trained model's JAX pipeline
# ----------------------------------------------------------------------------------------------


def test_exercise_07_2_second_lora_on_the_jax_pipeline(part3):
    """The solution fuses one layer of the LCM-LoRA at 0.5 into a pipeline without an adapter (as
    the notebook's is after unfusing), draws with it and unfuses: the check passes, the images are
    not the base's, and the weights are back; a weight of 1.0 fails. tests/course/test_exercise_07_lora.py
    lists the other wrong answers."""
    solution, _, check = ex.exercise_cells(NOTEBOOK, "07.2")
    pipe = toy_pipeline()
    lcm_call = dict(steps=4, guidance_scale=1.0, seed=42, height=SIZE, width=SIZE)
    base = pipe.generate(PROMPTS, **lcm_call).images
    kernel = np.asarray(part3["to_q_kernel"](pipe))
    namespace = {**part3, "LoraAdapter": LoraAdapter, "pipe": pipe, "lcm_call": lcm_call}
    (second,) = [
        line for line in lesson_cell("removed = pipe.unfuse_lora()").splitlines() if "second_lora =" in line
    ]
    run(namespace, second, solution, check)
    images = namespace["with_second_lora"](pipe, namespace["second_lora"])
    assert any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(images, base, strict=True))
    np.testing.assert_allclose(np.asarray(part3["to_q_kernel"](pipe)), kernel, rtol=1e-6, atol=1e-7)

    def at_full_weight(pipe, lora):
        pipe.fuse_lora([(lora, 1.0)])
        drawn = pipe.generate(PROMPTS, **lcm_call).images
        pipe.unfuse_lora()
        return drawn

    namespace["with_second_lora"] = at_full_weight
    with pytest.raises(ex.ExerciseNotDone, match="not quite"):
        run(namespace, check)
