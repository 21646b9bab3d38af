"""Exercise 04.3, ask for f16 and read back what ran: ``(config, compiled, ran)``, the compile
properties asking for f16, the VAE decoder compiled with them, and the name of the precision it
reports. The compiled model is part of the answer, so a hard-coded ``"f16"`` without a compile no
longer passes on a CPU that runs f16; ``ran`` must be what this CPU runs. The VAE decoder is a
small stand-in IR built here (its input named as the export's), so the test runs in seconds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from sdaccel.course import exercises as ex  # noqa: E402
from sdaccel.cpu.export import MODEL_XML  # noqa: E402
from sdaccel.cpu.precision_timing import precision_name  # noqa: E402

NB04 = Path(__file__).resolve().parents[2] / "notebooks" / "04_openvino_export_and_run.ipynb"


def tiny_ir(path: Path, input_name: str, shape: list[int]) -> Path:
    """A one-convolution model saved as an IR at ``path``."""
    from openvino import opset13 as ops

    x = ops.parameter(shape, np.float32, name=input_name)
    weights = ops.constant(np.random.default_rng(0).standard_normal((3, shape[1], 3, 3)).astype(np.float32))
    y = ops.convolution(x, weights, [1, 1], [1, 1], [1, 1], [1, 1])
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.Model([y], [x], path.parent.name), path)
    return path


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """What the notebook holds at the exercise: its Core, the export folder (a stand-in VAE decoder
    and text encoder), MODEL_XML and precision_name."""
    export_dir = tmp_path_factory.mktemp("nb04") / "export"
    tiny_ir(export_dir / "vae_decoder" / MODEL_XML, "latent_sample", [1, 4, 8, 8])
    tiny_ir(export_dir / "unet" / MODEL_XML, "sample", [1, 4, 8, 8])
    return {
        "ov": ov,
        "core": ov.Core(),
        "export_dir": export_dir,
        "MODEL_XML": MODEL_XML,
        "precision_name": precision_name,
    }


def run(code: str, ns: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), ns)
    return ns


def test_exercise_04_3_solution_passes_and_the_stub_is_not_answered(notebook, capsys):
    solution, stub, check = ex.exercise_cells(NB04, "04.3")
    ns = run(solution, dict(notebook), "04.3 solution")
    run(check, ns, "04.3 check")
    assert "Exercise 04.3: right" in capsys.readouterr().out
    config, compiled, ran = ns["f16_answer"]
    assert config == {"INFERENCE_PRECISION_HINT": "f16"} and ran in ("f16", "bf16", "f32")
    assert ran == precision_name(compiled.get_property("INFERENCE_PRECISION_HINT"))

    with pytest.raises(ex.ExerciseNotDone, match="04.3: not answered yet"):
        run(check, run(stub, dict(notebook)))


def test_exercise_04_3_wrong_answers_fail(notebook):
    _, _, check = ex.exercise_cells(NB04, "04.3")
    ns = dict(notebook)
    core, export_dir = ns["core"], ns["export_dir"]
    vae, unet = export_dir / "vae_decoder" / MODEL_XML, export_dir / "unet" / MODEL_XML
    f16 = {"INFERENCE_PRECISION_HINT": "f16"}
    compiled = core.compile_model(vae, "CPU", f16)
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    ran = precision_name(hint)
    f32 = core.compile_model(vae, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    wrong = {
        "hard-coded, nothing compiled": (f16, None, "f16"),
        "the hint's name, no model": (f16, "f16"),
        "the old (config, ran) pair": (f16, ran),
        "the ov.Type, not its name": (f16, compiled, hint),
        "the model read, not compiled": (f16, core.read_model(vae), ran),
        "another model compiled": (f16, core.compile_model(unet, "CPU", f16), ran),
        "config asking for f32": ({"INFERENCE_PRECISION_HINT": "f32"}, compiled, ran),
        "no hint in the config": ({}, compiled, ran),
        "what was asked, not what ran": (f16, compiled, "f16" if ran != "f16" else "f32"),
    }
    if ran != "f32":  # this CPU computes f16 (or bf16) when asked: an f32 compile is another answer
        wrong["compiled with f32, config saying f16"] = (f16, f32, "f32")
    for name, answer in wrong.items():
        ns["f16_answer"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="04.3: not quite"):
            run(check, ns, name)
            pytest.fail(f"a wrong answer passed: {name}")

    ns["f16_answer"] = ({"INFERENCE_PRECISION_HINT": ov.Type.f16}, compiled, ran)  # the hint as an ov.Type
    run(check, ns, "right, the hint as an ov.Type")
