"""The TPU plan's command line: a wrong argument fails before anything is compiled or written.

Its runs (killed, interrupted, two at once, reusing rows) are in ``tests/faults/test_tpu_faults.py``.
"""

import pytest

from sdaccel.tools.measure import tpu_plan


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topology", "v5e-3"], "Unknown TPU topology 'v5e-3'"),
        (["--batch", "0"], "must be positive"),
        (["--out", "plan.txt"], "must end in .json"),
        (["--config", "no-such-config"], "neither a reference config"),
    ],
)
def test_bad_arguments_fail_before_compiling(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises((SystemExit, ValueError)) as info:
        tpu_plan.parse_args(argv)
    assert message in str(info.value) + capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written
