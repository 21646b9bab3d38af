"""The tiny autoencoder (TAESD): our Flax NNX port against diffusers' AutoencoderTiny, its OpenVINO
export, and how the pipelines choose it (``vae="tiny"`` or a folder)."""

import json
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

diffusers = pytest.importorskip("diffusers")

from sdaccel.core.checkpoint import CheckpointError, resolve_tiny_vae, torch_key  # noqa: E402
from sdaccel.tpu.models.taesd import (  # noqa: E402
    AutoencoderTiny,
    TinyVAEConfig,
    load_tiny_vae,
    save_random_tiny_vae,
)
from sdaccel.tpu.models.weights import abstract_model, count_params  # noqa: E402

# Shrunk TAESD: same structure, three levels (4x, the scale of the tiny shapes checkpoints),
# different widths for encoder and decoder, SiLU instead of ReLU.
SMALL = dict(
    encoder_block_out_channels=[16, 16, 16],
    decoder_block_out_channels=[12, 12, 12],
    num_encoder_blocks=[1, 2, 1],
    num_decoder_blocks=[2, 1, 1],
    act_fn="silu",
)
# Differs in every other field: channels in/out/latent, two levels, mish.
OTHER = dict(
    in_channels=4,
    out_channels=2,
    latent_channels=3,
    encoder_block_out_channels=[8, 8],
    decoder_block_out_channels=[10, 10],
    num_encoder_blocks=[2, 1],
    num_decoder_blocks=[1, 2],
    act_fn="mish",
)
# name -> (config, batch, height, width); OTHER uses a non-square image.
CASES = {"small": (SMALL, 2, 32, 32), "other": (OTHER, 1, 12, 20)}


def build_torch(config: dict):
    torch.manual_seed(0)
    model = diffusers.AutoencoderTiny(**config).eval()
    with torch.no_grad():  # default init keeps activations tiny after ~20 convs: scale them up
        for p in model.parameters():
            p.mul_(1.5).add_(torch.randn_like(p) * 0.02)
    return model


def nchw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def nhwc(t: torch.Tensor) -> np.ndarray:
    return t.numpy().transpose(0, 2, 3, 1)


def torch_outputs(model, images: np.ndarray, latents: np.ndarray) -> dict:
    with torch.no_grad():
        encoded = model.encode(nchw(images)).latents
        decoded = model.decode(nchw(latents)).sample
    return {"encoded": nhwc(encoded), "decoded": nhwc(decoded)}


@nnx.jit
def run(model, images, latents):
    return {"encoded": model.encode(images), "decoded": model.decode(latents)}


def inputs(config: dict, batch: int, height: int, width: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    factor = 2 ** (len(config["num_decoder_blocks"]) - 1)
    images = rng.uniform(-1, 1, (batch, height, width, config.get("in_channels", 3))).astype(np.float32)
    # latents beyond the +-3 soft clamp, so that the clamp is exercised
    shape = (batch, height // factor, width // factor, config.get("latent_channels", 4))
    latents = (rng.standard_normal(shape) * 2.5).astype(np.float32)
    return images, latents


def max_errors(ours: dict, ref: dict) -> dict:
    out = {}
    for name, expected in ref.items():
        got = np.asarray(ours[name], np.float32)
        assert got.shape == expected.shape, (name, got.shape, expected.shape)
        out[name] = float(np.abs(got - expected).max())
    return out


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    config, batch, height, width = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param) / "vae"
    model = build_torch(config)
    model.save_pretrained(folder)
    images, latents = inputs(config, batch, height, width)
    ref = torch_outputs(model, images, latents)
    return config, folder, images, latents, ref


def test_config(case):
    config, folder, *_ = case
    ours = TinyVAEConfig.from_pretrained(folder)
    for key, value in config.items():
        assert getattr(ours, key) == (tuple(value) if isinstance(value, list) else value), key
    assert ours.block_out_channels == tuple(config["decoder_block_out_channels"])
    assert ours.scale_factor == 2 ** (len(config["num_decoder_blocks"]) - 1)
    assert (ours.scaling_factor, ours.latents_mean, ours.latents_std) == (1.0, None, None)


def test_parity_fp32(case):
    _, folder, images, latents, ref = case
    assert np.abs(ref["decoded"]).max() > 0.5  # the reference is not near zero everywhere
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unused tensor in the file would warn
        model = load_tiny_vae(folder, progress=False)
    errors = max_errors(run(model, jnp.asarray(images), jnp.asarray(latents)), ref)
    assert all(e < 1e-4 for e in errors.values()), errors


def test_parity_bf16(case):
    # bf16 keeps 8 bits of mantissa (a step of 8e-3 at 1-2); through ~20 convs the errors grow to a
    # few 1e-2, like the AutoencoderKL's in tests/tpu/models/test_vae.py. Bugs show at 1e-4 in the fp32 test.
    _, folder, images, latents, ref = case
    model = load_tiny_vae(folder, dtype=jnp.bfloat16, progress=False)
    assert model.dtype == jnp.bfloat16
    out = run(model, jnp.asarray(images), jnp.asarray(latents))
    assert out["decoded"].dtype == jnp.bfloat16
    errors = max_errors(out, ref)
    assert all(e < 0.2 for e in errors.values()), errors


def test_decode_images_per_step(case):
    """A batch decoded one image at a time (as the pipelines do) gives the batch's images."""
    _, folder, _, latents, ref = case
    model = load_tiny_vae(folder, progress=False)
    model.decode_images_per_step = 1
    out = nnx.jit(lambda m, z: m.decode(z))(model, jnp.asarray(latents))
    assert max_errors({"decoded": out}, {"decoded": ref["decoded"]})["decoded"] < 1e-4
    with pytest.raises(ValueError, match="must divide the batch"):
        model.decode(jnp.asarray(latents), images_per_step=3)


def test_real_taesd_config(tmp_path):
    """diffusers' default AutoencoderTiny() is TAESD's architecture (1.2 M parameters per half)."""
    torch.manual_seed(1)
    model = diffusers.AutoencoderTiny().eval()
    model.save_pretrained(tmp_path / "vae")
    config = TinyVAEConfig.from_pretrained(tmp_path / "vae")
    assert config == TinyVAEConfig()
    assert config.scale_factor == 8
    ours = load_tiny_vae(tmp_path / "vae", progress=False)
    n, _ = count_params(ours)
    assert n == sum(p.numel() for p in model.parameters())
    images, latents = inputs({"num_decoder_blocks": [3, 3, 3, 1]}, 1, 64, 64, seed=2)
    ref = torch_outputs(model, images, latents)
    assert ref["decoded"].shape == (1, 64, 64, 3)
    errors = max_errors(run(ours, jnp.asarray(images), jnp.asarray(latents)), ref)
    assert all(e < 1e-4 for e in errors.values()), errors


def test_random_builder_loads_in_diffusers(tmp_path):
    """save_random_tiny_vae writes exactly diffusers' keys, shapes and config, and both load it
    to the same model."""
    folder = save_random_tiny_vae(tmp_path / "vae", seed=3, **SMALL)
    model, info = diffusers.AutoencoderTiny.from_pretrained(folder, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched key
    images, latents = inputs(SMALL, 1, 16, 24, seed=4)
    ref = torch_outputs(model.eval(), images, latents)
    errors = max_errors(run(load_tiny_vae(folder, progress=False), images, latents), ref)
    assert all(e < 1e-4 for e in errors.values()), errors
    assert json.loads((folder / "config.json").read_text())["block_out_channels"] == [12, 12, 12]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"decoder_block_out_channels": [16, 32, 32]}, "one width"),
        ({"num_decoder_blocks": [1, 1]}, "one entry per level"),
        ({"upsample_fn": "bilinear"}, "nearest 2x"),
        ({"act_fn": "tanh"}, "Unsupported act_fn"),
        ({"_class_name": "AutoencoderKL"}, "not an AutoencoderTiny"),
    ],
)
def test_config_errors(change, message):
    with pytest.raises((ValueError, CheckpointError), match=message):
        TinyVAEConfig.from_dict(SMALL | change)


def test_module_paths_are_torch_keys():
    """Spot-check the naming: a conv inside a block, and the bias-free conv after an upsampling."""
    model = abstract_model(AutoencoderTiny, TinyVAEConfig.from_dict(SMALL))
    keys = {torch_key(p) for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert "decoder.layers.2.conv.4.weight" in keys  # layers: conv, act, block, block, upsample, conv
    assert "decoder.layers.5.weight" in keys and "decoder.layers.5.bias" not in keys
    assert "encoder.layers.2.weight" in keys and "encoder.layers.2.bias" not in keys  # stride-2 conv


# ----------------------------------------------------------------------------------------------
# The whole pipelines with a tiny decoder, on the tiny random SD 1.5 checkpoint (8x, 4 channels)
# ----------------------------------------------------------------------------------------------

# TAESD's layout (four levels, 8x) at a width of 8 and one block per level.
TAESD_LIKE = dict(
    encoder_block_out_channels=[8] * 4,
    decoder_block_out_channels=[8] * 4,
    num_encoder_blocks=[1] * 4,
    num_decoder_blocks=[1] * 4,
)
PROMPT = "a red cat on a blue mountain"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A random TAESD-shaped AutoencoderTiny (diffusers' own save) for the SD 1.5 checkpoint."""
    folder = tmp_path_factory.mktemp("taesd") / "vae"
    build_torch(TAESD_LIKE).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_torch(tiny_folder):
    return diffusers.AutoencoderTiny.from_pretrained(tiny_folder).eval()


def sd15_latents(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 8, 8, 4)).astype(np.float32)


def diffusers_sd15(tiny_sd15, tiny_torch):
    """diffusers' pipeline with ``pipe.vae`` swapped for the tiny autoencoder: the reference."""
    ref = diffusers.StableDiffusionPipeline.from_pretrained(
        tiny_sd15, dtype=torch.float32, safety_checker=None, requires_safety_checker=False
    )
    ref.scheduler = diffusers.DDIMScheduler.from_config(ref.scheduler.config)
    ref.vae = tiny_torch
    ref.set_progress_bar_config(disable=True)
    return ref


def offline_hub(monkeypatch, folders: dict):
    """``snapshot_download`` without a network: the hub ids in ``folders`` are found (as in the
    cache), any other fails as the real one does offline."""
    import huggingface_hub

    asked = []

    def snapshot_download(repo_id, **kwargs):
        asked.append((repo_id, kwargs["allow_patterns"]))
        if repo_id in folders:
            return str(folders[repo_id])
        raise OSError("the hub is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return asked


def test_jax_pipeline_with_tiny_vae_matches_diffusers(tiny_sd15, tiny_folder, tiny_torch, monkeypatch):
    """``vae="tiny"`` swaps the VAE module: JaxPipeline reads the scaling (1.0) and the scale factor
    from the VAE it is given, and gives the images diffusers gives with ``pipe.vae = AutoencoderTiny``."""
    from sdaccel.tpu.pipeline import JaxPipeline

    base = JaxPipeline.from_pretrained(tiny_sd15, dtype=jnp.float32, scheduler="ddim", progress=False)
    asked = offline_hub(monkeypatch, {"madebyollin/taesd": tiny_folder.parent})
    pipe = JaxPipeline.from_pretrained(
        tiny_sd15, dtype=jnp.float32, scheduler="ddim", progress=False, vae="tiny"
    )
    assert [repo for repo, _ in asked] == ["madebyollin/taesd"]
    assert isinstance(pipe.vae, AutoencoderTiny)
    assert pipe.vae_scale_factor == 8 and pipe.vae_config.scaling_factor == 1.0
    latents = sd15_latents()
    ours = pipe.generate(PROMPT, steps=3, guidance_scale=7.5, height=64, width=64, latents=latents)
    own = base.generate(PROMPT, steps=3, guidance_scale=7.5, height=64, width=64, latents=latents)
    with torch.no_grad():
        ref = diffusers_sd15(tiny_sd15, tiny_torch)(
            PROMPT,
            num_inference_steps=3,
            guidance_scale=7.5,
            height=64,
            width=64,
            latents=torch.from_numpy(latents.transpose(0, 3, 1, 2).copy()),
            output_type="np",
        ).images
    error = np.abs(ours.array - ref).max()
    assert error < 1e-4, error
    assert np.abs(own.array - ref).max() > 0.05  # the checkpoint's own VAE gives another image


# ----------------------------------------------------------------------------------------------
# Which autoencoder: resolve_tiny_vae
# ----------------------------------------------------------------------------------------------


def test_resolve_folder(tiny_sd15, tiny_folder):
    assert resolve_tiny_vae(tiny_sd15, None) is None
    assert resolve_tiny_vae(tiny_sd15, tiny_folder) == tiny_folder
    assert resolve_tiny_vae(tiny_sd15, str(tiny_folder.parent)) == tiny_folder  # a vae/ inside


@pytest.mark.parametrize("checkpoint, repo", [("sd15", "madebyollin/taesd"), ("sdxl", "madebyollin/taesdxl")])
def test_resolve_tiny_picks_the_model_and_fails_clearly_offline(
    checkpoint, repo, tiny_sd15, tiny_sdxl, monkeypatch
):
    asked = offline_hub(monkeypatch, {})
    folder = {"sd15": tiny_sd15, "sdxl": tiny_sdxl}[checkpoint]
    with pytest.raises(
        CheckpointError, match=f"Could not download the tiny autoencoder '{repo}'.*local folder"
    ):
        resolve_tiny_vae(folder, "tiny")
    assert asked == [(repo, ["config.json", "diffusion_pytorch_model.safetensors"])]


def test_resolve_errors(tiny_sd15, tmp_path):
    with pytest.raises(CheckpointError, match="holds no AutoencoderTiny"):
        resolve_tiny_vae(tiny_sd15, tiny_sd15)  # a folder with an AutoencoderKL in vae/
    with pytest.raises(CheckpointError, match="neither None, 'tiny', an existing folder"):
        resolve_tiny_vae(tiny_sd15, "./no/such/folder")
    small = save_random_tiny_vae(tmp_path / "small", **SMALL)  # 4x, the checkpoint is 8x
    with pytest.raises(CheckpointError, match="4-channel latents 4x smaller.*8x smaller"):
        resolve_tiny_vae(tiny_sd15, small)


# ----------------------------------------------------------------------------------------------
# OpenVINO: the tiny decoder as a vae_decoder
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sd15_export(tmp_path_factory, tiny_sd15):
    from sdaccel.cpu.export import export_pipeline, text_to_image_components

    out = tmp_path_factory.mktemp("ov") / "tiny-sd15"
    return export_pipeline(tiny_sd15, out, components=text_to_image_components(tiny_sd15), progress=False)


def test_ov_tiny_decoder_matches_diffusers(sd15_export, tiny_folder, tiny_torch):
    import openvino as ov

    from sdaccel.cpu.tiny_vae import RECORD, export_tiny_decoder

    out = export_tiny_decoder(sd15_export, tiny_folder)
    assert out == sd15_export / "vae_decoder_tiny"
    assert json.loads((out / "config.json").read_text())["scaling_factor"] == 1.0
    model = ov.Core().read_model(out / "openvino_model.xml")
    assert [p.get_any_name() for p in model.inputs] == ["latent_sample"]
    assert [p.get_any_name() for p in model.outputs] == ["sample"]
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    latents = np.random.default_rng(5).standard_normal((2, 4, 6, 10)).astype(np.float32) * 2.5
    ours = compiled({"latent_sample": latents})["sample"]
    with torch.no_grad():
        ref = tiny_torch.decode(torch.from_numpy(latents)).sample.numpy()
    assert ours.shape == ref.shape == (2, 3, 48, 80)
    assert np.abs(ours - ref).max() < 1e-4
    stamp = (out / RECORD).stat().st_mtime_ns
    assert export_tiny_decoder(sd15_export, tiny_folder) == out and (out / RECORD).stat().st_mtime_ns == stamp
    export_tiny_decoder(sd15_export, tiny_folder, force=True)
    assert (out / RECORD).stat().st_mtime_ns != stamp


def test_ov_and_genai_pipelines_with_tiny_decoder(sd15_export, tiny_folder, tiny_sd15, tiny_torch):
    """``vae=<folder>`` loads the export folder of with_tiny_decoder, whose vae_decoder is TAESD:
    OVPipeline decodes as diffusers with ``pipe.vae = AutoencoderTiny``, and GenAI agrees."""
    from sdaccel.cpu.pipeline import OVPipeline

    own = (sd15_export / "vae_decoder" / "openvino_model.bin").read_bytes()
    pipe = OVPipeline.from_pretrained(sd15_export, precision="f32", vae=tiny_folder)
    assert pipe.folder == sd15_export.with_name("tiny-sd15-vae_decoder_tiny")
    assert pipe.vae_config["scaling_factor"] == 1.0 and pipe.vae_scale_factor == 8
    latents = np.random.default_rng(6).standard_normal((1, 4, 8, 8)).astype(np.float32)
    with torch.no_grad():
        ref = tiny_torch.decode(torch.from_numpy(latents)).sample.numpy()
    expected = np.clip(ref / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)
    assert np.abs(pipe.decode(latents) - expected).max() < 1e-4

    result = pipe(PROMPT, steps=3, seed=7, height=64, width=64)
    base = OVPipeline.from_pretrained(sd15_export, precision="f32")(
        PROMPT, steps=3, seed=7, height=64, width=64
    )
    assert np.abs(result.array - base.array).max() > 0.05  # another decoder, another image
    assert (sd15_export / "vae_decoder" / "openvino_model.bin").read_bytes() == own  # export untouched

    pytest.importorskip("openvino_genai")
    from sdaccel.cpu.genai import GenAIPipeline

    genai = GenAIPipeline(sd15_export, precision="f32", vae=tiny_folder)(
        PROMPT, steps=3, seed=7, height=64, width=64
    )
    # GenAI truncates to 8 bits where OVPipeline rounds, plus f32 rounding: 2/255
    assert np.abs(genai.array - result.array).max() <= 2 / 255 + 1e-6


def test_ov_errors_before_writing(sd15_export, tiny_sd15, tmp_path):
    from sdaccel.cpu.tiny_vae import export_tiny_decoder

    small = save_random_tiny_vae(tmp_path / "small", **SMALL)
    before = sorted(p.name for p in sd15_export.iterdir())
    with pytest.raises(
        CheckpointError, match="4x smaller than the image, but .*tiny-sd15 makes 4-channel latents 8x"
    ):
        export_tiny_decoder(sd15_export, small, name="other")
    with pytest.raises(CheckpointError, match="not an AutoencoderTiny"):
        export_tiny_decoder(sd15_export, tiny_sd15 / "vae", name="other")
    with pytest.raises(CheckpointError, match="is not an OpenVINO export"):
        export_tiny_decoder(tiny_sd15, small, name="other")
    with pytest.raises(ValueError, match="replace the export's own decoder"):
        export_tiny_decoder(sd15_export, small, name="vae_decoder")
    assert sorted(p.name for p in sd15_export.iterdir()) == before


def test_scale_factor_of_a_tiny_autoencoder_config(tmp_path):
    """TAESD's own config.json names its levels ``decoder_block_out_channels`` only."""
    import json

    from sdaccel.cpu.export import vae_scale_factor_of

    (tmp_path / "vae_decoder").mkdir()
    config = {"_class_name": "AutoencoderTiny", "decoder_block_out_channels": [64, 64, 64, 64]}
    (tmp_path / "vae_decoder" / "config.json").write_text(json.dumps(config))
    assert vae_scale_factor_of(tmp_path) == 8
    config["block_out_channels"] = [16, 32, 64]  # where both are present, the VAE's own key wins
    (tmp_path / "vae_decoder" / "config.json").write_text(json.dumps(config))
    assert vae_scale_factor_of(tmp_path) == 4
