"""sdaccel.toy.replayed_recipes: what the toy's accuracy control and sensitivity ranking kept in
float, as the knobs of full INT8 on another UNet of the same layout, refused where they do not fit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sdaccel.cpu.quantize import SENSITIVE_LAYER_PATTERNS
from sdaccel.toy import replayed_recipes

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
AC = replayed_recipes.ACCURACY_CONTROL
OP = "__module.unet.up_blocks.0.resnets.1.conv2/aten::_convolution/Convolution"


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def ranking(*groups: str) -> dict:
    return {"ranking": [{"group": g, "score": 0.5} for g in groups]}


def unet_with(*names: str):
    """An ov.Model whose operations carry ``names`` (a chain of ReLUs after one input)."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    node = x
    for name in names:
        node = ops.relu(node)
        node.set_friendly_name(name)
    return ov.Model([node], [x], "unet")


def test_accuracy_control_keeps_each_reverted_operation_with_smooth_quant_off(tmp_path):
    found = write(tmp_path / "ac.json", {"search": {"reverted": [OP, "conv1"]}})
    knobs = replayed_recipes.knobs(AC, found)
    assert knobs["smooth_quant_alpha"] is None  # as the search ran
    assert knobs["ignored"][: len(SENSITIVE_LAYER_PATTERNS)] == list(SENSITIVE_LAYER_PATTERNS)
    kept = replayed_recipes.kept_in_float(knobs)
    assert len(kept) == 2 and re.match(kept[0], OP)
    assert not re.match(kept[1], "conv10")  # one name each, not a prefix
    assert replayed_recipes.title(AC, knobs) == "full INT8, accuracy control's 2 operations in float"


def test_sensitive_k_keeps_the_k_costliest_groups(tmp_path):
    found = write(tmp_path / "rank.json", ranking("up_blocks.1.resnets.0", "other", "mid_block.attentions.0"))
    one = replayed_recipes.knobs("full_int8_sensitive_1", found)
    assert "smooth_quant_alpha" not in one  # the ranking's own recipe: SmoothQuant as full INT8 has it
    assert replayed_recipes.kept_in_float(one) == [r".*\bup_blocks\.1\.resnets\.0\b.*"]
    two = replayed_recipes.knobs("full_int8_sensitive_2", found)  # "other" has no pattern: skipped
    assert len(replayed_recipes.kept_in_float(two)) == 2
    assert (
        replayed_recipes.title("full_int8_sensitive_2", two) == "full INT8, 2 most sensitive groups in float"
    )
    with pytest.raises(ValueError, match="k must be between 0 and the 2 ranked groups, got 3"):
        replayed_recipes.knobs("full_int8_sensitive_3", found)


@pytest.mark.parametrize(
    "name", ["full_int8", "full_int8_sensitive_0", "full_int8_sensitive_", "int4_sensitive_2"]
)
def test_other_names_are_refused(tmp_path, name):
    assert not replayed_recipes.is_replayed(name)
    with pytest.raises(ValueError, match="is not a replayed recipe"):
        replayed_recipes.knobs(name, write(tmp_path / "x.json", ranking("a")))


def test_a_missing_or_mismatched_result_names_the_command_that_makes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"make it with `python -m sdaccel.toy.accuracy_control"):
        replayed_recipes.knobs(AC, tmp_path / "none.json")
    with pytest.raises(ValueError, match=r"has no search.reverted: .* sdaccel.toy.accuracy_control"):
        replayed_recipes.knobs(AC, write(tmp_path / "rank.json", ranking("a")))
    with pytest.raises(ValueError, match=r"has no ranking: .* sdaccel.toy.sensitivity_quality"):
        replayed_recipes.knobs(
            "full_int8_sensitive_4", write(tmp_path / "ac.json", {"search": {"reverted": []}})
        )


def test_a_unet_without_the_toys_layers_is_refused():
    knobs = {"ignored": [*SENSITIVE_LAYER_PATTERNS, re.escape(OP) + "$", r".*\bmid_block\b.*"]}
    replayed_recipes.check(unet_with(OP, "__module.unet.mid_block.attentions.0/MatMul"), AC, knobs)
    with pytest.raises(ValueError, match=r"no layer matching '.*conv2.*', nor 1 more of them: .*\(SD 1.5\)"):
        replayed_recipes.check(unet_with("__module.unet.down_blocks.1.resnets.0/Add"), AC, knobs)


@pytest.mark.parametrize("name", replayed_recipes.NAMES)
def test_the_committed_results_replay(name):
    """The benchmarks' defaults read: each names layers of the SD 1.5 layout."""
    knobs = replayed_recipes.knobs(name, replayed_recipes.found_file(name, RESULTS))
    kept = replayed_recipes.kept_in_float(knobs)
    assert kept and all("down_blocks" in p or "up_blocks" in p or "mid_block" in p for p in kept)
