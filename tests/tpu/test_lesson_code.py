"""The library code that notebooks 01-03 show in their cells is the code the pipelines run:

- 01 prints :func:`sdaccel.tpu.pipeline.denoising_loop` and :func:`classifier_free_guidance` with
  ``inspect.getsource``; here they compute what diffusers' formulas say, step by step;
- 02 writes ``jax.jit(denoise_and_decode, in_shardings=..., out_shardings=...)`` by hand; here it
  compiles to the placements of the program that ``ShardedPipeline`` runs;
- 03 calls ``lower(...).compile().cost_analysis()`` on that program; here its FLOPs are the ones
  ``ShardedPipeline.flops`` reports as counted.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import nbformat
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.course import exercises as ex
from sdaccel.tpu import schedulers
from sdaccel.tpu import sharding as sh
from sdaccel.tpu.pipeline import JaxPipeline, classifier_free_guidance, denoising_loop
from sdaccel.tpu.sharded_pipeline import ShardedPipeline

EULER = {
    "_class_name": "EulerDiscreteScheduler",
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "timestep_spacing": "leading",
    "steps_offset": 1,
}


def test_classifier_free_guidance_is_diffusers_formula():
    rng = np.random.default_rng(0)
    pred = jnp.asarray(rng.standard_normal((3, 2, 4, 4, 4)), jnp.float32)
    uncond, text = pred[:, 0], pred[:, 1]
    np.testing.assert_allclose(classifier_free_guidance(pred, 7.5), uncond + 7.5 * (text - uncond), rtol=1e-6)
    np.testing.assert_array_equal(classifier_free_guidance(pred[:, 1:], 7.5), text)  # G = 1: no guidance


def test_denoising_loop_is_the_python_loop_of_its_steps():
    """A stand-in UNet (a fixed function of x and t, per guidance row): the compiled fori_loop gives
    what scale_model_input -> UNet -> guidance -> scheduler.step gives one step at a time."""
    scheduler = schedulers.from_config(EULER)
    state = scheduler.set_timesteps(5)
    noise = jax.random.normal(jax.random.key(0), (2, 4, 4, 4), jnp.float32)
    bias = jnp.asarray([-0.3, 0.5])  # guidance row 0 (negative) and 1 (prompt) predict differently

    def unet(x, t):  # (B * G, h, w, C)
        rows = jnp.tile(bias, x.shape[0] // 2)[:, None, None, None]
        return jnp.sin(x) * 0.1 + rows + t / 1000.0

    got = jax.jit(lambda n: denoising_loop(unet, scheduler, state, n, 6.0, 2))(noise)

    latents = noise * state.init_noise_sigma
    for i in range(5):
        x = scheduler.scale_model_input(state, latents, i)
        pred = unet(jnp.repeat(x, 2, axis=0), state.timesteps[i]).reshape(2, 2, 4, 4, 4)
        latents = scheduler.step(state, pred[:, 0] + 6.0 * (pred[:, 1] - pred[:, 0]), i, latents)
    np.testing.assert_allclose(np.asarray(got), np.asarray(latents), rtol=1e-5, atol=1e-6)


def test_the_pipeline_runs_the_loop_the_notebook_prints():
    assert "denoising_loop(" in inspect.getsource(JaxPipeline.denoise_and_decode)
    source = inspect.getsource(denoising_loop)
    assert "jax.lax.fori_loop" in source and "classifier_free_guidance(" in source
    assert "scheduler.step(" in source and len(source.splitlines()) < 45, "short enough to read"


@pytest.mark.skipif(jax.device_count() < 4, reason=f"needs 4 devices, JAX started with {jax.device_count()}")
def test_jit_by_hand_is_the_sharded_program_and_its_flops(tiny_sdxl):
    """02's cell: jax.jit with in/out shardings by hand compiles to the placements ShardedPipeline
    runs; 03's cell: the cost_analysis() FLOPs of that program (one device's share) are pipe.flops'
    count."""
    mesh = sh.make_mesh(4)
    pipe = ShardedPipeline.from_pretrained(tiny_sdxl, mesh, dtype=jnp.float32, progress=False)
    args = pipe.inputs(["a red circle"] * 4, None, 2, 5.0, 32, 32, 0)
    runs = pipe.compile(args).executable

    data, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    param_shardings = jax.tree.map(lambda w: w.sharding, pipe.pipeline.params)
    denoise = jax.jit(
        pipe.pipeline.denoise_and_decode,
        in_shardings=(param_shardings, replicated, data, data, replicated),
        out_shardings=data,
    )
    with jax.set_mesh(mesh):
        by_hand = denoise.lower(*args).compile()
    assert by_hand.input_shardings == runs.input_shardings
    assert by_hand.output_shardings == runs.output_shardings

    # 03's cell reads cost_analysis() of this program compiled with the pipeline's XLA options (and
    # asserts the same); in bfloat16, where those options change what XLA counts on the CPU
    bf16 = ShardedPipeline.from_pretrained(tiny_sdxl, mesh, dtype=jnp.bfloat16, progress=False)
    args = bf16.inputs(["a red circle"] * 4, None, 3, 5.0, 32, 32, 0)
    with jax.set_mesh(mesh):
        lowered = bf16.cache.jitted.lower(*args)
    executable = lowered.compile(bf16.cache.compiler_options)
    assert executable.cost_analysis()["flops"] * mesh.size == bf16.flops(args)["program_as_counted"]
    runs = bf16.compile(args).executable
    assert (
        executable.memory_analysis().argument_size_in_bytes == runs.memory_analysis().argument_size_in_bytes
    )


#: The code of 01's and 07's one UNet call by hand, from its first line to the ``jax.jit(...)`` it builds.
UNET_CALL_START = "graphdef, weights = nnx.split(pipe.unet)"


def unet_call_code(notebook: str) -> str:
    """The lines of ``notebook`` that compile its one UNet call by hand: ``nnx.split``, then the
    ``jax.jit`` of the merged module."""
    nb = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / f"{notebook}.ipynb", as_version=4)
    (source,) = [c.source for c in nb.cells if c.cell_type == "code" and UNET_CALL_START in c.source]
    start = source.index(UNET_CALL_START)
    return source[start : source.index("\n)\n", start) + 3]


def test_the_unet_call_by_hand_compiles_with_the_pipelines_options(tiny_sdxl):
    """The rehearsal of 07 at real size died at 22 GiB in its one UNet call by hand: compiled with
    XLA's CPU defaults (``nnx.jit``), it held a float32 copy of every bfloat16 weight of SDXL's UNet,
    10 GB more. The cells of 01 and 07 now compile with the pipelines' options. Their code, run here
    on the tiny SDXL in bfloat16: XLA's temporaries are a small part of the weights' float32 bytes,
    where the defaults need more than all of them, and the output is the UNet's, bit for bit."""
    from flax import nnx

    from sdaccel.tpu import platform_compiler_options
    from sdaccel.tpu.pipeline import initial_noise

    pipe = JaxPipeline.from_pretrained(tiny_sdxl, dtype="bfloat16", progress=False)
    cond = pipe.conditioning(["a red circle"], None, 5.0, 64, 64)
    state = pipe.scheduler.set_timesteps(4)
    latents = initial_noise(0, jnp.arange(1), pipe.latent_shape(64, 64))
    x = jnp.repeat(pipe.scheduler.scale_model_input(state, latents, 0), 2, axis=0)
    folded = (v.reshape(-1, *v.shape[2:]) for v in (cond.prompt_embeds, cond.text_embeds, cond.time_ids))
    inputs = (x, state.timesteps[0], *folded)
    graphdef, weights = nnx.split(pipe.unet)
    f32_bytes = 4 * sum(w.size for w in jax.tree.leaves(weights))
    merged = jax.jit(lambda weights, *inputs: nnx.merge(graphdef, weights)(*inputs))  # XLA's defaults
    default = merged.lower(weights, *inputs).compile()
    assert default.memory_analysis().temp_size_in_bytes > f32_bytes, f32_bytes
    expected = np.asarray(default(weights, *inputs))
    codes = {notebook: unet_call_code(notebook) for notebook in ("01_sdxl_in_jax", "07_fewer_steps")}
    for code in set(codes.values()):  # the same lines in both notebooks: compiled once
        namespace = {
            "jax": jax,
            "nnx": nnx,
            "pipe": pipe,
            "platform_compiler_options": platform_compiler_options,
        }
        exec(compile(code, "unet_call", "exec"), namespace)
        unet_call, weights = namespace["unet_call"], namespace["weights"]
        compiled = unet_call.lower(weights, *inputs).compile()
        assert compiled.memory_analysis().temp_size_in_bytes < f32_bytes / 4, code
        np.testing.assert_array_equal(np.asarray(compiled(weights, *inputs)), expected)


TWO_STAGES_START = "    encoders = diffusers.DiffusionPipeline.from_pretrained("
TWO_STAGES_END = "    reference = diffusers.DiffusionPipeline.from_pretrained("


def two_stage_reference_code() -> str:
    """01's lines that load diffusers' reference in two stages (text encoders, then UNet and VAE),
    dedented out of the cell's ``else:`` branch."""
    nb = nbformat.read(NOTEBOOKS / "01_sdxl_in_jax.ipynb", as_version=4)
    (source,) = [c.source for c in nb.cells if c.cell_type == "code" and TWO_STAGES_START in c.source]
    start = source.index(TWO_STAGES_START)
    end = source.index("\n    )\n", source.index(TWO_STAGES_END)) + 7
    return textwrap.dedent(source[start:end])


@pytest.mark.parametrize("name", ["tiny-shapes-sdxl", "tiny-shapes-sd15"])
def test_the_two_stage_reference_makes_the_images_of_one_call(name):
    """01 loads diffusers' float32 reference in two stages, so that its text encoders (3.3 GB for
    SDXL) and UNet (10.3 GB) are never in memory together beside the JAX pipeline. Its code, run on
    the trained toys of both families (SDXL: two encoders and pooled embeddings; SD 1.5: one): the
    images are those of one call of the whole pipeline with the prompts, bit for bit."""
    import diffusers
    import torch

    from sdaccel.core import return_freed_memory

    folder = NOTEBOOKS.parent / "checkpoints" / name
    extra = {} if "sdxl" in name else {"safety_checker": None, "requires_safety_checker": False}
    compare_prompts, NEGATIVE_PROMPT, GUIDANCE_SCALE = ["a red circle", "a blue square"], None, 6.0  # noqa: N806
    latents = torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(0))
    call = dict(num_inference_steps=3, guidance_scale=GUIDANCE_SCALE, height=32, width=32, output_type="np")
    whole = diffusers.DiffusionPipeline.from_pretrained(folder, dtype=torch.float32, **extra)
    with torch.no_grad():
        expected = whole(
            prompt=compare_prompts, negative_prompt=NEGATIVE_PROMPT, latents=latents, **call
        ).images
    del whole
    namespace = {
        "diffusers": diffusers,
        "torch": torch,
        "return_freed_memory": return_freed_memory,
        "pipe": SimpleNamespace(folder=folder),
        "VARIANT": None,
        "extra": extra,
        "compare_prompts": compare_prompts,
        "NEGATIVE_PROMPT": NEGATIVE_PROMPT,
        "GUIDANCE_SCALE": GUIDANCE_SCALE,
    }
    exec(compile(two_stage_reference_code(), "two_stages", "exec"), namespace)
    reference = namespace["reference"]
    assert "encoders" not in namespace, "the text encoders' pipeline must be released before the UNet loads"
    assert all(getattr(reference, n, None) is None for n in ("text_encoder", "text_encoder_2"))
    with torch.no_grad():
        images = reference(**namespace["embeddings"], latents=latents, **call).images
    np.testing.assert_array_equal(images, expected)


# ----------------------------------------------------------------------------------------------
# The exercises that make the attendee write that code: the notebook's solution passes its check,
# a wrong answer fails it, and so does the attendee copy (solution stripped)
# ----------------------------------------------------------------------------------------------

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def run_exercise(namespace: dict, solution: str, check: str, answer: str | None = None) -> dict:
    """Run the solution cell (or the stub then ``answer``, the attendee's code), then the check."""
    exec(compile(solution, "<solution>", "exec"), namespace)
    if answer is not None:
        exec(compile(answer, "<answer>", "exec"), namespace)
    exec(compile(check, "<check>", "exec"), namespace)
    return namespace


def outcomes(namespace_fn, notebook, exercise_id, wrong_answers):
    solution, stub, check = ex.exercise_cells(NOTEBOOKS / notebook, exercise_id)
    run_exercise(namespace_fn(), solution, check)  # the notebook's solution: no exception
    with pytest.raises(ex.ExerciseNotDone, match="not answered yet"):
        run_exercise(namespace_fn(), stub, check)
    for wrong in wrong_answers:
        with pytest.raises(ex.ExerciseNotDone, match="not quite"):
            run_exercise(namespace_fn(), stub, check, answer=wrong)


def test_exercise_01_3_one_guided_euler_step():
    scheduler = schedulers.from_config(EULER)
    state = scheduler.set_timesteps(20)
    rng = np.random.default_rng(1)

    def namespace():
        return {
            "jnp": jnp,
            "pipe": SimpleNamespace(scheduler=scheduler),
            "classifier_free_guidance": classifier_free_guidance,
            "GUIDANCE_SCALE": 6.0,
            "step_state": state,
            "step_latents": jnp.asarray(rng.standard_normal((1, 4, 4, 4)), jnp.float32)
            * state.init_noise_sigma,
            "noise_pred": jnp.asarray(rng.standard_normal((1, 2, 4, 4, 4)), jnp.float32),
        }

    s = "step_state.sigmas"
    outcomes(
        namespace,
        "01_sdxl_in_jax.ipynb",
        "01.3",
        [
            f"next_latents = step_latents + ({s}[1] - {s}[0]) * noise_pred[:, 1]",  # no guidance
            "eps = noise_pred[:, 1] + GUIDANCE_SCALE * (noise_pred[:, 0] - noise_pred[:, 1])\n"  # swapped
            f"next_latents = step_latents + ({s}[1] - {s}[0]) * eps",
            "eps = noise_pred[:, 0] + GUIDANCE_SCALE * (noise_pred[:, 1] - noise_pred[:, 0])\n"
            f"next_latents = step_latents + ({s}[0] - {s}[1]) * eps",  # the step backwards
        ],
    )


@pytest.mark.skipif(jax.device_count() < 8, reason=f"needs 8 devices, JAX started with {jax.device_count()}")
def test_exercise_02_3_a_jit_with_shardings_and_no_collective():
    def namespace():
        return {
            "jax": jax,
            "NamedSharding": NamedSharding,
            "P": P,
            "mesh": sh.make_mesh(),
            "model_mesh": sh.make_mesh(model=2),
            "devices": jax.devices(),
            "sh": sh,
        }

    def jit_with(w, x, out):  # the attendee's answer, with these specs on the data x model mesh
        def on(spec):
            return f"NamedSharding(model_mesh, {spec})"

        return f"no_traffic = jax.jit(layer, in_shardings=({on(w)}, {on(x)}), out_shardings={on(out)})"

    outcomes(
        namespace,
        "02_sharding_across_cores.ipynb",
        "02.3",
        [
            jit_with("P('model', None)", "P('data')", "P('data')"),  # split contraction: an all-reduce
            jit_with("P()", "P()", "P()"),  # every row on every device: the work is not split
            jit_with("P()", "P('data')", "P()"),  # the output replicated: an all-gather
        ],
    )


def test_exercise_03_2_what_xla_counts_in_a_loop():
    outcomes(
        lambda: {"jax": jax, "jnp": jnp},
        "03_tpu_performance.ipynb",
        "03.2",
        [
            "loop_and_step_flops = (10 * 2 * 64 * 512 * 512, 2 * 64 * 512 * 512)",  # ten bodies
            "loop_and_step_flops = (64 * 512 * 512, 64 * 512 * 512)",  # multiply-adds, not FLOPs
        ],
    )
