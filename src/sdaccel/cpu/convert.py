"""Convert one PyTorch module of a diffusers checkpoint to one ``ov.Model``.

OpenVINO runs a model from its *intermediate representation* (IR): an ``.xml`` file with the graph
and a ``.bin`` file with the weights. ``openvino.convert_model`` makes one from a PyTorch module
by tracing it once on example inputs, so this module wraps each diffusers/transformers module in a
small ``torch.nn.Module`` whose ``forward`` takes and returns plain tensors, converts it, names the
inputs and outputs, and saves it.

The names of inputs and outputs are the contract with GenAI (see its ``unet_inference.hpp``,
``clip_text_model.cpp`` and ``autoencoder_kl.cpp``):

=============== ============================================================ =====================================
component       inputs                                                       outputs
=============== ============================================================ =====================================
text_encoder    ``input_ids`` i64 [B, 77]                                    ``last_hidden_state``, ``pooler_output``,
                                                                             ``hidden_states.0`` ... ``hidden_states.N``
text_encoder_2  ``input_ids`` i64 [B, 77]                                    ``text_embeds`` (output 0!),
                                                                             ``last_hidden_state``, ``hidden_states.*``
unet            ``sample`` f32 [B, 4, h, w], ``timestep`` i64 [1],           ``out_sample`` f32 [B, 4, h, w]
                ``encoder_hidden_states`` f32 [B, 77, D],
                SDXL: ``text_embeds`` f32 [B, 1280], ``time_ids`` f32 [B, 6]
vae_decoder     ``latent_sample`` f32 [B, 4, h, w]                           ``sample`` f32 [B, 3, 8h, 8w]
vae_encoder     ``sample`` f32 [B, 3, H, W]                                  ``latent_parameters`` (mean and logvar)
=============== ============================================================ =====================================

GenAI reads the SDXL prompt embeddings as output number ``num_hidden_layers + 1`` of both text
encoders, which is ``hidden_states[-2]`` only with the output order above; and it passes the
timestep as an ``int64`` tensor of shape ``[1]`` that the UNet broadcasts over the batch.

"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from sdaccel.core.checkpoint import CheckpointError, read_json
from sdaccel.cpu.ir_files import save_ir

TOKENIZER_XML = "openvino_tokenizer.xml"


DETOKENIZER_XML = "openvino_detokenizer.xml"


def trace_to_ov(module, example: dict):
    """Trace ``module`` on ``example`` (a dict: input name -> tensor) and convert it to ``ov.Model``.

    OpenVINO's PyTorch frontend records the module with TorchScript tracing (the route
    optimum-intel takes; ``torch.export`` programs convert too, but need every dynamic dimension
    declared). Tracing runs ``forward`` once and keeps the operations, so Python branches on
    shapes are frozen at the example's values. ``convert_model`` would trace with
    ``check_trace=True``, running the module twice more to compare; this decoder traces once. All
    dimensions come out dynamic (``?``).
    """
    import openvino as ov
    import torch
    from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder

    with torch.no_grad(), warnings.catch_warnings():
        # shape checks in diffusers/transformers become constants of the trace, which is what we
        # want for the fixed 77-token prompts and channel counts; the warnings only say so
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=".*torch.jit.trace", category=DeprecationWarning)
        decoder = TorchScriptPythonDecoder(module, example_input=example, trace_kwargs={"check_trace": False})
        return ov.convert_model(decoder, example_input=example)


def name_ports(model, inputs: Iterable[str], outputs: Iterable[str]):
    """Give the IR's inputs and outputs exactly these tensor names (GenAI looks them up by name)."""
    for port, name in zip(model.inputs, inputs, strict=True):
        port.get_tensor().set_names({name})
        port.get_node().set_friendly_name(name)
    for port, name in zip(model.outputs, outputs, strict=True):
        port.get_tensor().set_names({name})
    return model


def fix_dims(model, dims: dict[str, dict[int, int]]):
    """Make the named dimensions of the inputs static (channels, hidden sizes); the rest stay ``?``."""
    import openvino as ov

    shapes = {}
    for port in model.inputs:
        shape = ov.PartialShape(port.get_partial_shape())
        for axis, size in dims.get(port.get_any_name(), {}).items():
            shape[axis] = size
        shapes[port.get_any_name()] = shape
    model.reshape(shapes)
    return model


def convert_text_encoder(model, max_length: int = 77):
    """A transformers ``CLIPTextModel`` / ``CLIPTextModelWithProjection`` -> ``ov.Model``."""
    import torch

    from sdaccel.cpu.torch_modules import TextEncoder

    with_projection = hasattr(model, "text_projection")
    layers = model.config.num_hidden_layers
    # any ids trace the same graph (pooling finds the EOS by argmax or by id, decided by the config)
    ids = torch.arange(2 * max_length, dtype=torch.int64).reshape(2, max_length) % model.config.vocab_size
    ov_model = trace_to_ov(TextEncoder(model, with_projection), {"input_ids": ids})
    first = (
        ["text_embeds", "last_hidden_state"] if with_projection else ["last_hidden_state", "pooler_output"]
    )
    outputs = first + [f"hidden_states.{i}" for i in range(layers + 1)]
    return name_ports(ov_model, ["input_ids"], outputs)


def unet_example(cfg, size: int, sequence_length: int = 77) -> tuple[dict, dict]:
    """Example UNet inputs for a trace (batch 2, ``size x size`` latents, named as GenAI expects)
    and the dimensions to keep static in the IR (channels, hidden sizes; the rest stay ``?``)."""
    import torch

    example = {
        "sample": torch.randn(2, cfg.in_channels, size, size),
        "timestep": torch.tensor([999], dtype=torch.int64),
        "encoder_hidden_states": torch.randn(2, sequence_length, cfg.cross_attention_dim),
    }
    dims = {
        "sample": {1: cfg.in_channels},
        "timestep": {0: 1},
        "encoder_hidden_states": {2: cfg.cross_attention_dim},
    }
    if cfg.addition_embed_type == "text_time":
        text_embeds = cfg.projection_class_embeddings_input_dim - 6 * cfg.addition_time_embed_dim
        example["text_embeds"] = torch.randn(2, text_embeds)
        example["time_ids"] = torch.tensor(
            [[size * 8, size * 8, 0, 0, size * 8, size * 8]] * 2, dtype=torch.float32
        )
        dims.update({"text_embeds": {1: text_embeds}, "time_ids": {1: 6}})
    elif cfg.addition_embed_type is not None:
        raise CheckpointError(f"UNet addition_embed_type={cfg.addition_embed_type!r} is not supported.")
    if cfg.time_cond_proj_dim is not None:  # an LCM UNet: the guidance-scale embedding
        example["timestep_cond"] = torch.randn(2, cfg.time_cond_proj_dim)
        dims["timestep_cond"] = {1: cfg.time_cond_proj_dim}
    return example, dims


def convert_unet(unet, example_size: int = 32, sequence_length: int = 77):
    """A diffusers ``UNet2DConditionModel`` (SD or SDXL) -> ``ov.Model`` with GenAI's port names.

    The trace runs once on a ``example_size``-sized latent; sizes are dynamic in the result.
    """
    from sdaccel.cpu.torch_modules import UNet

    example, dims = unet_example(unet.config, min(example_size, unet.config.sample_size), sequence_length)
    ov_model = trace_to_ov(UNet(unet), example)
    name_ports(ov_model, list(example), ["out_sample"])
    return fix_dims(ov_model, dims)


def convert_vae_decoder(vae, example_size: int = 16):
    import torch

    from sdaccel.cpu.torch_modules import VAEDecoder

    channels = vae.config.latent_channels
    ov_model = trace_to_ov(
        VAEDecoder(vae), {"latent_sample": torch.randn(1, channels, example_size, example_size)}
    )
    name_ports(ov_model, ["latent_sample"], ["sample"])
    return fix_dims(ov_model, {"latent_sample": {1: channels}})


def convert_vae_encoder(vae, example_size: int = 128):
    import torch

    from sdaccel.cpu.torch_modules import VAEEncoder

    channels = vae.config.in_channels
    ov_model = trace_to_ov(VAEEncoder(vae), {"sample": torch.randn(1, channels, example_size, example_size)})
    name_ports(ov_model, ["sample"], ["latent_parameters"])
    return fix_dims(ov_model, {"sample": {1: channels}})


def convert_tokenizer(src: Path, dst: Path) -> None:
    """Copy the HF tokenizer files and add OpenVINO tokenizer/detokenizer models (for GenAI)."""
    from openvino_tokenizers import convert_tokenizer as ov_convert_tokenizer
    from transformers import AutoTokenizer

    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.is_file():
            shutil.copy2(path, dst / path.name)
    tokenizer, detokenizer = ov_convert_tokenizer(AutoTokenizer.from_pretrained(src), with_detokenizer=True)
    save_ir(tokenizer, dst / TOKENIZER_XML, compress_to_fp16=True)  # ov.save_model's default
    save_ir(detokenizer, dst / DETOKENIZER_XML, compress_to_fp16=True)


@contextlib.contextmanager
def no_loading_bars() -> Iterator[None]:
    """transformers' and diffusers' progress bars hidden while the block loads weights, and put back
    as they were after. Every ``from_pretrained`` draws a bar over the tensors or components it
    reads ("Loading weights: 100%|...| 52/52"), which a notebook keeps as a line of its output once
    the load is done: noise in a cell whose lesson is the export or the comparison, not the load."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    libraries = (transformers_logging, diffusers_logging)
    shown = [library.is_progress_bar_enabled() for library in libraries]
    for library in libraries:
        library.disable_progress_bar()
    try:
        yield
    finally:
        for library, was_shown in zip(libraries, shown, strict=True):
            if was_shown:
                library.enable_progress_bar()


def load_torch_component(src: Path, name: str):
    """The PyTorch module behind an exported component, in float32 and eval mode."""
    import torch

    if name.startswith("text_encoder"):
        import transformers

        cls = getattr(transformers, read_json(src / "model_index.json")[name][1])
        with no_loading_bars():
            return cls.from_pretrained(src / name, dtype=torch.float32).eval()
    from diffusers import AutoencoderKL, UNet2DConditionModel

    if name == "unet":
        return UNet2DConditionModel.from_pretrained(src / "unet", dtype=torch.float32).eval()
    return AutoencoderKL.from_pretrained(src / "vae", dtype=torch.float32).eval()
