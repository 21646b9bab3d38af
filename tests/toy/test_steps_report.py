"""The steps sweep's report: its Markdown table (through sdaccel.core.tables) and its verdicts."""

from sdaccel.toy import steps_report


def row(pipeline, sampler, steps, score, lora=None, scheduler="EulerDiscreteScheduler", guidance=6.0):
    return {
        "pipeline": pipeline,
        "sampler": sampler,
        "scheduler": "LCMScheduler" if sampler == "lcm" else scheduler,
        "lora": sampler == "lcm" if lora is None else lora,
        "steps": steps,
        "guidance_scale": 1.0 if sampler == "lcm" else guidance,
        "score": score,
        "colour": min(1.0, score + 0.01),
    }


ROWS = [
    row("jax_fp32", "base", 4, 0.302),
    row("jax_fp32", "base", 20, 0.99),
    row("jax_fp32", "lcm", 4, 0.969),
    row("ov_f32", "base", 20, 0.98),
    row("ov_f32", "lcm", 4, 0.9),
]


def test_format_table_one_line_per_pipeline_and_sampler():
    assert steps_report.format_table(ROWS) == "\n".join(
        [
            "| pipeline | sampler | guidance | 4 steps | 20 steps |",
            "|---|---|---|---|---|",
            "| jax_fp32 | base (EulerDiscreteScheduler) | 6 | 0.302 | 0.990 |",
            "| jax_fp32 | LCM-LoRA (LCM) | 1 | 0.969 | - |",
            "| ov_f32 | base (EulerDiscreteScheduler) | 6 | - | 0.980 |",
            "| ov_f32 | LCM-LoRA (LCM) | 1 | 0.900 | - |",
        ]
    )


def test_format_table_of_another_key():
    table = steps_report.format_table(ROWS[:2], key="colour")
    assert table.splitlines()[-1] == "| jax_fp32 | base (EulerDiscreteScheduler) | 6 | 0.312 | 1.000 |"


def test_pipeline_verdicts_against_the_base_at_its_most_steps():
    assert steps_report.pipeline_verdicts(ROWS) == [
        "jax_fp32 0.969 against 0.990 at 20 (2.1 points below, met)",
        "ov_f32 0.900 against 0.980 at 20 (8.0 points below, missed)",
    ]
    # a pipeline without the adapter at 4 steps says nothing
    assert steps_report.pipeline_verdicts(ROWS[:2]) == []
