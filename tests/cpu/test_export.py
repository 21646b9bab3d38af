"""Export to OpenVINO IR: the folder layout GenAI loads, the port names and dtypes, per-component
parity with PyTorch in f32, the no-op re-export, static reshape, fp16 weights and clear errors."""

from __future__ import annotations

import ast
import json
import shutil

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")

from sdaccel.core.checkpoint import CheckpointError  # noqa: E402
from sdaccel.cpu.export import (  # noqa: E402
    MANIFEST,
    MODEL_XML,
    StaticShape,
    estimate_export_bytes,
    export_pipeline,
    is_static,
    reshape_static,
    text_to_image_components,
)

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


@pytest.fixture(scope="session")
def exports(ov_exports, tiny_sd15, tiny_sdxl):
    """Both tiny checkpoints exported once per session. The folder is shared with
    test_cpu_pipeline.py, whose own call finds the export complete and does nothing."""
    return {  # the VAE encoder is the same for both: exported and tested once, with SD 1.5
        "tiny-sd15": (tiny_sd15, export_pipeline(tiny_sd15, ov_exports / "tiny-sd15", progress=False)),
        "tiny-sdxl": (
            tiny_sdxl,
            export_pipeline(
                tiny_sdxl, ov_exports / "tiny-sdxl", text_to_image_components(tiny_sdxl), progress=False
            ),
        ),
    }


def _infer(xml_or_model, inputs: dict) -> dict[str, np.ndarray]:
    compiled = ov.Core().compile_model(xml_or_model, "CPU", F32)
    result = compiled(inputs)
    return {port.get_any_name(): np.asarray(value) for port, value in result.items()}


def _assert_close(ours: np.ndarray, ref: np.ndarray, atol: float = 1e-4):
    assert ours.shape == ref.shape
    assert ref.std() > 1e-2, "the reference output is (near) constant: the comparison would prove nothing"
    err = float(np.abs(ours - ref).max())
    assert err < atol, f"max abs error {err:.2e} >= {atol:.0e} (output scale {np.abs(ref).max():.2f})"


# ----------------------------------------------------------------------------------------------
# Layout and port names
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-sd15", "tiny-sdxl"])
def test_layout_is_the_one_genai_loads(exports, name):
    src, out = exports[name]
    sdxl = name == "tiny-sdxl"
    assert json.loads((out / "model_index.json").read_text()) == json.loads(
        (src / "model_index.json").read_text()
    )
    assert (out / "scheduler" / "scheduler_config.json").is_file()
    for tokenizer in ["tokenizer", "tokenizer_2"] if sdxl else ["tokenizer"]:
        for f in [
            "openvino_tokenizer.xml",
            "openvino_tokenizer.bin",
            "openvino_detokenizer.xml",
            "vocab.json",
        ]:
            assert (out / tokenizer / f).is_file(), f"{tokenizer}/{f}"
    components = ["text_encoder", "unet", "vae_decoder"] + (["text_encoder_2"] if sdxl else ["vae_encoder"])
    for component in components:
        for f in [MODEL_XML, "openvino_model.bin", "config.json"]:
            assert (out / component / f).is_file(), f"{component}/{f}"
    # GenAI reads block_out_channels and scaling_factor from the VAE decoder's config
    assert json.loads((out / "vae_decoder" / "config.json").read_text())["scaling_factor"] > 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["weight_dtype"] == "fp32" and manifest["static"] is None
    assert manifest["sizes"]["unet"] > 0


def _ports(xml):
    model = ov.Core().read_model(xml)
    inputs = {
        p.get_any_name(): (str(p.get_partial_shape()), p.get_element_type().get_type_name())
        for p in model.inputs
    }
    return inputs, [p.get_any_name() for p in model.outputs]


def test_port_names_dtypes_and_shapes(exports):
    _, sd = exports["tiny-sd15"]
    _, xl = exports["tiny-sdxl"]
    inputs, outputs = _ports(sd / "unet" / MODEL_XML)
    assert inputs == {
        "sample": ("[?,4,?,?]", "f32"),
        "timestep": ("[1]", "i64"),  # GenAI passes ov::Tensor(i64, {1}) and the UNet broadcasts it
        "encoder_hidden_states": ("[?,?,32]", "f32"),
    }
    assert outputs == ["out_sample"]
    inputs, outputs = _ports(xl / "unet" / MODEL_XML)
    assert list(inputs) == ["sample", "timestep", "encoder_hidden_states", "text_embeds", "time_ids"]
    assert inputs["time_ids"] == ("[?,6]", "f32") and inputs["text_embeds"] == ("[?,32]", "f32")
    layers = 3
    hidden = [f"hidden_states.{i}" for i in range(layers + 1)]
    inputs, outputs = _ports(xl / "text_encoder" / MODEL_XML)
    assert inputs == {"input_ids": ("[?,?]", "i64")}
    assert outputs == ["last_hidden_state", "pooler_output", *hidden]
    _, outputs = _ports(xl / "text_encoder_2" / MODEL_XML)
    assert outputs == ["text_embeds", "last_hidden_state", *hidden]
    # GenAI takes output num_hidden_layers + 1 of both encoders as hidden_states[-2]
    assert outputs[layers + 1] == f"hidden_states.{layers - 1}"
    assert _ports(sd / "vae_decoder" / MODEL_XML) == ({"latent_sample": ("[?,4,?,?]", "f32")}, ["sample"])
    assert _ports(sd / "vae_encoder" / MODEL_XML) == ({"sample": ("[?,3,?,?]", "f32")}, ["latent_parameters"])


# ----------------------------------------------------------------------------------------------
# Parity with PyTorch, component by component (f32)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,component",
    [("tiny-sd15", "text_encoder"), ("tiny-sdxl", "text_encoder"), ("tiny-sdxl", "text_encoder_2")],
)
def test_text_encoder_parity(exports, name, component):
    import transformers

    src, out = exports[name]
    cls = getattr(transformers, json.loads((src / "model_index.json").read_text())[component][1])
    model = cls.from_pretrained(src / component).eval()
    ids = torch.randint(0, model.config.vocab_size - 1, (3, 77), generator=torch.Generator().manual_seed(0))
    ids[:, 9] = model.config.vocab_size - 1  # the EOS (highest id) that pooling looks for
    with torch.no_grad():
        ref = model(input_ids=ids, output_hidden_states=True)
    ours = _infer(out / component / MODEL_XML, {"input_ids": ids.numpy()})
    first = "text_embeds" if component == "text_encoder_2" else "pooler_output"
    _assert_close(ours[first], getattr(ref, first).numpy())
    _assert_close(ours["last_hidden_state"], ref.last_hidden_state.numpy())
    for i, state in enumerate(ref.hidden_states):
        _assert_close(ours[f"hidden_states.{i}"], state.numpy())


def _unet_inputs(config, batch: int, h: int, w: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    inputs = {
        "sample": torch.randn(batch, config.in_channels, h, w, generator=g),
        "timestep": torch.tensor([637], dtype=torch.int64),
        "encoder_hidden_states": torch.randn(batch, 77, config.cross_attention_dim, generator=g),
    }
    if config.addition_embed_type == "text_time":
        pooled = config.projection_class_embeddings_input_dim - 6 * config.addition_time_embed_dim
        inputs["text_embeds"] = torch.randn(batch, pooled, generator=g)
        inputs["time_ids"] = torch.tensor([[8.0 * h, 8.0 * w, 0, 0, 8.0 * h, 8.0 * w]] * batch)
    return inputs


def _torch_unet(unet, inputs):
    added = {k: inputs[k] for k in ("text_embeds", "time_ids") if k in inputs} or None
    with torch.no_grad():
        return unet(
            inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"], added_cond_kwargs=added
        ).sample.numpy()


@pytest.mark.parametrize("name", ["tiny-sd15", "tiny-sdxl"])
def test_unet_parity_at_a_shape_it_was_not_traced_at(exports, name):
    from diffusers import UNet2DConditionModel

    src, out = exports[name]
    unet = UNet2DConditionModel.from_pretrained(src / "unet").eval()
    inputs = _unet_inputs(unet.config, batch=3, h=24, w=16)  # traced at batch 2, 16x16
    ours = _infer(out / "unet" / MODEL_XML, {k: v.numpy() for k, v in inputs.items()})["out_sample"]
    _assert_close(ours, _torch_unet(unet, inputs))


def test_vae_parity(exports):
    from diffusers import AutoencoderKL

    src, out = exports["tiny-sd15"]
    vae = AutoencoderKL.from_pretrained(src / "vae").eval()
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 4, 8, 12, generator=g)
    image = torch.rand(1, 3, 48, 64, generator=g) * 2 - 1
    with torch.no_grad():
        decoded = vae.decode(latents).sample.numpy()
        moments = vae.quant_conv(vae.encoder(image)).numpy()
    _assert_close(
        _infer(out / "vae_decoder" / MODEL_XML, {"latent_sample": latents.numpy()})["sample"], decoded
    )
    encoded = _infer(out / "vae_encoder" / MODEL_XML, {"sample": image.numpy()})["latent_parameters"]
    _assert_close(encoded, moments)
    with torch.no_grad():  # the mean half is what diffusers' latent_dist.mode() returns
        np.testing.assert_allclose(encoded[:, :4], vae.encode(image).latent_dist.mode().numpy(), atol=1e-4)


# ----------------------------------------------------------------------------------------------
# Re-export, fp16 weights, static shapes
# ----------------------------------------------------------------------------------------------


def test_reexport_is_a_noop_unless_forced(exports, capsys, tmp_path):
    src, out = exports["tiny-sd15"]
    files = sorted(out.rglob("*"))
    stamps = {p: p.stat().st_mtime_ns for p in files if p.is_file()}
    assert export_pipeline(src, out, progress=False) == out
    assert capsys.readouterr().out == ""  # reused in silence: the caller has the folder back
    assert sorted(out.rglob("*")) == files
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # a request that differs from what is there is still a no-op, and says how, once a process
    export_pipeline(src, out, weight_dtype="fp16", progress=False)
    said = f"Reusing the OpenVINO export {out.name!r}, made with weight_dtype 'fp32', not 'fp16'"
    assert capsys.readouterr().out.startswith(said)
    export_pipeline(src, out, weight_dtype="fp16", progress=False)
    assert capsys.readouterr().out == ""
    # force replaces the whole folder by a new export of what is asked (in a copy: one cheap
    # component, and the session's export stays complete for the other tests)
    copy = shutil.copytree(out, tmp_path / "copy")
    xml = copy / "text_encoder" / MODEL_XML
    before = xml.stat().st_mtime_ns
    export_pipeline(src, copy, components=["text_encoder"], force=True, progress=False)
    assert xml.stat().st_mtime_ns > before
    assert json.loads((copy / MANIFEST).read_text())["components"] == ["text_encoder"]
    assert not (copy / "unet").exists() and not (copy / "tokenizer").exists()


@pytest.mark.parametrize("name", ["tiny-sd15", "tiny-sdxl"])
def test_the_free_space_estimate_is_the_size_of_the_weights_written(exports, name):
    """What ``export_pipeline`` asks the disk for before it starts: about the ``.bin`` files,
    never more than the whole component (so no export that fits is refused)."""
    src, out = exports[name]
    for component in json.loads((out / MANIFEST).read_text())["components"]:
        files = [p for p in (out / component).iterdir() if p.is_file()]
        weights = sum(p.stat().st_size for p in files if p.suffix == ".bin")
        estimate = estimate_export_bytes(src, [component])
        assert estimate <= sum(p.stat().st_size for p in files), component
        if not component.startswith("tokenizer"):
            assert 0.97 * weights <= estimate <= 1.03 * weights, component
            assert estimate_export_bytes(src, [component], "fp16") == estimate // 2


def test_an_export_of_another_checkpoint_is_never_reused(exports):
    """The folder holds tiny-sd15: asking it for tiny-sdxl is refused, not silently served."""
    _, out = exports["tiny-sd15"]
    other, _ = exports["tiny-sdxl"]
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with pytest.raises(CheckpointError, match="holds an OpenVINO export of .*tiny-sd15.* force=True"):
        export_pipeline(other, out, components=["tokenizer", "text_encoder"], progress=False)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_fp16_weights_halve_the_size_and_stay_close(exports, tmp_path):
    src, out = exports["tiny-sdxl"]
    half = export_pipeline(
        src, tmp_path / "fp16", components=["text_encoder_2"], weight_dtype="fp16", progress=False
    )
    full_bin = (out / "text_encoder_2" / "openvino_model.bin").stat().st_size
    half_bin = (half / "text_encoder_2" / "openvino_model.bin").stat().st_size
    assert 0.4 < half_bin / full_bin < 0.6
    ids = np.tile(np.arange(77, dtype=np.int64), (2, 1))
    ref = _infer(out / "text_encoder_2" / MODEL_XML, {"input_ids": ids})["text_embeds"]
    got = _infer(half / "text_encoder_2" / MODEL_XML, {"input_ids": ids})["text_embeds"]
    # weights rounded to 11 significant bits: relative error ~ 2**-11 per weight, a few 1e-3 overall
    assert 0 < np.abs(got - ref).max() < 1e-2 * np.abs(ref).max()


def test_reshape_static_model_is_static_and_still_matches(exports):
    from diffusers import UNet2DConditionModel

    src, out = exports["tiny-sdxl"]
    model = reshape_static(ov.Core().read_model(out / "unet" / MODEL_XML), batch=1, height=64, width=96)
    assert is_static(model)
    shapes = {p.get_any_name(): list(p.get_shape()) for p in model.inputs}
    assert shapes == {
        "sample": [2, 4, 8, 12],  # classifier-free guidance doubles the batch
        "timestep": [1],
        "encoder_hidden_states": [2, 77, 64],
        "text_embeds": [2, 32],
        "time_ids": [2, 6],
    }
    unet = UNet2DConditionModel.from_pretrained(src / "unet").eval()
    inputs = _unet_inputs(unet.config, batch=2, h=8, w=12, seed=1)
    ours = _infer(model, {k: v.numpy() for k, v in inputs.items()})["out_sample"]
    _assert_close(ours, _torch_unet(unet, inputs))
    with pytest.raises(ValueError, match="multiples of 8"):
        reshape_static(ov.Core().read_model(out / "unet" / MODEL_XML), 1, 60, 64)


def test_reshape_static_folder_and_export_argument(exports, tmp_path):
    _, out = exports["tiny-sd15"]
    copy = shutil.copytree(out, tmp_path / "static")
    reshape_static(copy, batch=2, height=64, width=64, guidance=False)
    core = ov.Core()
    shapes = {
        xml.parent.name: {p.get_any_name(): list(p.get_shape()) for p in core.read_model(xml).inputs}
        for xml in copy.glob(f"*/{MODEL_XML}")
    }
    assert shapes["text_encoder"] == {"input_ids": [2, 77]}
    assert shapes["unet"]["sample"] == [2, 4, 8, 8]
    assert shapes["vae_decoder"] == {"latent_sample": [2, 4, 8, 8]}
    assert shapes["vae_encoder"] == {"sample": [2, 3, 64, 64]}
    assert json.loads((copy / MANIFEST).read_text())["static"]["batch"] == 2
    # the static argument of export_pipeline does the same at export time
    src, _ = exports["tiny-sdxl"]
    static = export_pipeline(
        src, tmp_path / "exp", components=["text_encoder"], static=(1, 64, 64), progress=False
    )
    model = core.read_model(static / "text_encoder" / MODEL_XML)
    assert is_static(model) and list(model.inputs[0].get_shape()) == [2, 77]
    assert StaticShape.coerce({"batch": 3}).model_batch == 6


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


def test_clear_errors(tmp_path, tiny_sd15):
    with pytest.raises(CheckpointError, match="No checkpoint folder"):
        export_pipeline(tmp_path / "nowhere", tmp_path / "out")
    flux = tmp_path / "flux"
    flux.mkdir()
    (flux / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    with pytest.raises(CheckpointError, match="'FluxPipeline'.*Stable Diffusion 1.x/2.x and SDXL"):
        export_pipeline(flux, tmp_path / "out")
    with pytest.raises(ValueError, match="Unknown components \\['text_encoder_2'\\]"):
        export_pipeline(tiny_sd15, tmp_path / "out", components=["text_encoder_2"])
    with pytest.raises(ValueError, match="weight_dtype"):
        export_pipeline(tiny_sd15, tmp_path / "out", weight_dtype="int8")
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_changed_since_its_export_is_not_served_stale(exports, tmp_path):
    """Retrained in place (same folder, new files): the old export is refused until forced."""
    import os

    src = tmp_path / "checkpoint"
    shutil.copytree(exports["tiny-sd15"][0], src)
    out = export_pipeline(src, tmp_path / "ov", components=["tokenizer", "text_encoder"], progress=False)
    weights = next((src / "text_encoder").glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    with pytest.raises(CheckpointError, match="has changed since it was exported"):
        export_pipeline(src, out, components=["tokenizer", "text_encoder"], progress=False)
    export_pipeline(src, out, components=["tokenizer", "text_encoder"], force=True, progress=False)
    export_pipeline(src, out, components=["tokenizer", "text_encoder"], progress=False)  # current again


# ----------------------------------------------------------------------------------------------
# The export folder notebooks 04, 05 and 06 share
# ----------------------------------------------------------------------------------------------


def notebook_export_dir(stem: str, **values):
    """The ``export_dir`` that notebook ``stem`` computes from its parameters cell, with ``values``
    set as a profile or the runner would set them (the notebook's own line, evaluated)."""
    from pathlib import Path

    cells = json.loads((Path(__file__).parents[2] / "notebooks" / f"{stem}.ipynb").read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    namespace: dict = {}
    exec(code[1], namespace)  # the parameters cell
    namespace.update(values)
    (statement,) = [  # the notebook's own assignment, however it is wrapped
        ast.get_source_segment(cell, node)
        for cell in code
        if "export_dir = " in cell
        for node in ast.parse(cell).body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["export_dir"]
    ]
    exec(
        f"from pathlib import Path\nfrom sdaccel.cpu.export import default_export_dir\n{statement}", namespace
    )
    return namespace["export_dir"]


def test_notebooks_04_and_05_share_one_export_folder_per_checkpoint(tmp_path):
    from pathlib import Path

    from sdaccel.course import run_profiles

    first, second = "04_openvino_export_and_run", "05_int8_quantization"
    full = notebook_export_dir(first)
    assert full == notebook_export_dir(second)
    assert full == Path("outputs/openvino/hub--stable-diffusion-v1-5--stable-diffusion-v1-5-fp32")
    # the smoke profile, as the runner runs it (each notebook its own OUTPUT_DIR under one root)
    smoke = {
        stem: notebook_export_dir(
            stem, **run_profiles.overrides(stem, "smoke"), OUTPUT_DIR=str(tmp_path / "outputs" / stem)
        )
        for stem in (first, second)
    }
    assert smoke[first] == smoke[second]
    assert smoke[first].parent == tmp_path / "outputs" / "openvino"
    assert smoke[first].name == "local--tiny-shapes-sd15-fp32"  # the same wherever the repository lies
    # another checkpoint or weight precision: another folder
    sdxl = "stabilityai/stable-diffusion-xl-base-1.0"
    assert notebook_export_dir(first, MODEL_ID=sdxl) != full
    assert notebook_export_dir(first, WEIGHT_DTYPE="fp16") != full
    assert notebook_export_dir(first, EXPORT_DIR=str(tmp_path / "mine")) == tmp_path / "mine"


def test_default_export_dir_never_gives_two_checkpoints_one_folder(
    tmp_path, tiny_sd15, tiny_sdxl, monkeypatch
):
    from sdaccel.cpu.export import default_export_dir

    monkeypatch.chdir(tmp_path)
    hub = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    lookalike = tmp_path / "sub" / hub  # a local folder spelled like a hub id
    shutil.copytree(tiny_sd15, lookalike)
    folders = [
        default_export_dir(hub),
        default_export_dir("stabilityai/stable-diffusion-xl-base-1.0"),
        default_export_dir("stable-diffusion-v1/5"),
        default_export_dir(tiny_sd15),
        default_export_dir(tiny_sdxl),
        default_export_dir(lookalike),
        default_export_dir(tiny_sd15, "fp16"),
    ]
    assert len(set(folders)) == len(folders), folders
    assert folders[5].name.startswith("local--") and folders[0].name.startswith("hub--")
    # a name that is a folder here means that folder, as for resolve_checkpoint: one export for it,
    # whether written relative or absolute
    monkeypatch.chdir(tmp_path / "sub")
    assert default_export_dir(hub).name == default_export_dir(lookalike).name == folders[5].name
    with pytest.raises(ValueError, match="weight_dtype"):
        default_export_dir(hub, "int8")
    with pytest.raises(ValueError, match="neither a checkpoint folder nor a hub id"):
        default_export_dir("no/such/folder")


def _claim(folder, source) -> None:
    """``folder`` as an export of ``source`` looks to default_export_dir (its manifest's source)."""
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"source": str(source)}))


def test_a_folder_name_another_checkpoint_holds_falls_back_to_the_digest(tmp_path, tiny_sd15):
    """Two checkpoint folders of one name: the first to export gets ``local--<name>-<dtype>``, the
    other the name with the digest of its absolute path; each keeps its folder after."""
    import hashlib

    from sdaccel.core.checkpoint import read_json
    from sdaccel.cpu.export import default_export_dir

    root = tmp_path / "openvino"
    twin = tmp_path / "elsewhere" / tiny_sd15.name
    shutil.copytree(tiny_sd15, twin)
    short = root / f"local--{tiny_sd15.name}-fp32"
    digest = (
        root / f"local--{tiny_sd15.name}-{hashlib.sha256(str(twin.resolve()).encode()).hexdigest()[:12]}-fp32"
    )
    # nothing exported yet: the short name, wherever the folder lies
    assert default_export_dir(tiny_sd15, root=root) == default_export_dir(twin, root=root) == short
    export_pipeline(tiny_sd15, short, components=["tokenizer", "text_encoder"], progress=False)
    assert read_json(short / MANIFEST)["source"] == str(tiny_sd15.resolve())
    assert default_export_dir(tiny_sd15, root=root) == short  # its own export: reused
    assert default_export_dir(twin, root=root) == default_export_dir(twin, root=root) == digest
    export_pipeline(twin, digest, components=["tokenizer", "text_encoder"], progress=False)
    # each keeps its folder, even once the short one is free again
    shutil.rmtree(short)
    assert default_export_dir(twin, root=root) == digest
    assert default_export_dir(tiny_sd15, root=root) == short
    assert default_export_dir(twin, "fp16", root=root) == root / f"local--{tiny_sd15.name}-fp16"


@pytest.mark.parametrize("holder", ["another checkpoint", "a folder named after it", "no export"])
def test_a_short_name_in_use_is_left_alone(tmp_path, tiny_sd15, holder):
    """The short name is taken when another checkpoint's export holds it, or one of the folders
    named after it (notebook 07's ``-lcm-lora``), or it holds files that are no export."""
    from sdaccel.cpu.export import default_export_dir

    root = tmp_path / "openvino"
    short = root / f"local--{tiny_sd15.name}-fp32"
    if holder == "another checkpoint":
        _claim(short, tmp_path / "elsewhere" / tiny_sd15.name)
    elif holder == "a folder named after it":
        _claim(short.with_name(short.name + "-lcm-lora"), tmp_path / "elsewhere" / tiny_sd15.name)
    else:
        short.mkdir(parents=True)
        (short / "notes.txt").write_text("mine")
    chosen = default_export_dir(tiny_sd15, root=root)
    assert (
        chosen != short
        and chosen.name.startswith(f"local--{tiny_sd15.name}-")
        and chosen.name.endswith("-fp32")
    )
    # this checkpoint's own export named after it does not take the name away, nor does an empty folder
    other = tmp_path / "fresh"
    _claim(other / (short.name + "-lcm-lora"), tiny_sd15)
    (other / short.name).mkdir()
    assert default_export_dir(tiny_sd15, root=other) == other / short.name
