"""The exercises of notebook 05 and of its appendix 05b whose answers are library code, run as they
stand in the notebooks on the tiny UNet: the solution passes, the attendee's copy is "not answered
yet", and the wrong answers a learner would give fail.

- 05's 05.1 works from what the run left on disk (the full-day agenda does the exercises in a fresh
  kernel, after reading the finished copy): the cell that reloads it is run here too.
- 05b's 05b.2 keeps the two costliest groups of the sensitivity ranking in float.
(05's 05.2 and 05b's 05b.1 are in tests/cpu/test_lesson_cells.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ov = pytest.importorskip("openvino")
nncf = pytest.importorskip("nncf")

from sdaccel.course import exercises as ex  # noqa: E402
from sdaccel.cpu import quantize, sensitivity  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NB05 = NOTEBOOKS / "05_int8_quantization.ipynb"
NB05B = NOTEBOOKS / "05b_int8_under_constraints.ipynb"
RELOAD_CELL = "# What the exercises use, read back from the output folder"


def run(code: str, namespace: dict, name: str = "<cell>") -> dict:
    exec(compile(code, name, "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def finished_run(convert, tmp_path_factory):
    """What notebook 05 leaves behind for its exercises: the f32 IR in the shared export folder,
    the quantized UNets and results.json in OUTPUT_DIR (one recipe is enough for the sizes)."""
    from sdaccel.cpu.export import MODEL_XML, default_export_dir

    _, xml, samples = convert("tiny-sd15")
    root = tmp_path_factory.mktemp("outputs")
    output_dir = root / "05_int8_quantization"
    output_dir.mkdir()
    model_id = "org/model"
    unet_xml = default_export_dir(model_id, "fp32", root / "openvino") / "unet" / MODEL_XML
    unet_xml.parent.mkdir(parents=True)
    ov.save_model(ov.Core().read_model(xml), unet_xml, compress_to_fp16=False)
    quantized = quantize.quantize_variant(
        ov.Core().read_model(unet_xml), "int8_weights", samples, len(samples)
    )
    ov.save_model(quantized, output_dir / "unet_int8_weights.xml", compress_to_fp16=False)
    sizes = {"fp32": quantize.ir_size_bytes(unet_xml)}
    sizes["int8_weights"] = quantize.ir_size_bytes(output_dir / "unet_int8_weights.xml")
    results = {"size_bytes": sizes, "variants": ["int8_weights"]}
    (output_dir / "results.json").write_text(json.dumps(results))
    return {"MODEL_ID": model_id, "OUTPUT_DIR": str(output_dir)}


def test_05_exercise_sizes_in_a_fresh_kernel(finished_run):
    solution, stub, check = ex.exercise_cells(NB05, "05.1")
    reload = ex.code_cell(NB05, RELOAD_CELL)

    ns = run(reload, dict(finished_run), "05 reload")  # a fresh kernel: the parameters and this cell
    assert set(ns["quantized"]) == {"int8_weights"} and ns["kept_in_float"]
    run(check, run(solution, ns))  # right: no exception

    attendee = run(stub, run(reload, dict(finished_run)))
    with pytest.raises(ex.ExerciseNotDone, match="05.1: not answered yet"):
        run(check, attendee)
    unet_xml, xml = ns["unet_xml"], ns["quantized"]["int8_weights"]
    f32, int8 = quantize.ir_size_bytes(unet_xml), quantize.ir_size_bytes(xml)
    wrong = {
        "upside down": {"int8_weights": int8 / f32},
        "the .xml files only": {"int8_weights": unet_xml.stat().st_size / xml.stat().st_size},
        "the bytes saved": {"int8_weights": f32 - int8},
        "a number, not a dict": f32 / int8,
    }
    for name, answer in wrong.items():
        ns["shrink"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="05.1: not quite"):
            run(check, ns, name)


def test_05b_exercise_keep_the_costliest_groups(convert):
    _, unet_xml, _ = convert("tiny-sd15")
    solution, stub, check = ex.exercise_cells(NB05B, "05b.2")
    groups = sorted({sensitivity.group_of(n) for n in quantize.matching_layers(unet_xml, [".*"])})
    groups = [g for g in groups if g != sensitivity.OTHER]
    assert len(groups) >= 4, groups
    # a ranking as rank_groups returns it, costliest first, with the ungrouped quantizers among them
    ranking = [{"group": g} for g in (groups[2], sensitivity.OTHER, groups[0], *groups[3:], groups[1])]
    top_groups = [row["group"] for row in ranking if row["group"] != sensitivity.OTHER][:2]
    assert top_groups == [groups[2], groups[0]]

    def namespace():
        return {
            "nncf": nncf,
            "quantize": quantize,
            "sensitivity": sensitivity,
            "unet_xml": unet_xml,
            "group_ranking": ranking,
            "top_groups": top_groups,
        }

    ns = run(solution, namespace())
    run(check, ns)  # right: no exception
    kept = set(quantize.ignored_layers(unet_xml, ns["keep_costliest"]))
    assert kept > set(quantize.matching_layers(unet_xml))
    everything = quantize.matching_layers(unet_xml, [".*"])
    assert {n for n in everything if sensitivity.group_of(n) in top_groups} <= kept

    attendee = run(stub, namespace())
    with pytest.raises(ex.ExerciseNotDone, match="05b.2: not answered yet"):
        run(check, attendee)
    sensitive = list(quantize.SENSITIVE_LAYER_PATTERNS)

    def scope(*patterns, validate=False):
        return nncf.IgnoredScope(patterns=list(patterns), validate=validate)

    wrong = {
        "the groups only": scope(*sensitivity.float_group_patterns(ranking, 2)),
        "the sensitive layers only": scope(*sensitive),
        "the costliest group only": scope(*sensitive, *sensitivity.float_group_patterns(ranking, 1)),
        "the two cheapest": scope(*sensitive, *(rf".*\b{g}\b.*" for g in (groups[1], groups[-1]))),
        "every ranked group": scope(*sensitive, *sensitivity.float_group_patterns(ranking, len(groups))),
        "validated: SD 1.5 has no add_embedding": scope(
            *sensitive, *sensitivity.float_group_patterns(ranking, 2), validate=True
        ),
        "not a scope": [*sensitive, *sensitivity.float_group_patterns(ranking, 2)],
    }
    for name, answer in wrong.items():
        ns["keep_costliest"] = answer
        with pytest.raises(ex.ExerciseNotDone, match="05b.2: not quite"):
            run(check, ns, name)
