"""The lesson cells of notebook 04 that write out what ``OVPipeline`` runs, run as they stand in the
notebook on the tiny SD 1.5 and SDXL exports, and exercise 04.2 (reshape and compile):

- the denoising loop written out (text encoder, noise, UNet with guidance, scheduler step, VAE
  decoder) gives the image of ``OVPipeline``'s own call; a loop with another guidance mix does not,
  and the cell says so;
- the UNet reshaped to static shapes by hand (``model.reshape({...})``, ``core.compile_model``) has
  the input shapes and the noise prediction of ``OVPipeline.from_pretrained(..., static=...)``; a
  reshape without the guidance doubling does not;
- 04.2: the solution passes, the attendee's copy is "not answered yet", and the wrong answers a
  learner would give are "not quite".
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from sdaccel.course import exercises as ex  # noqa: E402
from sdaccel.course.exercises import code_cell  # noqa: E402
from sdaccel.cpu.export import MODEL_XML, export_pipeline, text_to_image_components  # noqa: E402
from sdaccel.cpu.pipeline import OVPipeline  # noqa: E402

NB04 = Path(__file__).resolve().parents[2] / "notebooks" / "04_openvino_export_and_run.ipynb"
LOOP, RESHAPE = "pipe.encode_prompts(", "unet_model.reshape(static_shapes)"


@pytest.fixture(scope="module", params=["tiny-sd15", "tiny-sdxl"])
def export(request, tmp_path_factory):
    """An f32 export of a tiny checkpoint, as notebook 04 exports it."""
    source = request.getfixturevalue(request.param.replace("-", "_"))
    out = tmp_path_factory.mktemp("nb04") / "export"
    return export_pipeline(source, out, components=text_to_image_components(source), progress=False)


@pytest.fixture(scope="module")
def pipe_default(export):
    return OVPipeline.from_pretrained(export, precision=None)


def namespace(export, pipe_default) -> dict:
    """What the notebook holds when it reaches the two cells (its smoke profile's settings, fewer steps)."""
    height, width = pipe_default.defaults.height, pipe_default.defaults.width
    run = dict(steps=3, guidance_scale=6.0, height=height, width=width, seed=0)
    return {
        "ov": ov,
        "np": np,
        "gc": gc,
        "core": ov.Core(),
        "export_dir": export,
        "MODEL_XML": MODEL_XML,
        "OVPipeline": OVPipeline,
        "pipe_default": pipe_default,
        "PROMPTS": ["a red circle on a blue background, top left", "a green square"],
        "NEGATIVE_PROMPT": "",
        "SEED": 0,
        "height": height,
        "width": width,
        "steps": run["steps"],
        "guidance": run["guidance_scale"],
        "run": run,
        "results": {},
    }


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def test_the_loop_written_out_is_what_ovpipeline_runs(export, pipe_default):
    cell = code_cell(NB04, LOOP)
    ns = run(cell, namespace(export, pipe_default), "04 loop")  # the cell asserts it too
    assert ns["results"]["loop_by_hand_max_abs"] <= 1e-5
    assert ns["by_hand"].shape == (1, ns["height"], ns["width"], 3)

    mix = "uncond + guidance * (text - uncond)"
    assert mix in cell
    with pytest.raises(AssertionError):  # the prompt's prediction alone: the comparison tells
        run(cell.replace(mix, "text"), namespace(export, pipe_default), "04 loop, no guidance mix")


def test_the_reshape_by_hand_is_ovpipelines_static_path(export, pipe_default):
    cell = code_cell(NB04, RESHAPE)
    ns = run(cell, namespace(export, pipe_default), "04 reshape")  # the cell asserts it too
    assert ns["results"]["reshape_by_hand_max_abs"] <= 1e-5
    inputs = ns["pipe_static"].unet.inputs
    assert all(p.get_partial_shape().is_static for p in inputs)
    sample = next(p for p in inputs if p.get_any_name() == "sample").get_shape()
    f = pipe_default.vae_scale_factor
    assert list(sample)[0] == 2 and list(sample)[2:] == [ns["height"] // f, ns["width"] // f]

    doubled = "batch = 2 * 1"
    assert doubled in cell
    with pytest.raises(AssertionError):  # batch 1: not the shapes OVPipeline compiles with guidance
        run(cell.replace(doubled, "batch = 1"), namespace(export, pipe_default), "04 reshape, batch 1")


def exercise04_2(export, pipe_default) -> tuple[dict, str, str, str]:
    """The notebook's namespace after the reshape cell, and the exercise's cells."""
    ns = run(code_cell(NB04, RESHAPE), namespace(export, pipe_default), "04 reshape")
    nb = json.loads(NB04.read_text())
    (found,) = [e for e in ex.exercises(nb, NB04.name) if e.id == "04.2"]
    stub = ex.attendee_copy(nb, NB04.name)["cells"][found.solution]
    return ns, ex.source(nb["cells"][found.solution]), ex.source(stub), ex.source(nb["cells"][found.check])


def test_exercise_04_2_solution_passes_and_the_stub_is_not_answered(export, pipe_default, capsys):
    ns, solution, stub, check = exercise04_2(export, pipe_default)
    attendee = dict(ns)
    run(solution, ns, "04.2 solution")
    run(check, ns, "04.2 check")
    assert "Exercise 04.2: right" in capsys.readouterr().out
    sample = next(p for p in ns["static_unet"].inputs if p.get_any_name() == "sample").get_shape()
    f = ns["vae_scale_factor"]
    assert list(sample) == [4, 4, 2 * ns["height"] // f, ns["width"] // f]

    with pytest.raises(ex.ExerciseNotDone, match="04.2: not answered yet"):
        run(check, run(stub, attendee, "04.2 stub"))


def test_exercise_04_2_wrong_answers_fail(export, pipe_default):
    ns, solution, _, check = exercise04_2(export, pipe_default)
    run(solution, ns, "04.2 solution")
    core, right = ns["core"], ns["shapes"]
    unet_xml = export / "unet" / MODEL_XML
    f, h, w = ns["vae_scale_factor"], ns["ex_height"], ns["ex_width"]

    def compiled(changes: dict, keep: tuple = (), xml: Path = unet_xml):
        """The UNet reshaped to the right shapes with ``changes``, only ``keep`` if given, compiled."""
        model = core.read_model(xml)
        shapes = {k: v for k, v in (right | changes).items() if not keep or k in keep}
        model.reshape(shapes)
        return core.compile_model(model, "CPU")

    def batch(n: int) -> dict:
        return {k: [n, *v[1:]] for k, v in right.items() if k != "timestep"}

    channels = right["sample"][1]
    renamed = core.read_model(unet_xml)  # the right shapes, by position, on inputs with other names
    renamed.reshape({i: right[p.get_any_name()] for i, p in enumerate(renamed.inputs)})
    for port, name in zip(renamed.inputs, ("x", "t", "context", "pooled", "size"), strict=False):
        port.get_tensor().set_names({name})
    lesson_unet = core.compile_model(_reshaped(core, unet_xml, ns["static_shapes"]), "CPU")
    decoder = core.read_model(export / "vae_decoder" / MODEL_XML)
    decoder.reshape({"latent_sample": [2, channels, h // f, w // f]})
    wrong = {
        "latents in pixels, not pixels / vae_scale_factor": compiled({"sample": [4, channels, h, w]}),
        "height and width swapped": compiled({"sample": [4, channels, w // f, h // f]}),
        "the batch without the guidance doubling": compiled(batch(2)),
        "the batch doubled twice": compiled(batch(8)),
        "only the sample made static: dynamic dims left": compiled({}, keep=("sample",)),
        "the token count left dynamic": compiled(
            {"encoder_hidden_states": [4, -1, right["encoder_hidden_states"][2]]}
        ),
        "64 tokens, not 77": compiled({"encoder_hidden_states": [4, 64, right["encoder_hidden_states"][2]]}),
        "the lesson's shape, not the exercise's": lesson_unet,
        "reshaped, not compiled": _reshaped(core, unet_xml, right),
        "the dict of shapes": right,
        "the VAE decoder compiled static": core.compile_model(decoder, "CPU"),
        "a UNet whose inputs have other names": core.compile_model(renamed, "CPU"),
    }
    if f != 8:  # the tiny trained model's VAE scales by 4: 8, Stable Diffusion's, is a wrong answer here
        wrong["latents / 8 where the VAE scales by 4"] = compiled({"sample": [4, channels, h // 8, w // 8]})
    if "text_embeds" in right:  # SDXL: its two extra inputs
        wrong["SDXL's text_embeds left dynamic"] = compiled({"text_embeds": [-1, right["text_embeds"][1]]})
    for name, answer in wrong.items():
        ns["static_unet"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="04.2: not quite"):
            run(check, ns, name)
            pytest.fail(f"a wrong answer passed: {name}")

    ns["static_unet"] = compiled({})  # the right shapes, compiled here: right
    run(check, ns, "right")


def _reshaped(core, xml: Path, shapes: dict):
    model = core.read_model(xml)
    model.reshape(shapes)
    return model
