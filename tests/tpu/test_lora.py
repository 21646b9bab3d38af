"""LoRA adapters (sdaccel.tpu.lora): fusing into the JAX pipeline, parity with diffusers'
``load_lora_weights`` + ``fuse_lora``, unfusing, and the errors; the fused export for OpenVINO and
GenAI's runtime adapters against it. Reading and writing the files is tests/core/test_lora_files.py.

The adapters are made here with peft on the trained tiny checkpoints (random, non-zero factors
on the UNet's attention, feed-forward, resnet convolutions (3x3 and 1x1), embeddings and
samplers, and on every text encoder's attention and MLP), saved with diffusers'
``save_lora_weights`` (the diffusers/peft layout with peft's config as metadata), and written
again in the kohya layout by :func:`sdaccel.core.lora_files.save_kohya`, also with SDXL's SGM names.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from sdaccel.core import lora_files
from sdaccel.core.checkpoint import torch_key
from sdaccel.tpu import lora
from sdaccel.tpu.pipeline import JaxPipeline, initial_noise

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
peft = pytest.importorskip("peft")

REPO_CHECKPOINTS = {"sdxl": "checkpoints/tiny-shapes-sdxl", "sd15": "checkpoints/tiny-shapes-sd15"}
PIPELINES = {"sdxl": "StableDiffusionXLPipeline", "sd15": "StableDiffusionPipeline"}
SCALE = 0.7
SIZE, PROMPTS = 64, ["a red circle on a blue background", "a green square"]


def _checkpoint(kind):
    return str(Path(__file__).resolve().parents[2] / REPO_CHECKPOINTS[kind])


def _torch_pipeline(kind):
    return getattr(diffusers, PIPELINES[kind]).from_pretrained(_checkpoint(kind), dtype=torch.float32)


@pytest.fixture(scope="module")
def ours():
    return {
        kind: JaxPipeline.from_pretrained(_checkpoint(kind), dtype=jnp.float32, progress=False)
        for kind in PIPELINES
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory, ours, peft_lora):
    """kind -> {"diffusers", "kohya", ("sgm" for SDXL)}: paths; and the peft deltas."""
    out = {}
    for kind in PIPELINES:
        folder = tmp_path_factory.mktemp(f"lora-{kind}")
        path, deltas = peft_lora.make(Path(_checkpoint(kind)), folder)
        resolved = lora_files.read_lora(path).resolve(lora.lora_targets(ours[kind]))
        out[kind] = {"diffusers": path, "deltas": deltas}
        out[kind]["kohya"] = lora_files.save_kohya(
            resolved, folder / "kohya.safetensors", sdxl=kind == "sdxl"
        )
        if kind == "sdxl":
            out[kind]["sgm"] = lora_files.save_kohya(
                resolved,
                folder / "sgm.safetensors",
                sdxl=True,
                unet_modules=lora.lora_targets(ours[kind])["unet"],
            )
    return out


def _kernels(pipe) -> dict[str, np.ndarray]:
    """Every kernel of the UNet and text encoders, by component.module, copied to the host."""
    out = {}
    for component, state in lora._states(pipe).items():
        for path, variable in nnx.to_flat_state(state):
            if str(path[-1]) == "kernel":
                out[f"{component}.{torch_key(path)}"] = np.array(variable.get_value())
    return out


# ----------------------------------------------------------------------------------------------
# Fusing: parity with diffusers
# ----------------------------------------------------------------------------------------------


def _reference_images(kind, lora_path, latents, scale):
    pipe = _torch_pipeline(kind)
    pipe.load_lora_weights(str(lora_path))
    pipe.fuse_lora(lora_scale=scale)
    with torch.no_grad():
        out = pipe(
            prompt=PROMPTS,
            num_inference_steps=3,
            guidance_scale=5.0,
            height=SIZE,
            width=SIZE,
            latents=torch.from_numpy(latents.transpose(0, 3, 1, 2).copy()),
            output_type="np",
        )
    return out.images


def _generate(pipe):
    return pipe.generate(PROMPTS, steps=3, guidance_scale=5.0, height=SIZE, width=SIZE, seed=0).array


@pytest.mark.parametrize(
    ("kind", "layout", "reference"),
    [
        ("sdxl", "diffusers", "diffusers"),
        ("sdxl", "sgm", "sgm"),
        # diffusers reads kohya files with diffusers names all but add_embedding.linear_2 (see
        # test_diffusers_reads_our_kohya_files), so the reference is the same adapter's diffusers file
        ("sdxl", "kohya", "diffusers"),
        ("sd15", "diffusers", "diffusers"),
        ("sd15", "kohya", "kohya"),
    ],
)
def test_fused_images_match_diffusers_and_unfuse_restores(ours, files, kind, layout, reference):
    pipe = ours[kind]
    before = _kernels(pipe)
    base = _generate(pipe)
    latents = np.asarray(initial_noise(0, jnp.arange(len(PROMPTS)), pipe.latent_shape(SIZE, SIZE)))

    lora.fuse_lora(pipe, [(files[kind][layout], SCALE)])
    try:
        assert [scale for _, scale in lora.fused_adapters(pipe)] == [SCALE]
        fused = _generate(pipe)
        ref = _reference_images(kind, files[kind][reference], latents, SCALE)
    finally:
        assert lora.unfuse_lora(pipe) == 1
    # the LoRA changes the pictures, and ours change as diffusers' do (the parity tolerance of
    # tests/tpu/test_pipeline.py: float32 images within 1e-4)
    assert np.abs(fused - base).max() > 0.05
    assert np.abs(fused - ref).max() < 1e-4, f"max abs err {np.abs(fused - ref).max():.2e}"
    # unfusing restores every weight to float32 rounding
    after = _kernels(pipe)
    worst = max(np.abs(after[k] - before[k]).max() / (np.abs(before[k]).max() + 1e-12) for k in before)
    assert worst < 1e-6
    assert lora.fused_adapters(pipe) == []


def _diffusers_deltas(kind, path) -> dict:
    pipe = _torch_pipeline(kind)
    pipe.load_lora_weights(str(path))
    out = {}
    for component in ("unet", "text_encoder", "text_encoder_2")[: 3 if kind == "sdxl" else 2]:
        for name, module in getattr(pipe, component).named_modules():
            if isinstance(module, peft.tuners.lora.LoraLayer):
                with torch.no_grad():
                    out[(component, name)] = module.get_delta_weight(next(iter(module.lora_A))).numpy()
    return out


@pytest.mark.parametrize(("kind", "layout"), [("sdxl", "kohya"), ("sdxl", "sgm"), ("sd15", "kohya")])
def test_diffusers_reads_our_kohya_files(files, kind, layout):
    """diffusers' own kohya converter finds the same deltas in the files we write, module by
    module, except one: it turns SDXL's ``add_embedding.linear_2`` (flattened
    ``add_embedding_linear_2``) into ``add.embedding.linear``, which matches nothing, and drops
    it without an error. Real SDXL kohya files name it ``label_emb_0_2`` (SGM), which it reads."""
    theirs = _diffusers_deltas(kind, files[kind][layout])
    expected = files[kind]["deltas"]
    missing = sorted(key for key in expected if key not in theirs)
    assert missing == ([("unet", "add_embedding.linear_2")] if (kind, layout) == ("sdxl", "kohya") else [])
    for key, delta in theirs.items():
        np.testing.assert_allclose(delta, expected[key], rtol=1e-5, atol=1e-6, err_msg=str(key))


def test_two_adapters_add_up_with_their_scales(ours, files):
    pipe = ours["sdxl"]
    before = _kernels(pipe)
    adapter = lora_files.read_lora(files["sdxl"]["diffusers"])
    module = "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q"
    lora.fuse_lora(pipe, [(adapter, 0.5), (files["sdxl"]["kohya"], -0.25)])
    try:
        fused = _kernels(pipe)
    finally:
        assert lora.unfuse_lora(pipe) == 2
    expected = before[f"unet.{module}.weight"] + adapter.layers["unet"][module].delta(0.25).T
    np.testing.assert_allclose(fused[f"unet.{module}.weight"], expected, rtol=1e-6, atol=1e-7)
    conv = "down_blocks.0.resnets.0.conv1"  # 3x3: (out, in, kh, kw) -> our (kh, kw, in, out)
    expected = before[f"unet.{conv}.weight"] + adapter.layers["unet"][conv].delta(0.25).transpose(2, 3, 1, 0)
    np.testing.assert_allclose(fused[f"unet.{conv}.weight"], expected, rtol=1e-6, atol=1e-7)


def test_round_trip_error_bf16_vs_f32(files):
    """fuse + unfuse at scale 1: float32 comes back to ~1e-7 relative, bfloat16 to about one bf16
    step of the weight (each of the two roundings moves it by at most half a step of |W + delta|)."""
    errors = {}
    for dtype in (jnp.float32, jnp.bfloat16):
        pipe = JaxPipeline.from_pretrained(_checkpoint("sdxl"), dtype=dtype, progress=False)
        before = _kernels(pipe)
        adapter = lora.fuse_lora(pipe, [(files["sdxl"]["diffusers"], 1.0)])[0]
        lora.unfuse_lora(pipe)
        after = _kernels(pipe)
        rel = []
        for component, layers in adapter.layers.items():
            for module, layer in layers.items():
                key = f"{component}.{module}.weight"
                w = before[key].astype(np.float32)
                bound = np.abs(w).max() + np.abs(layer.delta()).max()
                rel.append(np.abs(after[key].astype(np.float32) - w).max() / bound)
        errors[jnp.dtype(dtype).name] = max(rel)
    assert errors["float32"] < 2e-7
    assert 1e-4 < errors["bfloat16"] <= 2**-8  # a real loss, bounded by one bf16 step
    print(f"fuse+unfuse max error relative to |W|+|delta|: {errors}")


# ----------------------------------------------------------------------------------------------
# Errors: nothing is changed
# ----------------------------------------------------------------------------------------------


def _unchanged(pipe, before):
    after = _kernels(pipe)
    assert all(np.array_equal(after[k], before[k]) for k in before)
    assert lora.fused_adapters(pipe) == []


def test_unknown_key_is_named_and_nothing_changes(ours, files, tmp_path):
    from safetensors.numpy import save_file

    from sdaccel.core.checkpoint import WeightFile

    source = WeightFile(files["sdxl"]["diffusers"])
    tensors = {k: np.array(source.get(k)) for k in source.keys()}
    tensors["unet.down_blocks.0.attentions.7.proj_in.lora_A.weight"] = np.ones((4, 32), np.float32)
    tensors["unet.down_blocks.0.attentions.7.proj_in.lora_B.weight"] = np.ones((32, 4), np.float32)
    save_file(tensors, str(tmp_path / "extra.safetensors"))
    pipe = ours["sdxl"]
    before = _kernels(pipe)
    with pytest.raises(
        lora_files.LoraError, match=r"down_blocks\.0\.attentions\.7\.proj_in matches no module"
    ):
        lora.fuse_lora(pipe, [(files["sdxl"]["diffusers"], 1.0), (tmp_path / "extra.safetensors", 1.0)])
    _unchanged(pipe, before)


def test_adapter_for_another_base_model_is_refused(ours, files):
    sdxl, sd15 = ours["sdxl"], ours["sd15"]
    before = _kernels(sdxl)
    for layout in ("diffusers", "kohya"):
        with pytest.raises(lora_files.LoraError, match="made for another base model"):
            lora.fuse_lora(sdxl, [(files["sd15"][layout], 1.0)])
    _unchanged(sdxl, before)
    before = _kernels(sd15)
    with pytest.raises(lora_files.LoraError, match="no text_encoder_2.*another base model"):
        lora.fuse_lora(sd15, [(files["sdxl"]["diffusers"], 1.0)])
    _unchanged(sd15, before)


def test_shape_mismatch_is_refused(ours, tmp_path):
    from safetensors.numpy import save_file

    module = "unet.mid_block.attentions.0.proj_in"
    save_file(
        {
            f"{module}.lora_A.weight": np.ones((2, 48), np.float32),
            f"{module}.lora_B.weight": np.ones((64, 2), np.float32),
        },
        str(tmp_path / "wide.safetensors"),
    )
    with pytest.raises(
        lora_files.LoraError,
        match=r"proj_in: the adapter updates a \(64, 48\) weight, the model's is \(64, 64\)",
    ):
        lora.fuse_lora(ours["sdxl"], [(tmp_path / "wide.safetensors", 1.0)])


def test_bad_inputs(ours, files):
    pipe = ours["sdxl"]
    with pytest.raises(lora_files.LoraError, match="finite number"):
        lora.fuse_lora(pipe, [(files["sdxl"]["diffusers"], float("nan"))])
    with pytest.raises(lora_files.LoraError, match="pairs"):
        lora.fuse_lora(pipe, files["sdxl"]["diffusers"])
    assert lora.fused_adapters(pipe) == []


# ----------------------------------------------------------------------------------------------
# OpenVINO: fused before the conversion
# ----------------------------------------------------------------------------------------------


def _diffusers_fused(kind, path, scale):
    pipe = _torch_pipeline(kind)
    pipe.load_lora_weights(str(path))
    pipe.fuse_lora(lora_scale=scale)
    return pipe


def _plain_weights(model) -> dict[str, np.ndarray]:
    """A module's weights without peft's wrappers: ``x.base_layer.weight`` -> ``x.weight``."""
    return {
        name.replace(".base_layer.", "."): param.detach().numpy().copy()
        for name, param in model.named_parameters()
        if "lora_" not in name
    }


@pytest.mark.parametrize("layout", ["diffusers", "sgm"])
def test_fuse_into_torch_matches_diffusers_fuse_lora(files, layout):
    from sdaccel.cpu.convert import load_torch_component
    from sdaccel.cpu.lora_export import check_lora, fuse_into_torch

    src = _checkpoint("sdxl")
    adapters = check_lora(src, [(files["sdxl"][layout], SCALE)])
    reference = _diffusers_fused("sdxl", files["sdxl"]["diffusers"], SCALE)

    for component in ("unet", "text_encoder", "text_encoder_2"):
        model = load_torch_component(Path(src), component)
        base = _plain_weights(model)
        changed = fuse_into_torch(model, component, adapters)
        assert changed == len(adapters[0][0].layers[component]) > 0
        ours, theirs = _plain_weights(model), _plain_weights(getattr(reference, component))
        assert sorted(ours) == sorted(theirs)
        moved = [k for k in ours if not np.array_equal(ours[k], base[k])]
        assert len(moved) == changed
        for key in ours:
            np.testing.assert_allclose(
                ours[key], theirs[key], rtol=1e-6, atol=1e-6, err_msg=f"{component}.{key}"
            )


def test_openvino_unet_with_fused_lora_matches_diffusers(files):

    import openvino as ov

    from sdaccel.cpu.convert import convert_unet, load_torch_component, unet_example
    from sdaccel.cpu.lora_export import check_lora, fuse_into_torch

    src = Path(_checkpoint("sdxl"))
    unet = load_torch_component(src, "unet")
    fuse_into_torch(unet, "unet", check_lora(src, [(files["sdxl"]["kohya"], SCALE)]))
    compiled = ov.Core().compile_model(convert_unet(unet), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    torch.manual_seed(1)
    example, _ = unet_example(unet.config, 8)
    got = compiled({k: v.numpy() for k, v in example.items()})[0]
    reference = _diffusers_fused("sdxl", files["sdxl"]["diffusers"], SCALE).unet
    base = load_torch_component(src, "unet")
    with torch.no_grad():
        added = {"text_embeds": example["text_embeds"], "time_ids": example["time_ids"]}
        args = (example["sample"], example["timestep"], example["encoder_hidden_states"])
        want = reference(*args, added_cond_kwargs=added).sample.numpy()
        plain = base(*args, added_cond_kwargs=added).sample.numpy()
    assert np.abs(want - plain).max() > 10 * np.abs(got - want).max()  # the LoRA moves the output
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_check_lora_refuses_before_export(files):
    from sdaccel.cpu.lora_export import check_lora

    with pytest.raises(lora_files.LoraError, match="made for another base model"):
        check_lora(_checkpoint("sdxl"), [(files["sd15"]["kohya"], 1.0)])
    with pytest.raises(lora_files.LoraError, match="no text_encoder_2"):
        check_lora(_checkpoint("sd15"), [(files["sdxl"]["diffusers"], 1.0)])
    with pytest.raises(lora_files.LoraError, match="pairs"):
        check_lora(_checkpoint("sd15"), files["sd15"]["diffusers"])


# ----------------------------------------------------------------------------------------------
# OpenVINO GenAI: runtime adapters on an export, against the fused export
# ----------------------------------------------------------------------------------------------


def test_genai_runtime_adapter_matches_the_fused_export(files, tmp_path):
    """GenAI applies the attention and feed-forward LoRA layers at run time (no recompilation of
    the IR), and its images equal those of an export with the same layers fused (8-bit images
    within 2 levels); what it cannot apply is listed, for the fused export."""
    import shutil

    import openvino_genai as og

    from sdaccel.cpu.convert import convert_unet, load_torch_component
    from sdaccel.cpu.export import MODEL_XML, export_pipeline, text_to_image_components
    from sdaccel.cpu.ir_files import save_ir
    from sdaccel.cpu.lora_export import check_lora, checkpoint_targets, fuse_into_torch, save_genai_adapter

    src = Path(_checkpoint("sd15"))
    ((adapter, _),) = check_lora(src, [(files["sd15"]["diffusers"], 1.0)])
    genai_file, dropped = save_genai_adapter(adapter, tmp_path / "genai.safetensors", sdxl=False)
    kept = lora_files.read_lora(genai_file).resolve(checkpoint_targets(src))
    assert len(kept) + len(dropped) == len(adapter) and len(kept) > 10
    assert any(".conv1" in name for name in dropped) and any(
        name.startswith("text_encoder.") for name in dropped
    )

    base = export_pipeline(src, tmp_path / "base", components=text_to_image_components(src), progress=False)
    fused = tmp_path / "fused"
    shutil.copytree(base, fused)
    unet = load_torch_component(src, "unet")
    fuse_into_torch(unet, "unet", [(kept, SCALE)])
    save_ir(convert_unet(unet), fused / "unet" / MODEL_XML, compress_to_fp16=False)

    options = {"INFERENCE_PRECISION_HINT": "f32"}
    kwargs = {"width": SIZE, "height": SIZE, "num_inference_steps": 3, "rng_seed": 1}
    config = og.AdapterConfig()
    config.add(og.Adapter(str(genai_file)), SCALE)
    runtime = og.Text2ImagePipeline(str(base), "CPU", adapters=config, **options)
    with_adapter = runtime.generate(PROMPTS[0], **kwargs).data.astype(np.int16)
    without = (
        og.Text2ImagePipeline(str(base), "CPU", **options)
        .generate(PROMPTS[0], **kwargs)
        .data.astype(np.int16)
    )
    reference = (
        og.Text2ImagePipeline(str(fused), "CPU", **options)
        .generate(PROMPTS[0], **kwargs)
        .data.astype(np.int16)
    )
    assert np.abs(reference - without).max() > 20  # the adapter changes the picture
    assert np.abs(with_adapter - reference).max() <= 2


def test_fuse_keeps_the_shardings_of_a_sharded_pipeline(ours, files):
    """On a 4x2 mesh with weights split over the "model" axis, fusing keeps every weight where
    it was (the compiled programs take the shardings as given) and gives the unsharded values."""
    from sdaccel.tpu.sharded_pipeline import ShardedPipeline
    from sdaccel.tpu.sharding import make_mesh

    sharded = ShardedPipeline.from_pretrained(
        _checkpoint("sdxl"), mesh=make_mesh(4, 2), dtype=jnp.float32, min_shard_size=0, progress=False
    )
    shardings = jax.tree.map(lambda x: x.sharding, sharded.pipeline.params["unet"])
    assert any(len(s.device_set) == 8 and not s.is_fully_replicated for s in jax.tree.leaves(shardings))
    lora.fuse_lora(sharded, [(files["sdxl"]["sgm"], SCALE)])
    lora.fuse_lora(ours["sdxl"], [(files["sdxl"]["diffusers"], SCALE)])
    try:
        assert jax.tree.map(lambda x: x.sharding, sharded.pipeline.params["unet"]) == shardings
        got, want = _kernels(sharded), _kernels(ours["sdxl"])
    finally:
        lora.unfuse_lora(ours["sdxl"])
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-7, err_msg=key)
    assert lora.unfuse_lora(sharded) == 1 and lora.fused_adapters(sharded) == []


def test_lora_settings_record_files_and_scales(files):
    from sdaccel.cpu.lora_export import check_lora, lora_settings

    assert lora_settings([]) is None
    (record,) = lora_settings(check_lora(_checkpoint("sd15"), [(files["sd15"]["kohya"], 0.5)]))
    assert record["file"] == str(files["sd15"]["kohya"].resolve()) and record["scale"] == 0.5
    assert record["size"] == files["sd15"]["kohya"].stat().st_size
