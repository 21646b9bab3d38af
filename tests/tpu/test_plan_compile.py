"""The whole pipeline compiled for a TPU v5e 2x2 slice here, with no TPU (libtpu's compiler and
compile-only devices): it compiles, the Pallas splash kernels are in the program, a data-only mesh
communicates nothing, a ``"model"`` axis does, and each chip holds the weights the rules give it.

Uses :func:`sdaccel.tpu.plan_compile.compile_case` on ``--config tiny`` (SDXL's layout, tiny): each
compile takes about a minute of one core; the two programs are compiled once for the module.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from sdaccel.tools.measure import tpu_plan_table
from sdaccel.tpu import plan_compile, plan_files, sharding
from sdaccel.tpu import topology as tpu_topology
from sdaccel.tpu.models import attention

# what this module compiles for compile-only TPU devices cannot be read back from JAX's cache
pytestmark = pytest.mark.usefixtures("without_compilation_cache")

# The tiny plan's case, as tests/tpu/conftest.py compiles it once for both plan test files (tiny_plans):
# small enough that the tiny config's 128x128 kernels are split over "model" (the real rules'
# threshold, 2**20 elements, leaves every tiny weight replicated).
MIN_SHARD = 2**14
HEIGHT, WIDTH, STEPS = 32, 16, 2  # latents 16x8: 128-token self-attention in the UNet and the VAE


def case(mesh: str, attention_impl: str = "splash") -> plan_compile.Case:
    return plan_compile.Case("v5e-4", mesh, attention_impl, 1, HEIGHT, WIDTH, STEPS, min_shard_size=MIN_SHARD)


@pytest.fixture(scope="module")
def compiled(tiny_plans):
    """{mesh: (row, compiled)} for the data-only mesh (4) and data x model (2x2), splash attention
    (compiled once for both plan test files: tests/tpu/conftest.py)."""
    return {mesh: tiny_plans(mesh) for mesh in ("auto", "2x2")}


def expected_splash_flops(global_batch: int) -> float:
    """By hand: 3 UNet self-attentions at level 0 (1 down + 2 up layers; 16x8 = 128 tokens, 2 heads
    of 64) on the guidance batch, and the VAE's one (128 tokens, 1 head of 128) on the batch."""
    unet = 3 * attention.attention_flops(2 * global_batch, 128, 128, 2, 64)
    vae = attention.attention_flops(global_batch, 128, 128, 1, 128)
    return unet + vae


def per_chip_argument_bytes(mesh_spec: str) -> int:
    """What the rules place on one chip: every argument's shard, summed."""
    mesh = plan_compile.mesh_for("v5e-4", mesh_spec)
    pipe = plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "splash", mesh=mesh)
    data = sharding.axis_size(mesh, sharding.DATA)
    args = plan_compile.program_args(pipe, mesh, data, HEIGHT, WIDTH, STEPS, True, MIN_SHARD)
    return sum(
        math.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(args)
    )


def test_libtpu_leaves_the_cpu_the_default_backend():
    """With libtpu installed and no TPU, a fresh process still runs on the CPU, even without the
    JAX_PLATFORMS=cpu that tests/conftest.py sets (only libtpu's failed probe is logged)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    code = "import jax, libtpu; print(jax.default_backend(), len(jax.devices()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["cpu", "1"]


def test_compile_only_tpu_devices_beside_the_cpu():
    tpu_topology.tpu_devices("v5e-4")
    assert jax.default_backend() == "cpu"
    assert [d.platform for d in tpu_topology.tpu_devices("v5e-4")] == ["tpu"] * 4
    assert tpu_topology.tpu_devices("v5e-4")[0].device_kind == "TPU v5 lite"


def test_data_mesh_compiles_with_splash_and_no_collectives(compiled):
    row, program = compiled["auto"]
    assert row["chips"] == 4 and row["mesh_shape"] == {"data": 4} and row["global_batch"] == 4
    assert row["attention_in_models"] == ["splash"]
    # 3 UNet self-attentions and the VAE's; the 32-token mid-block and the 77-token cross-attention stay XLA.
    assert row["pallas_calls"] == 4
    assert tpu_topology.pallas_calls(program.as_text()) == 4
    assert row["collectives"] == {}
    assert row["flops"]["splash_attention_in_program"] == expected_splash_flops(4)
    assert row["fits"] and row["hbm_bytes"]["peak"] < 2**30


def test_model_axis_communicates_and_halves_the_split_weights(compiled):
    data_row, _ = compiled["auto"]
    model_row, _ = compiled["2x2"]
    assert model_row["mesh_shape"] == {"data": 2, "model": 2}
    assert model_row["pallas_calls"] == 4  # heads split over "model" under shard_map
    kinds = set(model_row["collectives"])
    assert kinds & {"all-reduce", "all-gather", "reduce-scatter"}, model_row["collectives"]

    for row, mesh in ((data_row, "auto"), (model_row, "2x2")):
        expected = per_chip_argument_bytes(mesh)
        # TPU layouts pad small arrays (biases, norms) to tiles: a few percent at most here.
        assert expected <= row["hbm_bytes"]["argument"] <= 1.05 * expected, (mesh, row["hbm_bytes"], expected)
    ratio = model_row["hbm_bytes"]["argument"] / data_row["hbm_bytes"]["argument"]
    assert 0.45 < ratio < 0.6, ratio  # the big kernels halved; biases, norms and inputs replicated


def test_compiled_cost_analysis_counts_flops_on_tpu(compiled):
    """``Lowered.cost_analysis()`` is None for TPU (so ``ShardedPipeline.flops`` must ask the
    compiled program); ``Compiled.cost_analysis()`` counts, per chip."""
    row, program = compiled["auto"]
    per_chip = tpu_topology.flops(program)
    assert per_chip == row["flops"]["program_as_counted_per_chip"]
    mesh = plan_compile.mesh_for("v5e-4", "auto")
    pipe = plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "splash", mesh=mesh)
    args = plan_compile.program_args(pipe, mesh, 4, HEIGHT, WIDTH, STEPS)  # outside the mesh: it makes arrays
    with jax.set_mesh(mesh):
        lowered = jax.jit(pipe.denoise_and_decode).trace(*args).lower()
    assert lowered.cost_analysis() is None  # what ShardedPipeline.flops asked, and a TPU answers
    # The same program lowered for the CPU with XLA attention (all images, the loop body once):
    # the TPU count on 4 chips, plus the kernels' FLOPs it cannot see, is the same work.
    pipe = plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "xla")
    args = plan_compile.program_args(pipe, plan_compile._cpu_mesh(), 4, HEIGHT, WIDTH, STEPS)
    args = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), args)
    on_cpu = jax.jit(pipe.denoise_and_decode).trace(*args).lower(lowering_platforms=("cpu",))
    reference = on_cpu.cost_analysis()["flops"]
    seen = per_chip * 4 + row["flops"]["splash_attention_in_program"]
    # XLA counts the optimised TPU program a little higher than the unoptimised HLO (12% here).
    assert abs(seen - reference) / reference < 0.2, (seen, reference)
    assert row["flops"]["total"] == pytest.approx(seen + (STEPS - 1) * row["flops"]["unet_call"])


def test_xla_attention_has_no_kernel():
    mesh = plan_compile.mesh_for("v5e-4", "auto")
    pipe = plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "xla", mesh=mesh)
    args = plan_compile.program_args(pipe, mesh, 4, HEIGHT, WIDTH, STEPS)
    with jax.set_mesh(mesh):
        traced = jax.jit(pipe.denoise_and_decode).trace(*args)
    assert attention.splash_flops(traced.jaxpr) == 0
    assert "pallas_call" not in str(traced.jaxpr)
    assert attention.implementations(pipe.unet) == {"xla"}


def test_tiny_config_builds_sdxl_layout():
    pipe = plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "splash")
    assert pipe.is_sdxl and pipe.vae_scale_factor == 2
    assert pipe.dtypes["unet"] == jnp.bfloat16 and pipe.dtypes["vae"] == jnp.float32  # force_upcast
    assert attention.implementations(pipe.unet) == {"splash"}
    # the graph definition carries the choice, so a compiled-program cache keyed on it tells them apart
    assert pipe._unet_graphdef != plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "xla")._unet_graphdef


def test_report_and_files(compiled, tmp_path):
    row, _ = compiled["auto"]
    md = tpu_plan_table.markdown([row], "python -m sdaccel.tools.measure.tpu_plan --config tiny")
    assert md.count("\n| v5e-4 | 4 | splash | 1 |") == 1
    assert len(tpu_plan_table.table_row(row)) == len(tpu_plan_table.COLUMNS)
    path = tmp_path / "plan.json"
    plan_files.write_plan_file(path, json.dumps({"rows": [row]}, default=str))
    assert json.loads(path.read_text())["rows"][0]["pallas_calls"] == 4
    assert not list(tmp_path.glob("*.partial"))
    floor = row["flops"]["per_image"] / 197e12
    assert row["floor_s_per_image_per_chip"] == pytest.approx(floor)
    assert row["utilisation_needed"]["goal"] == pytest.approx(floor / 2.05)


@pytest.mark.parametrize("largest", [0, 1, 3, 4, 5, 17, 64])
def test_largest_fitting_batch_search(largest):
    asked = []

    def fits(b):
        asked.append(b)
        return b <= largest

    assert plan_compile.largest_fitting(fits, 4, limit=64) == largest
    assert len(asked) == len(set(asked)) <= 2 * math.log2(64) + 2


def test_unet_call_flops_match_the_layers():
    """One UNet call on the CPU lowering: far more than its self-attention alone, and linear in the batch."""
    one = plan_compile.unet_call_flops("tiny", jnp.bfloat16, 1, HEIGHT, WIDTH)
    two = plan_compile.unet_call_flops("tiny", jnp.bfloat16, 2, HEIGHT, WIDTH)
    assert two == pytest.approx(2 * one, rel=0.01)
    assert one > 3 * attention.attention_flops(2, 128, 128, 2, 64)


def test_nnx_graphdef_keeps_the_choice():
    pipe = plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "splash")
    merged = nnx.merge(pipe._unet_graphdef, pipe.params["unet"])
    assert attention.implementations(merged) == {"splash"}


def test_vae_decode_one_image_per_step_same_images_less_memory():
    """The lever for a batch whose VAE decode does not fit: the same images, the temporaries of one."""
    from sdaccel.tpu.models.vae import AutoencoderKL, VAEConfig

    build = nnx.jit(lambda config: AutoencoderKL(config, rngs=nnx.Rngs(0)), static_argnums=0)
    vae = build(VAEConfig.from_dict(plan_compile._tiny_configs()["vae"]))  # one program, not one per weight
    latents = jax.random.normal(jax.random.key(0), (4, 16, 8, 4))

    @nnx.jit(static_argnums=2)
    def decode(vae, z, per_step):
        return vae.decode(z, images_per_step=per_step)

    whole = decode(vae, latents, None)
    for per_step in (1, 2):
        np.testing.assert_allclose(np.asarray(decode(vae, latents, per_step)), np.asarray(whole), atol=1e-5)
    with pytest.raises(ValueError, match="must divide the batch of 4"):
        vae.decode(latents, images_per_step=3)

    def temp(per_step):
        graphdef, state = nnx.split(vae)
        fn = jax.jit(lambda s, z: nnx.merge(graphdef, s).decode(z, images_per_step=per_step))
        return fn.lower(state, latents).compile().memory_analysis().temp_size_in_bytes

    assert temp(1) < 0.5 * temp(None)


def test_a_program_xla_refuses_is_reported_as_not_fitting():
    """XLA refuses to compile a program whose temporaries exceed the chip's HBM; the plan keeps the
    compiler's figure and the arguments' bytes from their shardings."""
    mesh = plan_compile.mesh_for("v5e-4", "auto")
    pipe = plan_compile.abstract_pipeline("tiny", jnp.bfloat16, "splash", mesh=mesh)
    args = plan_compile.program_args(pipe, mesh, 4, HEIGHT, WIDTH, STEPS)
    error = (
        "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
        "(19.39G) exceeds available HBM (15.75G)."
    )
    mem = plan_compile._refused_memory(args, error)
    assert mem["temp"] == int(19.39 * 2**30)
    assert mem["argument"] == per_chip_argument_bytes("auto")
    assert mem["peak"] == mem["argument"] + mem["temp"] and mem["code"] is None


def test_without_libtpu_the_error_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "libtpu", None)  # import libtpu raises ImportError
    with pytest.raises(tpu_topology.CompilerMissing, match="pip install"):
        tpu_topology.tpu_devices.__wrapped__("v5e-1")


def test_compiling_for_tpu_off_cloud_prints_nothing():
    """libtpu warns on stderr when it cannot ask the cloud metadata server; the notebooks show
    stderr, so ``tpu_devices`` gives it what it would have asked for."""
    code = "from sdaccel.tpu import topology as tpu_topology; print(len(tpu_topology.tpu_devices('v5e-4')))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_")}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4" and out.stderr == ""


def test_configs_of_a_checkpoint_folder_by_absolute_path():
    """An absolute path must not be mistaken for a reference config name."""
    folder = str(Path(__file__).resolve().parents[2] / "checkpoints" / "tiny-shapes-sdxl")
    assert {"unet", "vae", "text_encoder", "text_encoder_2", "scheduler"} <= set(
        plan_compile.read_configs(folder)
    )
