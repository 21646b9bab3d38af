"""A child's record in a benchmark's results (``sdaccel.tools.measure.children``)."""

from __future__ import annotations

from sdaccel.core.processes import ChildRun
from sdaccel.tools.measure import children as B


def test_summarize_run_adds_the_medians_and_the_failure():
    run = ChildRun(
        result={"times": [3.0, 1.0, 2.0], "cpu_times": [6.0, 2.0, 4.0], "precision": "f32"},
        peak_rss_bytes=3 * 2**30,
        peak_anon_bytes=2**30,
        seconds=12.34,
        ok=True,
        samples=[2**30] * 100,
    )
    out = B.summarize_run(run, {"size_bytes": 10})
    assert out["ok"] and out["peak_rss_gb"] == 3.0 and out["peak_anon_gb"] == 1.0 and out["wall_s"] == 12.3
    assert out["s_per_step"] == 2.0 and out["cpu_s_per_step"] == 4.0 and out["size_bytes"] == 10
    assert out["rss_timeline_gb"] == [1.0] * 50  # the max of every 100 // 40 = 2 samples
    failed = B.summarize_run(ChildRun(error="stopped above the limit"))
    assert not failed["ok"] and failed["error"] == "stopped above the limit" and "s_per_step" not in failed
