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


def test_the_sampler_without_the_adapter_has_its_own_line_and_is_no_base():
    no_adapter = {**row("ov_f32", "lcm_no_adapter", 4, 0.95, lora=False), "scheduler": "LCMScheduler"}
    no_adapter["guidance_scale"] = 1.0
    rows = [*ROWS, no_adapter, {**no_adapter, "steps": 20, "score": 0.99}]
    lines = steps_report.format_table(rows).splitlines()
    assert lines[-1] == "| ov_f32 | LCM sampler, no adapter | 1 | 0.950 | 0.990 |"
    # the verdict compares the adapter with the base sampler, never with the LCM sampler alone
    assert steps_report.pipeline_verdicts(rows) == steps_report.pipeline_verdicts(ROWS)
    assert steps_report.sampler_label("base", "DDIMScheduler") == "base (DDIMScheduler)"
