"""Token merging's quality report: its text table, and bad settings refused before anything is
exported. (The measurement itself runs in benchmarks/bench_openvino.py --quality.)"""

import pytest

from sdaccel.toy import tome_quality

ADHERENCE = {"score": 0.9375, "colour": 1.0, "shape": 0.9375}
RESULT = {
    "rows": {
        "f32": {"adherence": ADHERENCE, "s_per_image": 0.05123, "unet_s_per_image": 0.04},
        "f32+tome(0.5)": {
            "adherence": ADHERENCE,
            "s_per_image": 0.04,
            "unet_s_per_image": 0.03,
            "psnr_mean": 31.25,
            "ssim_mean": 0.95,
        },
    }
}


def test_format_table():
    assert tome_quality.format_table(RESULT).splitlines() == [
        "configuration       score colour  shape  PSNR dB   SSIM  s/image",
        "f32                 0.938  1.000  0.938        -      -   0.0512",
        "f32+tome(0.5)       0.938  1.000  0.938     31.2  0.950   0.0400",
    ]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"ratios": ()}, "ratios is empty"),
        ({"num_prompts": 0}, "num_prompts and steps must be >= 1"),
        ({"steps": 0}, "num_prompts and steps must be >= 1"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_exported(tmp_path, settings, message):
    work = tmp_path / "work"
    with pytest.raises(ValueError, match=message):
        tome_quality.measure(tmp_path / "no-checkpoint", work, **settings, progress=False)
    assert not work.exists()


def test_a_bad_ratio_is_refused_before_anything_is_exported(tmp_path):
    work = tmp_path / "work"
    with pytest.raises(ValueError):
        tome_quality.measure(tmp_path / "no-checkpoint", work, ratios=(1.5,), progress=False)
    assert not work.exists()
