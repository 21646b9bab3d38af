"""sdaccel.toy.accuracy_control's checks: the search's and the judge's halves of the held-out
prompts never share one, and a bad request is refused before anything is exported or written.
The search itself is tested on a small IR (tests/cpu/test_accuracy_control.py) and runs on the
toy in notebook 05's smoke run; the toy's full run is the committed JSON's command."""

from pathlib import Path

import pytest

from sdaccel.toy import accuracy_control

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = REPO / "checkpoints" / "tiny-shapes-sd15"


def test_the_two_halves_never_share_a_prompt_and_too_many_is_refused():
    search, judge = accuracy_control.split_heldout(31)
    assert len(search) == len(judge) == 31 and not set(search) & set(judge)
    with pytest.raises(ValueError, match="32 prompts per half: use 1 to 31"):
        accuracy_control.split_heldout(32)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-drop", "0"], "--max-drop must be in (0, 1)"),
        (["--max-drop", "1.5"], "--max-drop must be in (0, 1)"),
        (["--prompts", "0"], "--prompts, --steps, --ranking-subset, --max-iterations >= 1"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit):
        accuracy_control.main(["--checkpoint", str(CHECKPOINT), "--work-dir", str(tmp_path / "w"), *args])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_measure_refuses_a_bad_request_before_exporting(tmp_path):
    with pytest.raises(ValueError, match="unknown accuracy-control variant"):
        accuracy_control.measure(CHECKPOINT, tmp_path / "w", "int8_weights")
    with pytest.raises(ValueError, match=r"max_drop must be a number in \(0, 1\)"):
        accuracy_control.measure(CHECKPOINT, tmp_path / "w", max_drop=0.0)
    with pytest.raises(ValueError, match="40 prompts per half"):
        accuracy_control.measure(CHECKPOINT, tmp_path / "w", num_prompts=40)
    assert not (tmp_path / "w").exists()


def test_a_replay_is_refused_before_anything_runs_when_there_is_nothing_to_replay(tmp_path, capsys):
    not_json = tmp_path / "notes.txt"
    not_json.write_text("no JSON here")
    with pytest.raises(SystemExit):
        accuracy_control.main(
            ["--checkpoint", str(CHECKPOINT), "--work-dir", str(tmp_path / "w"), "--replay", str(not_json)]
        )
    assert "is not a result of python -m sdaccel.toy.accuracy_control" in capsys.readouterr().err
    hybrid = {"variant": "hybrid", "reverted": ["conv0"]}
    with pytest.raises(ValueError, match="Nothing to replay for full_int8: the result's search ran 'hybrid'"):
        accuracy_control.measure(CHECKPOINT, tmp_path / "w", replay=hybrid)
    with pytest.raises(ValueError, match="reverted 0 operations"):
        accuracy_control.measure(CHECKPOINT, tmp_path / "w", replay={"variant": "full_int8", "reverted": []})
    assert not (tmp_path / "w").exists()


def test_a_replay_of_operations_the_toy_lacks_is_refused_before_calibration(tmp_path):
    """A search of another layout names operations this toy does not have: refused once the toy is
    exported (its operations are read from the IR), before any calibration or quantization."""
    other = {"variant": "full_int8", "reverted": ["__module.unet.mid_block.attentions.9/aten::linear/MatMul"]}
    with pytest.raises(ValueError, match="1 of the 1 operations to keep in float are not in this UNet"):
        accuracy_control.measure(CHECKPOINT, tmp_path / "w", replay=other)
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["openvino"]


def test_the_committed_search_can_be_replayed():
    found = accuracy_control.replayed_search(
        REPO / "benchmarks" / "results" / "accuracy_control_tiny-shapes-sd15.json"
    )
    assert found["variant"] == "full_int8" and found["reverted"]
    assert found["found_on"].endswith(")") and found["file"] == "accuracy_control_tiny-shapes-sd15.json"
