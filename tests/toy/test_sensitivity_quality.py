"""The sensitivity report on the trained SD 1.5-layout shapes checkpoint, at a smoke size (4 of
the 14 groups, 2 prompts to rank them, 2 others to judge, 4 steps, k = 1): the ranking chooses the groups that the recipe keeps
in float, and the recipes are judged on prompts and noise that did not rank them."""

from pathlib import Path

import pytest

from sdaccel.toy import dataset, sensitivity_quality

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = REPO / "checkpoints" / "tiny-shapes-sd15"


@pytest.mark.slow
def test_the_recipe_keeps_the_top_ranked_groups_in_float(tmp_path):
    groups = (
        "down_blocks.0.resnets.0",
        "mid_block.attentions.0",
        "up_blocks.1.resnets.0",
        "up_blocks.1.resnets.1",
    )
    result = sensitivity_quality.measure(
        CHECKPOINT, tmp_path, num_prompts=2, rank_prompts=2, ks=(1,), steps=4, groups=groups
    )
    assert sorted(r["group"] for r in result["ranking"]) == sorted(groups)
    assert result["settings"]["groups"] == list(groups)
    ranking, rows = result["ranking"], result["rows"]
    assert list(rows) == ["f32", "full_int8", "full_int8, 1 most sensitive in float"]
    # ranked by the adherence of each group alone first, then by its output error
    keys = [(r["score"], -r["error"]) for r in ranking]
    assert keys == sorted(keys) and all(r["error"] > 0 for r in ranking)
    top = [r["group"] for r in ranking if r["group"] != "other"]
    assert rows["full_int8, 1 most sensitive in float"]["float_groups"] == top[:1]
    # the group kept in float takes its quantizers out of the UNet
    top_quantizers = next(r["quantizers"] for r in ranking if r["group"] == top[0])
    assert rows["f32"]["fake_quantize"] == 0
    assert rows["full_int8, 1 most sensitive in float"]["fake_quantize"] < rows["full_int8"]["fake_quantize"]
    assert top_quantizers > 0
    assert rows["f32"]["psnr_mean"] is None and all(rows[n]["psnr_mean"] > 15 for n in list(rows)[1:])
    assert all(0 <= row["adherence"] <= 1 and row["unet_s"] > 0 and row["x_f32"] > 0 for row in rows.values())
    assert rows["f32"]["x_f32"] == 1.0
    # the judging prompts are not the ranking ones
    assert dataset.heldout_prompts(2, seed=0) != dataset.heldout_prompts(2, seed=1)
    tables = sensitivity_quality.format_tables(result)
    assert "| group | quantizers | UNet output error | adherence (2 prompts) |" in tables
    assert "| full_int8, 1 most sensitive in float |" in tables


def test_bad_arguments_are_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sensitivity_quality.main([str(CHECKPOINT), "--prompts", "0", "--work-dir", str(tmp_path / "w")])
    assert "--prompts and --rank-prompts must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
