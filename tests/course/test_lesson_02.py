"""Notebook 02's cell "The noise, drawn by hand": ``fold_in(key(SEED), k)`` for each image ``k`` of the
global batch, drawn once on one device and once with the indices split over ``"data"``. Run here
on the tiny SDXL: both draws are the noise that ``ShardedPipeline.inputs`` places on an 8-device
mesh and on a 1-device mesh, bit for bit, and the cell's function is
:func:`sdaccel.tpu.pipeline.initial_noise` for any indices (a later call's ``first_index``)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sdaccel.course import exercises as ex
from sdaccel.tpu import sharding as sh
from sdaccel.tpu import topology as tpu_topology
from sdaccel.tpu.pipeline import initial_noise
from sdaccel.tpu.sharded_pipeline import ShardedPipeline

NB02 = Path(__file__).resolve().parents[2] / "notebooks" / "02_sharding_across_cores.ipynb"
SEED, SIZE = 3, 32

#: Optimised HLO with the pipeline's two loops: the denoising loop's body all-reduces and
#: re-lays out, the VAE's all-reduces twice.
ONE_LOOP_HLO = """
%unet_step (t: (s32[], f32[4,4])) -> (s32[], f32[4,4]) {
  %r = f32[4,4]{1,0} all-reduce(f32[4,4]{1,0} %x), to_apply=%add
  %a = f32[4,4]{1,0} all-to-all(f32[4,4]{1,0} %r), dimensions={0}
}

%decode (t: (s32[], f32[4,4])) -> (s32[], f32[4,4]) {
  %r = f32[4,4]{1,0} all-reduce(f32[4,4]{1,0} %x), to_apply=%add
  %r.2 = f32[4,4]{1,0} all-reduce(f32[4,4]{1,0} %r), to_apply=%add
}

ENTRY %main (p0: f32[4,4]) -> f32[4,4] {
  %w = (s32[], f32[4,4]) while(%t), condition=%c, body=%unet_step, metadata={op_name="jit(denoise_and_decode)/while"}
  %w.2 = (s32[], f32[4,4]) while(%t2), condition=%c, body=%decode, metadata={op_name="jit(denoise_and_decode)/vae_decode/while"}
}
"""


@pytest.mark.skipif(jax.device_count() < 8, reason=f"needs 8 devices, JAX started with {jax.device_count()}")
def test_the_noise_by_hand_is_the_pipelines_on_8_and_on_1_device(tiny_sdxl, capsys):
    devices = jax.devices()[:8]
    mesh = sh.make_mesh(8, devices=devices)
    pipe = ShardedPipeline.from_pretrained(tiny_sdxl, mesh, dtype=jnp.float32, progress=False)
    batch = 8
    prompts = ["a red circle"] * batch
    _, _, _, latents, _ = pipe.inputs(prompts, None, 2, 5.0, SIZE, SIZE, SEED)
    namespace = {
        "jax": jax,
        "jnp": jnp,
        "np": np,
        "NamedSharding": NamedSharding,
        "P": P,
        "pipe": pipe,
        "mesh": mesh,
        "devices": devices,
        "batch": batch,
        "latents": latents,
        "HEIGHT": SIZE,
        "WIDTH": SIZE,
        "SEED": SEED,
    }
    exec(compile(ex.code_cell(NB02, "def draw_noise(indices)"), "02 noise by hand", "exec"), namespace)
    assert "the same noise, and pipe.inputs' noise: True" in capsys.readouterr().out
    on_all, on_one = namespace["on_all"], namespace["on_one"]
    assert on_all.sharding.spec == P("data") and on_one.sharding.num_devices == 1

    # the same batch on a 1-device mesh: the pipeline's noise there is the cell's too
    one = pipe.to_mesh(sh.make_mesh(1, devices=devices[:1]))
    _, _, _, one_latents, _ = one.inputs(prompts, None, 2, 5.0, SIZE, SIZE, SEED)
    np.testing.assert_array_equal(np.asarray(one_latents), np.asarray(on_one))
    np.testing.assert_array_equal(np.asarray(latents), np.asarray(on_all))

    # and the cell's function is the helper's for any global indices
    later = jnp.arange(13, 17)
    np.testing.assert_array_equal(
        namespace["draw_noise"](later), initial_noise(SEED, later, namespace["latent_shape"])
    )


def test_the_megatron_count_is_one_all_reduce_per_pair_of_the_unets_layers(tiny_sdxl, capsys):
    """The cell that counts a Megatron-style layout from describe_unet's rows: one all-reduce per
    ResNet (its conv1) and three per transformer layer (its self-attention, cross-attention and
    feed-forward), as the UNet's own parameters count them."""
    from sdaccel.tpu.pipeline import JaxPipeline

    pipeline = JaxPipeline.from_pretrained(tiny_sdxl, dtype="float32", progress=False)
    flat = jax.tree_util.tree_flatten_with_path(pipeline.params["unet"])[0]
    paths = [sh.path_string(path) for path, _ in flat]
    resnets = sum(p.endswith("conv1/kernel") for p in paths)
    layers = sum(p.endswith("attn2/to_q/kernel") for p in paths)
    namespace = {
        "jnp": jnp,
        "sh": sh,
        "model_mesh": sh.make_mesh(model=2) if jax.device_count() >= 2 else None,
        "mp": type("Sharded", (), {"pipeline": pipeline})(),
        "batch": 8,
        "GUIDANCE_SCALE": 5.0,
        "latent": (8, 8, 4),
        "DTYPE": "float32",
        "MODEL_AXIS": 2,
        "tpu_topology": tpu_topology,
        "program_text": ONE_LOOP_HLO,
        "results": {},
    }
    if namespace["model_mesh"] is None:
        pytest.skip("needs 2 devices")
    exec(compile(ex.code_cell(NB02, "Megatron-style"), "02 Megatron", "exec"), namespace)
    assert namespace["pairs"] == resnets + 3 * layers > 0
    # a ring all-reduce over 2 devices sends 2 (n - 1) / n = 1 time the activations it sums
    assert namespace["sent"] == namespace["payload"] > 0
    # beside it, one trip of the program's denoising loop (not the VAE's)
    assert namespace["per_pass"] == {"all-reduce": 1, "all-to-all": 1}
    assert "Megatron-style: " in capsys.readouterr().out
