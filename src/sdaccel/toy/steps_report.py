"""What a sweep of prompt adherence against steps says: its Markdown table and, per pipeline, the
adapter at 4 steps against the base sampler at its most steps.

The rows are those of :func:`sdaccel.toy.adherence_steps.adherence_vs_steps` (one per pipeline x
sampler x step count); the sweep's command line prints the table, and the LCM-LoRA's model card
(:mod:`sdaccel.tools.toys.model_card`) quotes both. Light: no framework imports.
"""

from __future__ import annotations

from sdaccel.core.tables import markdown_table


def sampler_label(sampler: str, scheduler: str) -> str:
    """How a sweep's ``sampler`` reads in its tables and charts: ``"LCM-LoRA (LCM)"``, ``"LCM
    sampler, no adapter"``, or ``"base (<the checkpoint's scheduler>)"``."""
    if sampler == "lcm":
        return "LCM-LoRA (LCM)"
    if sampler == "lcm_no_adapter":
        return "LCM sampler, no adapter"
    return f"base ({scheduler})"


def format_table(rows: list[dict], key: str = "score") -> str:
    """A Markdown table: one line per pipeline x sampler, one column per step count."""
    steps = sorted({r["steps"] for r in rows})
    groups: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        groups.setdefault((r["pipeline"], r["sampler"], r["guidance_scale"]), {})[r["steps"]] = r
    lines = []
    for (pipeline, sampler, guidance), by_steps in groups.items():
        label = sampler_label(sampler, by_steps[min(by_steps)]["scheduler"])
        cells = [f"{by_steps[s][key]:.3f}" if s in by_steps else "-" for s in steps]
        lines.append([pipeline, label, f"{guidance:g}", *cells])
    return markdown_table(["pipeline", "sampler", "guidance", *(f"{s} steps" for s in steps)], lines)


def pipeline_verdicts(rows: list[dict]) -> list[str]:
    """Per pipeline of a steps sweep: the adapter at 4 steps against the base at its most steps."""
    out = []
    for pipeline in dict.fromkeys(r["pipeline"] for r in rows):
        base = [r for r in rows if r["pipeline"] == pipeline and r["sampler"] == "base"]
        lcm = [r for r in rows if r["pipeline"] == pipeline and r["sampler"] == "lcm" and r["steps"] == 4]
        if not base or not lcm:
            continue
        top = max(base, key=lambda r: r["steps"])
        gap = 100 * (top["score"] - lcm[0]["score"])
        met = "met" if gap <= 5 else "missed"
        where = "below" if gap > 0 else "above"
        out.append(
            f"{pipeline} {lcm[0]['score']:.3f} against {top['score']:.3f} at {top['steps']} "
            f"({abs(gap):.1f} points {where}, {met})"
        )
    return out
