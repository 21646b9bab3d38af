"""The results of ``benchmarks/bench_openvino.py`` as a text table (:func:`results_table`): per model,
each variant's seconds per UNet step and speed-ups, then the levers (:func:`lever_lines`,
:func:`tome_lines`, :func:`stack_lines`) and the quality parts (:func:`quality_lines`)."""

from __future__ import annotations


def results_table(results: dict) -> str:
    """The text table of a ``bench_openvino.py`` run: per model, each variant's seconds per UNet step
    and speed-ups (wall clock and CPU time), sizes and peaks, then the levers, the precision choice,
    the memory study, and the quality parts."""
    header = (
        f"{'model':10} {'variant':30} {'prec':5} {'s/step':>8} {'x torch':>8} {'x bf16':>7} {'x best':>7} "
        f"{'cpu s':>8} {'x torch':>8} {'x best':>7} {'size MB':>8} {'run GiB':>8} {'quant GiB':>9}"
    )
    lines = [
        f"{'':10} {'':30} {'':5} {'-- wall clock, median --':>33} {'-- CPU time, median --':>25}",
        header,
    ]
    for model, result in results["models"].items():
        for name, speed in result.get("speedup", {}).items():
            entry = result["variants"].get(name, {})
            quant = result["quantization"].get(name.split("@")[0], {})
            size = entry.get("size_bytes")
            lines.append(
                f"{model[:10]:10} {name:30} {entry.get('precision', ''):5} {speed['s_per_step']:8.2f} "
                f"{fmt(speed['vs_torch_fp32'], 8)} {fmt(speed['vs_ov_bf16'], 7)} "
                f"{fmt(speed.get('vs_best_float'), 7)} "
                f"{speed['cpu_s_per_step']:8.2f} {fmt(speed['cpu_vs_torch_fp32'], 8)} "
                f"{fmt(speed.get('cpu_vs_best_float'), 7)} {fmt(size / 1e6 if size else None, 8, 0)} "
                f"{fmt(entry.get('peak_rss_gb'), 8, 1)} {fmt(quant.get('peak_rss_gb'), 9, 1)}"
            )
        for name, quant in result["quantization"].items():
            if not quant.get("ok"):
                lines.append(f"{model[:10]:10} {name:30} quantization failed: {quant.get('error', '')[:80]}")
        if "best_float" in result:
            best = result["best_float"]
            lines.append(f"{model[:10]:10} best float: {best['chosen']} ({best['why']})")
        if "int8_float" in result:
            lines.append(
                f"{model[:10]:10} INT8 variants' float layers: {', '.join(result['int8_float']['timed'])} "
                f"(--int8-float {result['int8_float']['mode']})"
            )
        lines.extend(lever_lines(model, result))
        choose = result.get("precision_choice", {}).get("choose", {})
        if choose.get("ok"):
            lines.append(f"{model[:10]:10} precision by measurement:")
            lines.extend(f"{'':10} {line}" for line in choose["table"].splitlines())
        elif choose:
            lines.append(f"{model[:10]:10} precision by measurement failed: {choose.get('error', '')[:80]}")
        for name, run in result.get("memory_study", {}).items():
            status = "ok" if run.get("ok") else run.get("error", "")[:60]
            lines.append(
                f"{model[:10]:10} memory study: {name:32} peak RSS {run.get('peak_rss_gb', 0):5.1f} GiB "
                f"(anonymous {run.get('peak_anon_gb', 0):5.1f}) "
                f"{run.get('wall_s', 0):6.0f} s  {status}"
            )
    for checkpoint, quality in results.get("quality", {}).items():
        lines.extend(quality_lines(checkpoint, quality))
    return "\n".join(lines)


def lever_lines(model: str, result: dict) -> list[str]:
    """One line per lever setting: seconds per call, the ratio to the lever's reference arm (wall
    and CPU), and the max abs difference of its output from the reference's."""
    lines = []
    for lever, out in result.get("levers", {}).items():
        if lever in ("vae_int8", "tome", "stack"):
            continue
        if not out.get("ok"):
            lines.append(f"{model[:10]:10} lever {lever}: failed: {out.get('error', '')[:80]}")
            continue
        lines.append(
            f"{model[:10]:10} lever {lever} ({out['precision_asked']}, {out['rounds']} rounds, "
            f"reference: {out['reference']}):"
        )
        for name, arm in out["arms"].items():
            parallel = (
                f"  {arm['parallel']} in flight: {arm['s_per_call_parallel']:.3f} s per call"
                if "s_per_call_parallel" in arm
                else ""
            )
            lines.append(
                f"{'':10}   {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:5.2f}  "
                f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:5.2f}  "
                f"max |diff| {arm['max_abs_diff']:.1e}{parallel}"
            )
    lines.extend(tome_lines(model, result.get("levers", {}).get("tome")))
    lines.extend(stack_lines(model, result.get("levers", {}).get("stack")))
    vae = result.get("levers", {}).get("vae_int8")
    if vae:
        lines.append(
            f"{model[:10]:10} lever vae_int8 (decoder, batch 1, {vae['image_size']}x{vae['image_size']}):"
        )
        for name, row in vae["rows"].items():
            status = (
                f"{row['s_per_step']:9.3f} s  x{fmt(row.get('vs_float'), 5)} vs float  "
                f"cpu {row['cpu_s_per_step']:8.3f} s  ({row.get('precision', '')})"
                if row.get("ok")
                else f"failed: {row.get('error', '')[:60]}"
            )
            lines.append(f"{'':10}   {name:28} {status}")
    whole = result.get("whole_image")
    if whole:
        lines.append(f"{model[:10]:10} per image ({whole['steps']} UNet steps + one VAE decode, composed):")
        for name, row in whole["rows"].items():
            lines.append(
                f"{'':10}   {name:40} {row['s_per_image']:9.1f} s  x{fmt(row.get('vs_torch_fp32'), 5)} torch  "
                f"x{fmt(row.get('vs_best_float'), 5)} best float"
            )
    return lines


def tome_lines(model: str, tome: dict | None) -> list[str]:
    """Lever ``tome``: seconds per UNet call of each merged IR against the unmerged one, and how many
    tokens its merged self-attentions kept."""
    if not tome:
        return []
    if not tome.get("ok"):
        return [f"{model[:10]:10} lever tome: failed: {tome.get('error', '')[:80]}"]
    lines = [
        f"{model[:10]:10} lever tome ({tome['precision_asked']}, {tome['rounds']} rounds, "
        f"{tome['latent']}x{tome['latent']} latents, reference: {tome['reference']}):"
    ]
    for name, arm in tome["arms"].items():
        merged = tome["merged"].get(name.removeprefix("tome "), {}).get("merged_blocks", {})
        kept = (
            f"  self-attention over {sorted({b['attended'] for b in merged.values()})} of "
            f"{sorted({b['tokens'] for b in merged.values()})} tokens in {len(merged)} blocks"
            if merged
            else ""
        )
        lines.append(
            f"{'':10}   {name:28} {arm['s_per_call']:9.3f} s  x{arm['speedup']:5.2f}  "
            f"cpu {arm['cpu_s_per_call']:8.3f} s  x{arm['cpu_speedup']:5.2f}{kept}"
        )
    return lines


def stack_lines(model: str, stack: dict | None) -> list[str]:
    """Lever ``stack``: seconds per UNet step of each stack of float levers (:func:`compose_stack`)."""
    if not stack:
        return []
    if not stack.get("ok"):
        return [f"{model[:10]:10} lever stack: failed: {stack.get('error', '')[:80]}"]
    lines = [
        f"{model[:10]:10} lever stack ({stack['precision_asked']}, {stack['rounds']} rounds, "
        f"{stack['latent']}x{stack['latent']} latents; per UNet step, DeepCache averaged over N steps):"
    ]
    for name, row in stack["rows"].items():
        torch = f"  x{row['cpu_x_torch_fp32']:5.2f} torch (cpu)" if "cpu_x_torch_fp32" in row else ""
        lines.append(
            f"{'':10}   {name:36} {row['s_per_step']:9.3f} s  cpu {row['cpu_s_per_step']:8.3f} s  "
            f"x{row['cpu_x_best_float']:5.2f} best float (cpu){torch}"
        )
    return lines


def quality_lines(checkpoint: str, quality: dict) -> list[str]:
    lines = [f"quality on {checkpoint} ({quality['prompts']} held-out prompts):"]
    lines.append(f"  {'row':34} {'adherence':>9} {'PSNR dB':>8} {'SSIM':>6}  against")
    int8 = quality.get("int8_unet", {})
    for name, row in int8.get("rows", {}).items():
        pair = row.get("vs_ov_f32") or row.get("vs_torch_fp32") or {}
        against = "ov_f32" if "vs_ov_f32" in row else "torch_fp32"
        lines.append(
            f"  {'unet ' + name:34} {row['adherence']['score']:9.3f} {fmt(pair.get('psnr_mean'), 8, 1)} "
            f"{fmt(pair.get('ssim_mean'), 6, 3)}  {against if pair else ''}"
        )
    for name, row in quality.get("deepcache", {}).get("rows", {}).items():
        lines.append(
            f"  {'deepcache ' + name:34} {row['adherence']['score']:9.3f} {fmt(row.get('psnr_mean'), 8, 1)} "
            f"{fmt(row.get('ssim_mean'), 6, 3)}  {'f32 (no cache)' if 'ssim_mean' in row else ''}"
        )
    for name, row in quality.get("tome", {}).get("rows", {}).items():
        if name != "f32":
            lines.append(
                f"  {'unet ' + name:34} {row['adherence']['score']:9.3f} {fmt(row.get('psnr_mean'), 8, 1)} "
                f"{fmt(row.get('ssim_mean'), 6, 3)}  f32 (unmerged)"
            )
    for name, row in quality.get("vae_int8", {}).get("rows", {}).items():
        pair = row.get("vs_f32", {})
        lines.append(
            f"  {'vae decoder ' + name:34} {row['adherence']['score']:9.3f} {fmt(pair.get('psnr_mean'), 8, 1)} "
            f"{fmt(pair.get('ssim_mean'), 6, 3)}  {'f32 decoder' if pair else ''}"
        )
    for lever, arms in quality.get("levers_max_abs_diff", {}).items():
        if isinstance(arms, dict) and lever not in (
            "ok",
            "peak_rss_gb",
            "peak_anon_gb",
            "wall_s",
            "load_avg",
        ):
            worst = max((arm["max_abs_diff"] for arm in arms.values() if isinstance(arm, dict)), default=None)
            if worst is not None:
                lines.append(
                    f"  lever {lever:28} max abs diff of the UNet output from its reference: {worst:.1e}"
                )
    for name, part in quality.items():
        if isinstance(part, dict) and part.get("ok") is False:
            lines.append(f"  {name}: failed: {part.get('error', '')[:80]}")
    return lines


def fmt(value, width: int, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"
