"""DeepCache's quality report: its text table, and the command line's required checkpoint. (The
measurement itself runs in benchmarks/bench_openvino.py --quality; DeepCache on the trained
checkpoints is checked in tests/cpu/test_deepcache.py.)"""

import pytest

from sdaccel.toy import deepcache_quality

ADHERENCE = {"score": 1.0, "colour": 1.0, "shape": 0.9375}
RESULT = {
    "rows": {
        "f32": {
            "adherence": ADHERENCE,
            "unet_calls_per_image": {"full": 20.0, "shallow": 0.0},
            "s_per_image": 0.05123,
            "unet_s_per_image": 0.04,
        },
        "f32+deepcache(N=2)": {
            "adherence": ADHERENCE,
            "unet_calls_per_image": {"full": 10.0, "shallow": 10.0},
            "s_per_image": 0.03,
            "unet_s_per_image": 0.02,
            "psnr_mean": 42.54,
            "ssim_mean": 0.9921,
        },
    }
}


def test_format_table():
    assert deepcache_quality.format_table(RESULT).splitlines() == [
        "configuration               score colour  shape  PSNR dB   SSIM  full shallow  s/image  UNet s",
        "f32                         1.000  1.000  0.938        -      -  20.0     0.0   0.0512  0.0400",
        "f32+deepcache(N=2)          1.000  1.000  0.938     42.5  0.992  10.0    10.0   0.0300  0.0200",
    ]


def test_the_command_line_needs_a_checkpoint(capsys):
    with pytest.raises(SystemExit):
        deepcache_quality.main([])
    assert "--checkpoint" in capsys.readouterr().err
