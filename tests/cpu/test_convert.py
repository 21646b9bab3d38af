"""Converting one PyTorch module to an ``ov.Model``: the port names, dtypes and dynamic dimensions
GenAI looks up (the table in :mod:`sdaccel.cpu.convert`), and the torch component loaded back in
float32. (Parity of whole exports with PyTorch: test_export.py.)"""

from __future__ import annotations

import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")

from sdaccel.cpu.convert import (  # noqa: E402
    convert_text_encoder,
    convert_vae_decoder,
    load_torch_component,
    name_ports,
    no_loading_bars,
)


def _ports(model) -> tuple[dict, list[str]]:
    inputs = {
        p.get_any_name(): (str(p.get_partial_shape()), p.get_element_type().get_type_name())
        for p in model.inputs
    }
    return inputs, [p.get_any_name() for p in model.outputs]


def test_unet_ports(unet_ir):
    name, xml, _ = unet_ir
    inputs, outputs = _ports(ov.Core().read_model(xml))
    assert inputs["sample"] == ("[?,4,?,?]", "f32") and inputs["timestep"] == ("[1]", "i64")
    assert inputs["encoder_hidden_states"][0].startswith("[?,?,")
    assert outputs == ["out_sample"]
    extra = ["text_embeds", "time_ids"] if name == "tiny-sdxl" else []
    assert list(inputs) == ["sample", "timestep", "encoder_hidden_states", *extra]


def test_text_encoder_and_vae_decoder_ports(tiny_sd15):
    from diffusers import AutoencoderKL

    encoder = load_torch_component(tiny_sd15, "text_encoder")
    assert not encoder.training and next(encoder.parameters()).dtype == torch.float32
    inputs, outputs = _ports(convert_text_encoder(encoder))
    layers = encoder.config.num_hidden_layers
    assert inputs == {"input_ids": ("[?,?]", "i64")}
    assert outputs == [
        "last_hidden_state",
        "pooler_output",
        *(f"hidden_states.{i}" for i in range(layers + 1)),
    ]
    vae = AutoencoderKL.from_pretrained(tiny_sd15 / "vae").eval()
    assert _ports(convert_vae_decoder(vae, example_size=8)) == (
        {"latent_sample": ("[?,4,?,?]", "f32")},
        ["sample"],
    )


def test_name_ports_needs_a_name_for_every_port(tiny_sd15):
    with no_loading_bars():
        vae = load_torch_component(tiny_sd15, "vae_decoder")
    model = convert_vae_decoder(vae, example_size=8)
    with pytest.raises(ValueError):
        name_ports(model, ["a", "b"], ["sample"])
