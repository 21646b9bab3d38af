"""The lesson cells of notebooks 04 and 05, run as they stand in the notebooks on the tiny checkpoints:
the library calls they show make what the helpers make, so the two cannot fork.

- 04: the VAE decoder converted by hand (``ov.convert_model`` with ``example_input``,
  ``ov.save_model(..., compress_to_fp16=True)``) gives the image of the decoder that
  ``export_pipeline`` wrote; the hand-written ``INFERENCE_PRECISION_HINT`` configs are the ones
  ``OVPipeline`` compiles with, and read back the precision it reports.
- 05: the three recipes written as plain NNCF calls (``nncf.compress_weights``, ``nncf.quantize``
  with the dataset, model type, ignored scope and advanced parameters) make the same models as
  ``sdaccel.cpu.quantize``'s recipes (``quantize_variant``): the same quantizers and INT8 weights, and
  the same outputs.
- The exercises 04.3, 05.2 and 05b's 05b.1, whose answers are library code: the solution passes, the attendee's
  copy (solution stripped) is "not answered yet", and wrong answers fail.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
nncf = pytest.importorskip("nncf")

from sdaccel.course import exercises as ex  # noqa: E402
from sdaccel.course.exercises import code_cell  # noqa: E402
from sdaccel.cpu import quantize, quantize_parts  # noqa: E402
from sdaccel.cpu.export import MODEL_XML, export_pipeline, text_to_image_components  # noqa: E402
from sdaccel.cpu.pipeline import OVPipeline  # noqa: E402
from sdaccel.cpu.precision_timing import precision_name  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NB04 = NOTEBOOKS / "04_openvino_export_and_run.ipynb"
NB05 = NOTEBOOKS / "05_int8_quantization.ipynb"
NB05B = NOTEBOOKS / "05b_int8_under_constraints.ipynb"


def run(code: str, namespace: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), namespace)
    return namespace


def exercise(path: Path, exercise_id: str) -> tuple[str, str, str]:
    """(solution, the attendee's stub, check) of one exercise of a notebook."""
    nb = json.loads(path.read_text())
    copy = ex.attendee_copy(nb, path.name)
    (found,) = [e for e in ex.exercises(nb, path.name) if e.id == exercise_id]
    return (
        ex.source(nb["cells"][found.solution]),
        ex.source(copy["cells"][found.solution]),
        ex.source(nb["cells"][found.check]),
    )


def compiled_f32(model):
    return ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


# ----------------------------------------------------------------------------------------------
# 04: convert_model / save_model, and INFERENCE_PRECISION_HINT
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export_fp16(tmp_path_factory, tiny_sd15):
    """The tiny SD 1.5 exported as notebook 04 exports it, with fp16 weights (what the cell's
    ``compress_to_fp16=True`` stores): the folder and its source checkpoint."""
    out = tmp_path_factory.mktemp("lesson04") / "export"
    components = text_to_image_components(tiny_sd15)
    return tiny_sd15, export_pipeline(
        tiny_sd15, out, components=components, weight_dtype="fp16", progress=False
    )


def namespace04(source, export_dir, output_dir, weight_dtype="fp16") -> dict:
    return {
        "ov": ov,
        "np": np,
        "gc": gc,
        "Path": Path,
        "MODEL_XML": MODEL_XML,
        "precision_name": precision_name,
        "core": ov.Core(),
        "source": source,
        "export_dir": export_dir,
        "OUTPUT_DIR": str(output_dir),
        "SEED": 0,
        "WEIGHT_DTYPE": weight_dtype,
        "results": {},
    }


def test_04_the_decoder_converted_by_hand_is_the_exported_one(export_fp16, tmp_path):
    source, export_dir = export_fp16
    ns = run(code_cell(NB04, "ov.convert_model("), namespace04(source, export_dir, tmp_path), "04 by hand")
    by_hand = ns["by_hand_xml"]
    assert by_hand.is_file() and by_hand.with_suffix(".bin").is_file()
    model = ov.Core().read_model(by_hand)
    exported = ov.Core().read_model(export_dir / "vae_decoder" / MODEL_XML)
    # the contract with GenAI: the same names and element types in and out
    for mine, theirs in ((model.inputs, exported.inputs), (model.outputs, exported.outputs)):
        assert [(p.get_any_name(), p.get_element_type()) for p in mine] == [
            (p.get_any_name(), p.get_element_type()) for p in theirs
        ]
    # the weights are stored in fp16, as the export's with weight_dtype="fp16"
    f16 = {
        op.get_output_element_type(0).get_type_name()
        for op in model.get_ops()
        if op.get_type_name() == "Constant"
    }
    assert "f16" in f16
    # same latents, same image: the cell asserted it; here to the last bit of rounding
    assert ns["results"]["vae_decoder_by_hand_max_abs"] <= 1e-6
    rng = np.random.default_rng(1)
    latents = rng.standard_normal((2, 4, 4, 6), dtype=np.float32)  # another batch and shape: both dynamic
    np.testing.assert_allclose(
        compiled_f32(model)(latents)[0], compiled_f32(exported)(latents)[0], rtol=0, atol=1e-6
    )


def test_04_the_hint_by_hand_is_what_ovpipeline_compiles_with(export_fp16, tmp_path):
    source, export_dir = export_fp16
    ns = namespace04(source, export_dir, tmp_path)
    ns["pipe_f32"] = OVPipeline.from_pretrained(export_dir, precision="f32")
    ns["pipe_default"] = OVPipeline.from_pretrained(export_dir, precision=None)
    run(code_cell(NB04, "compiled_default = core.compile_model"), ns, "04 hint")  # its asserts pass
    ran = ns["results"]["unet_by_hand_ran"]
    assert ran == {"f32": "f32", "none": ns["pipe_default"].precision}
    assert ns["f32_config"] == ns["pipe_f32"].compile_config_for("vae_decoder")  # every component alike


def test_04_exercise_f16_hint(export_fp16, tmp_path):
    source, export_dir = export_fp16
    solution, stub, check = exercise(NB04, "04.3")
    ns = run(solution, namespace04(source, export_dir, tmp_path))
    run(check, ns)  # right: no exception
    compiled, really = ns["f16_answer"][1:]
    assert really in ("f32", "bf16", "f16")

    attendee = run(stub, namespace04(source, export_dir, tmp_path))
    with pytest.raises(ex.ExerciseNotDone, match="04.3: not answered yet"):
        run(check, attendee)
    wrong = {
        "asked f32": ({"INFERENCE_PRECISION_HINT": "f32"}, compiled, really),
        "no hint": ({}, compiled, really),
        "what was asked, not what ran": (
            {"INFERENCE_PRECISION_HINT": "f16"},
            compiled,
            "f16" if really != "f16" else "f32",
        ),
        "a string, not (config, compiled, ran)": "bf16",
    }
    for name, answer in wrong.items():
        ns["f16_answer"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="04.3: not quite"):
            run(check, ns, name)


# ----------------------------------------------------------------------------------------------
# 05: nncf.compress_weights and nncf.quantize, as the notebook writes them and as the recipes do
# ----------------------------------------------------------------------------------------------


class _Pipeline:
    """Stands in for the notebook's f32 pipeline, which the cell releases first."""


def namespace05(unet_xml, calibration, out, alpha=0.95, bias_correction=True) -> dict:
    return {
        "gc": gc,
        "ov": ov,
        "quantize": quantize,
        "quantize_parts": quantize_parts,
        "pipe": _Pipeline(),
        "unet_xml": unet_xml,
        "calibration": calibration,
        "out": out,
        "results": {},
        "QUANT_MEMORY_GB": 4.0,
        "LESSON_SAMPLES": len(calibration),
        "SMOOTH_QUANT_ALPHA": alpha,
        "BIAS_CORRECTION": bias_correction,
    }


@pytest.mark.parametrize(("alpha", "bias_correction"), [(0.95, True), (None, False)])
def test_05_the_nncf_calls_of_the_cell_make_the_recipes_models(convert, tmp_path, alpha, bias_correction):
    _, unet_xml, samples = convert("tiny-sd15")
    ns = run(
        code_cell(NB05, "lesson = {}"),
        namespace05(unet_xml, samples, tmp_path, alpha, bias_correction),
        "05 recipes",
    )
    made = ns["results"]["lesson_recipes"]
    assert sorted(made) == sorted(quantize.VARIANTS), "the toy fits the budget in one piece: all three ran"
    knobs = {
        "int8_weights": {},
        "hybrid": {},
        "full_int8": {"smooth_quant_alpha": alpha, "bias_correction": bias_correction},
    }
    # the knobs move full INT8 only: the other two recipes are compared once, with the defaults
    compared = quantize.VARIANTS if (alpha, bias_correction) == (0.95, True) else ("full_int8",)
    for variant in compared:
        cell_model = ov.Core().read_model(tmp_path / "lesson" / f"unet_{variant}.xml")
        helper = quantize.quantize_variant(
            ov.Core().read_model(unet_xml), variant, samples, len(samples), **knobs[variant]
        )
        assert quantize.describe_ir(cell_model) == quantize.describe_ir(helper) == made[variant], variant
        assert quantize.describe_ir(cell_model)["int8_weights"] > 0
        mine, theirs = compiled_f32(cell_model), compiled_f32(helper)
        for sample in samples:
            np.testing.assert_allclose(
                mine(sample)[0], theirs(sample)[0], rtol=1e-5, atol=1e-6, err_msg=variant
            )
    if alpha is not None:  # SmoothQuant and the activations' quantizers are on: full INT8 quantizes most
        assert made["full_int8"]["fake_quantize"] > made["hybrid"]["fake_quantize"] > 0


def test_05_a_unet_too_large_for_the_budget_is_left_to_the_parts(convert, tmp_path, capsys):
    """Where one piece would not fit the budget (the real UNets on a small machine), the kernel
    runs none of the calls, and says that the next section runs them in parts."""
    _, unet_xml, samples = convert("tiny-sd15")
    ns = namespace05(unet_xml, samples, tmp_path)
    ns["QUANT_MEMORY_GB"] = 2.0  # below the fixed part of any quantization's expected peak
    run(code_cell(NB05, "lesson = {}"), ns, "05 recipes")
    assert ns["results"]["lesson_recipes"] == {} and not (tmp_path / "lesson").exists()
    assert "does not fit 2.0 GiB in one piece" in capsys.readouterr().out
    assert "pipe" not in ns, "the f32 pipeline is released all the same"


def test_05_nncf_draws_no_bar_inside_no_progress_bars(convert, capsys):
    import rich

    _, unet_xml, _ = convert("tiny-sd15")
    console = rich.get_console()
    before = dict(console.__dict__)
    nncf.compress_weights(ov.Core().read_model(unet_xml), mode=nncf.CompressWeightsMode.INT8_ASYM)
    assert "Weight Compression" in capsys.readouterr().out, "without it, NNCF draws its bar"
    with quantize.no_progress_bars():
        nncf.compress_weights(ov.Core().read_model(unet_xml), mode=nncf.CompressWeightsMode.INT8_ASYM)
    assert "Weight Compression" not in capsys.readouterr().out
    assert rich.get_console() is console and console.__dict__ == before, "put back as it was"


def test_05_exercise_ignored_scope(convert):
    _, unet_xml, _ = convert("tiny-sd15")
    solution, stub, check = exercise(NB05, "05.2")

    def namespace():
        return {
            "nncf": nncf,
            "quantize": quantize,
            "unet_xml": unet_xml,
            "kept_in_float": quantize.matching_layers(unet_xml),
        }

    mid = [n for n in quantize.matching_layers(unet_xml, [".*"]) if "mid_block.attentions." in n]
    assert mid, "the tiny UNet has a mid block with attention"
    ns = run(solution, namespace())
    run(check, ns)  # right: no exception
    assert set(quantize.ignored_layers(unet_xml, ns["keep_mid_attention"])) == set(ns["kept_in_float"]) | set(
        mid
    )

    attendee = run(stub, namespace())
    with pytest.raises(ex.ExerciseNotDone, match="05.2: not answered yet"):
        run(check, attendee)
    sensitive = list(quantize.SENSITIVE_LAYER_PATTERNS)
    wrong = {
        "only the mid block": nncf.IgnoredScope(patterns=[r".*mid_block\.attentions\..*"]),
        "every attention": nncf.IgnoredScope(patterns=[*sensitive, r".*attentions.*"], validate=False),
        "the whole mid block": nncf.IgnoredScope(patterns=[*sensitive, r".*mid_block.*"], validate=False),
        "the sensitive layers only": nncf.IgnoredScope(patterns=sensitive, validate=False),
        "validated: SD 1.5 has no add_embedding": nncf.IgnoredScope(
            patterns=[*sensitive, r".*mid_block\.attentions\..*"]
        ),
        "not a scope": [*sensitive, r".*mid_block\.attentions\..*"],
    }
    for name, answer in wrong.items():
        ns["keep_mid_attention"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="05.2: not quite"):
            run(check, ns, name)


def test_05_exercise_validation_function(convert):
    """05b's 05b.1: a validation function NNCF can call. The check draws through the notebook's
    ``draw_images``, stood in for here by images that depend on the item (so that an answer that
    mixes items up is caught), and compares with what NNCF expects back."""
    from sdaccel.cpu import quality

    _, unet_xml, _ = convert("tiny-sd15")
    solution, stub, check = exercise(NB05B, "05b.1")
    rng = np.random.default_rng(0)
    reference = [rng.integers(0, 256, (16, 16, 3), dtype=np.uint8) for _ in range(4)]

    def draw_images(unet, items):
        assert hasattr(unet, "create_infer_request"), "the check passes a compiled UNet"
        return [np.clip(reference[i].astype(int) + 8 * (i + 1), 0, 255).astype(np.uint8) for i in items]

    def namespace():
        return {
            "np": np,
            "quality": quality,
            "full_int8_xml": unet_xml,
            "unet_xml": unet_xml,
            "draw_images": draw_images,
            "ac_reference": reference,
            "all_items": [0, 1, 2, 3],
        }

    ns = run(solution, namespace())
    run(check, ns)  # right: no exception
    attendee = run(stub, namespace())
    with pytest.raises(ex.ExerciseNotDone, match="05b.1: not answered yet"):
        run(check, attendee)

    compiled = quality.compile_f32(unet_xml)

    def ssims(items):
        return [quality.ssim(reference[i], draw_images(compiled, [i])[0]) for i in items]

    wrong = {
        "the mean only": lambda unet, items: float(np.mean(ssims(items))),
        "values in the order of ACCURACY_PROMPTS": lambda unet, items: (
            float(np.mean(ssims(items))),
            ssims(sorted(items)),
        ),
        "indexed by position": lambda unet, items: (
            float(np.mean(ssims(range(len(items))))),
            [quality.ssim(reference[k], im) for k, im in enumerate(draw_images(unet, items))],
        ),
        "PSNR, not SSIM": lambda unet, items: (
            1.0,
            [quality.psnr(reference[i], draw_images(unet, [i])[0]) for i in items],
        ),
    }
    for name, answer in wrong.items():
        ns["validate_ssim"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="05b.1: not quite"):
            run(check, ns, name)
