"""Parity of sdaccel.tpu.models.clip with transformers' CLIPTextModel / CLIPTextModelWithProjection.

Each case builds a tiny random transformers model, saves it with ``save_pretrained`` (safetensors),
loads it with ``load_text_encoder`` and compares the three outputs the pipelines use.
"""

import shutil
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from safetensors.numpy import load_file, save_file

transformers = pytest.importorskip("transformers")

from sdaccel.tpu.models.clip import (  # noqa: E402
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTextModelWithProjection,
    load_text_encoder,
)

# SDXL's pair, shrunk: CLIP-L (quick_gelu, no projection) and OpenCLIP bigG (gelu, projection),
# both with the legacy ``eos_token_id: 2`` of the real configs.
SDXL_TE1 = dict(
    architectures=["CLIPTextModel"],
    vocab_size=1000,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    max_position_embeddings=77,
    hidden_act="quick_gelu",
    layer_norm_eps=1e-5,
    projection_dim=32,
    bos_token_id=0,
    eos_token_id=2,
    pad_token_id=1,
)
SDXL_TE2 = {
    **SDXL_TE1,
    "architectures": ["CLIPTextModelWithProjection"],
    "hidden_act": "gelu",
    "num_hidden_layers": 5,
}
# Differs from both in every dimension: sizes, heads, activation, eps, positions, projection width,
# and a non-legacy eos_token_id (first occurrence rule). Used with and without projection.
OTHER = dict(
    vocab_size=517,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=2,
    num_attention_heads=3,
    max_position_embeddings=20,
    hidden_act="gelu_new",
    layer_norm_eps=1e-6,
    projection_dim=24,
    bos_token_id=513,
    eos_token_id=515,
    pad_token_id=514,
)
CASES = {
    "sdxl_te1": (SDXL_TE1, 77),
    "sdxl_te2": (SDXL_TE2, 77),
    "other": ({**OTHER, "architectures": ["CLIPTextModel"]}, 13),
    "other_proj": ({**OTHER, "architectures": ["CLIPTextModelWithProjection"]}, 13),
}


def make_ids(config: dict, seq_len: int) -> np.ndarray:
    """Three prompts of different lengths, padded after the EOS with EOS tokens, plus a token id
    larger than the EOS after it, so that the legacy rule (argmax of the ids) and the first-EOS rule
    pick different positions and a wrong rule fails the pooled comparison."""
    rng = np.random.default_rng(0)
    vocab = config["vocab_size"]
    eos = vocab - 1 if config["eos_token_id"] == 2 else config["eos_token_id"]
    ids = rng.integers(3, min(eos, vocab - 2), size=(3, seq_len))
    for row, p in enumerate([seq_len // 3, seq_len - 1, 5]):
        ids[row, 0] = config["bos_token_id"]
        ids[row, p:] = eos
        if p + 2 < seq_len:
            ids[row, p + 2] = vocab - 1
    return ids


def build_torch(config: dict):
    cfg = transformers.CLIPTextConfig(**{k: v for k, v in config.items() if k != "architectures"})
    cls = getattr(transformers, config["architectures"][0])
    torch.manual_seed(0)
    model = cls(cfg).eval()
    with torch.no_grad():  # transformers zero-inits biases and sets LayerNorms to identity: perturb all
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def torch_outputs(model, ids: np.ndarray) -> tuple[np.ndarray, ...]:
    with torch.no_grad():
        out = model(torch.from_numpy(ids), output_hidden_states=True)
    pooled = out.text_embeds if hasattr(out, "text_embeds") else out.pooler_output
    return tuple(t.numpy() for t in (out.last_hidden_state, out.hidden_states[-2], pooled))


@nnx.jit
def run(model, ids):
    return model(ids)


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    config, seq_len = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    model = build_torch(config)
    model.save_pretrained(folder / "text_encoder")
    ids = make_ids(config, seq_len)
    return config, folder, ids, torch_outputs(model, ids)


def assert_outputs_close(ours, ref, atol):
    for name, a, b in zip(
        ("last_hidden_state", "penultimate_hidden_state", "pooled"), ours, ref, strict=True
    ):
        a = np.asarray(a, np.float32)
        assert a.shape == b.shape, name
        err = np.abs(a - b).max()
        assert err < atol, f"{name}: max abs err {err:.2e} >= {atol}"


def test_parity_fp32(case):
    config, folder, ids, ref = case
    model = load_text_encoder(folder, progress=False)
    expected = (
        CLIPTextModelWithProjection if "WithProjection" in config["architectures"][0] else CLIPTextModel
    )
    assert type(model) is expected
    assert model.config == CLIPTextConfig.from_dict(config)
    assert_outputs_close(run(model, jnp.asarray(ids)), ref, atol=1e-4)


def test_parity_bf16(case):
    # bf16 keeps 8 bits of mantissa: one rounding step is 1.6e-2 for values in [2, 4), the size of
    # these outputs (max |ref| 2 to 4). Measured errors are 1.6e-2 to 4.3e-2 (2-3 steps after a few
    # layers), like transformers' own bf16 run of these models (1.2e-2 to 5.3e-2 against its float32
    # run); 0.1 bounds both, and bugs show up at 1e-4 in the float32 test.
    config, folder, ids, ref = case
    model = load_text_encoder(folder, dtype=jnp.bfloat16, progress=False)
    assert model.encoder.layers[0].mlp.fc1.kernel.dtype == jnp.bfloat16
    out = run(model, jnp.asarray(ids))
    assert out.last_hidden_state.dtype == jnp.bfloat16
    assert_outputs_close(out, ref, atol=0.1)


@pytest.mark.parametrize("prefixed", [True, False])
def test_loads_both_key_styles(case, tmp_path, prefixed):
    """Hub checkpoints prefix the transformer with ``text_model.`` and keep a ``position_ids``
    buffer; transformers 5 saves ``CLIPTextModel`` without either. Both must load, silently."""
    config, folder, ids, ref = case
    target = tmp_path / "ckpt"
    shutil.copytree(folder, target)
    file = target / "text_encoder" / "model.safetensors"
    tensors = {k.removeprefix("text_model."): v for k, v in load_file(file).items()}
    if prefixed:
        tensors = {
            (k if k.startswith("text_projection") else f"text_model.{k}"): v for k, v in tensors.items()
        }
        tensors["text_model.embeddings.position_ids"] = np.arange(config["max_position_embeddings"])[None]
    save_file(tensors, file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unused tensor would warn
        model = load_text_encoder(target, progress=False)
    assert_outputs_close(run(model, jnp.asarray(ids)), ref, atol=1e-4)


def test_rejects_too_long_sequence():
    config = CLIPTextConfig.from_dict({**OTHER, "architectures": ["CLIPTextModel"]})
    model = CLIPTextModel(config, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(jnp.zeros((1, config.max_position_embeddings + 1), jnp.int32))
