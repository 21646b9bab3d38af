"""Accuracy-controlled INT8 on the trained SD 1.5-layout shapes checkpoint, at a smoke size: the
search validates on one half of the held-out prompts, and its result keeps ``max_drop`` on the
other half, which it never saw."""

from pathlib import Path

import pytest

from sdaccel.toy import accuracy_control

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = REPO / "checkpoints" / "tiny-shapes-sd15"
#: The smoke size: prompts per half, steps, prompts that rank each group, groups reverted at most.
SMOKE = dict(num_prompts=16, steps=20, ranking_subset_size=4, max_num_iterations=1, timing_iters=3)


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
