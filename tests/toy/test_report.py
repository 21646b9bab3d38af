"""sdaccel.toy.report.finish: the machine and the command recorded, the JSON whole (or one
checkpoint's entry replaced, the others kept), the table printed."""

import json

import pytest

from sdaccel.toy import report


def test_a_result_is_stamped_written_whole_and_its_table_printed(tmp_path, capsys):
    out = tmp_path / "deep" / "result.json"
    result = report.finish(
        {"rows": {"f32": 1.0}}, out, "| table |", "sdaccel.toy.example", ["--prompts", "4"]
    )
    written = json.loads(out.read_text())
    assert written == result
    assert written["command"] == "python -m sdaccel.toy.example --prompts 4"
    from sdaccel.core import env
    from sdaccel.cpu.families import isa_tier

    assert written["machine"]["isa"] == isa_tier(env.cpu_features())
    assert {"cpu", "logical_cores", "openvino", "nncf"} <= set(written["machine"])
    assert capsys.readouterr().out == f"| table |\nwrote {out}\n"


def test_per_checkpoint_replaces_only_that_checkpoints_entry(tmp_path):
    out = tmp_path / "quality.json"
    out.write_text(json.dumps({"models": {"other": {"kept": True}, "toy": {"old": True}}}))
    report.finish({"checkpoint": "/x/toy", "new": 1}, out, "", "m", [], per_checkpoint=True)
    models = json.loads(out.read_text())["models"]
    assert models["other"] == {"kept": True}
    assert models["toy"]["new"] == 1 and "old" not in models["toy"]


def test_a_write_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "result.json"
    out.write_text('{"old": true}')

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", full_disk)
    monkeypatch.setattr(json, "dumps", full_disk)
    with pytest.raises(OSError):
        report.finish({"new": 1}, out, "", "m", [])
    assert json.loads(out.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
