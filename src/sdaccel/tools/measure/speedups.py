"""A benchmark's results composed: each variant's speed-ups over PyTorch fp32, bf16 and the best
float (:func:`add_speedups`), seconds per image from the measured parts (:func:`add_whole_image`),
and lever ``stack``'s seconds per step of the float levers stacked (:func:`compose_stack`)."""

from __future__ import annotations

from sdaccel.cpu.deepcache import lever_name
from sdaccel.tools.measure.models import VAE_VARIANTS


def add_speedups(result: dict) -> None:
    variants = result["variants"]
    rows = dict(variants)
    for base, entry in result.get("deepcache", {}).items():
        if isinstance(entry, dict) and "avg_s_per_step" in entry:
            for n, s in entry["avg_s_per_step"].items():
                cpu = entry["avg_cpu_s_per_step"][n]
                rows[f"{base}+deepcache(N={n})"] = {"s_per_step": s, "cpu_s_per_step": cpu, "ok": True}
    rows = {name: entry for name, entry in rows.items() if entry.get("ok") and entry.get("s_per_step")}

    def ratio(base: str | None, name: str, key: str):
        return rows[base][key] / rows[name][key] if base in rows else None

    best = result.get("best_float", {}).get("variant")
    result["speedup"] = {
        name: {
            "s_per_step": entry["s_per_step"],
            "cpu_s_per_step": entry["cpu_s_per_step"],
            "vs_torch_fp32": ratio("torch_fp32", name, "s_per_step"),
            "vs_ov_bf16": ratio("ov_bf16", name, "s_per_step"),
            "vs_best_float": ratio(best, name, "s_per_step"),
            "cpu_vs_torch_fp32": ratio("torch_fp32", name, "cpu_s_per_step"),
            "cpu_vs_ov_bf16": ratio("ov_bf16", name, "cpu_s_per_step"),
            "cpu_vs_best_float": ratio(best, name, "cpu_s_per_step"),
        }
        for name, entry in rows.items()
    }


def add_whole_image(result: dict, steps: int) -> None:
    """Seconds per image composed from the measured parts: ``steps`` UNet steps (batch 2, one
    guided image) plus one VAE decode (lever ``vae_int8``): PyTorch's decoder for ``torch_fp32``,
    the decoder in the best float for the OpenVINO rows, and each INT8 decoder beside the fastest
    UNet row. The text encoder (one call per image, well under a UNet step) is left out."""
    vae = result.get("levers", {}).get("vae_int8", {}).get("rows", {})
    vae = {name: row["s_per_step"] for name, row in vae.items() if row.get("ok")}
    float_vae = vae.get(result.get("best_float", {}).get("chosen"))
    speed = result.get("speedup", {})
    if float_vae is None or not speed:
        return
    rows = {}
    for name, entry in speed.items():
        decoder = vae.get("torch_fp32") if name == "torch_fp32" else float_vae
        if decoder is not None:
            rows[name] = {"unet_s": steps * entry["s_per_step"], "vae_s": decoder, "vae": "float"}
    fastest = min((n for n in speed if n != "torch_fp32"), key=lambda n: speed[n]["s_per_step"])
    for variant in VAE_VARIANTS:
        if variant in vae:
            rows[f"{fastest} + vae {variant}"] = {
                "unet_s": steps * speed[fastest]["s_per_step"],
                "vae_s": vae[variant],
                "vae": variant,
            }
    best = result.get("best_float", {}).get("variant")
    for row in rows.values():
        row["s_per_image"] = row["unet_s"] + row["vae_s"]
    for row in rows.values():
        for base in ("torch_fp32", best):
            if base in rows:
                row[f"vs_{'torch_fp32' if base == 'torch_fp32' else 'best_float'}"] = (
                    rows[base]["s_per_image"] / row["s_per_image"]
                )
    result["whole_image"] = {"steps": steps, "rows": rows}


#: The four UNets that lever ``stack`` times (:func:`compose_stack`'s arms), by role.
STACK_ARMS = ("full", "shallow", "merged", "merged shallow")

#: The INT8 arms that lever ``stack`` times as well when asked (``--stack-int8``): the UNet and
#: DeepCache's shallow UNet quantized by one recipe.
STACK_INT8_ARMS = ("int8", "int8 shallow")

#: DeepCache's shallow UNet of the layer cut (:data:`sdaccel.cpu.deepcache.CUTS`), timed as well when
#: asked (``--deepcache-layer-cut``), in float: the stacks keep it so after an INT8 UNet too
#: (:data:`sdaccel.cpu.deepcache.QUANTIZED_PARTS`).
STACK_LAYER_ARM = "layer shallow"


def compose_stack(arms: dict, ratio: float, intervals, torch_fp32: dict | None = None) -> dict:
    """Seconds per UNet step of the float levers stacked, from the four UNets of :data:`STACK_ARMS`
    timed side by side (``arms``: ``time_tome``'s rows by role): the UNet; DeepCache at each of
    ``intervals`` N, a step averaging ``(t_full + (N - 1) t_shallow) / N``; token merging at
    ``ratio``; and both, the merged UNet on full steps and the merged shallow UNet between them.
    Where ``arms`` has both of :data:`STACK_INT8_ARMS`, also INT8 alone and with DeepCache at each
    interval (not with merging: on the trained toy, merging on top of INT8 cost the picture). Where
    it has :data:`STACK_LAYER_ARM`, also DeepCache cut at the last layer at each interval: its
    shallow step in float after the float UNet, and after the INT8 one when that was timed.
    Each row names its ``levers`` as :mod:`sdaccel.toy.stack_quality`'s rows do.
    The full step of DeepCache is timed as the plain UNet (the same layers; DeepCache's full IR
    only returns one more tensor). Each row: wall and CPU seconds per step, ``x_best_float`` by
    both clocks against the UNet's row and, given PyTorch fp32's step (``s_per_step``,
    ``cpu_s_per_step``), ``x_torch_fp32``."""
    missing = [role for role in STACK_ARMS if role not in arms]
    if missing:
        raise ValueError(f"lever stack needs the arms {list(STACK_ARMS)}; missing {missing}.")

    def step(full: str, shallow: str, n: int) -> dict:
        return {
            clock: (arms[full][f"{clock}_call"] + (n - 1) * arms[shallow][f"{clock}_call"]) / n
            for clock in ("s_per", "cpu_s_per")
        }

    merge = f"token merging {ratio:g}"
    block = {n: lever_name(n) for n in intervals}  # "DeepCache N=3", as the toy's stacks name it
    layer = {n: lever_name(n, "layer") for n in intervals} if STACK_LAYER_ARM in arms else {}
    rows = {"static shapes": (step("full", "shallow", 1), [])}
    rows |= {f"+ {name}": (step("full", "shallow", n), [name]) for n, name in block.items()}
    rows |= {f"+ {name}": (step("full", STACK_LAYER_ARM, n), [name]) for n, name in layer.items()}
    rows[f"+ {merge}"] = (step("merged", "merged shallow", 1), [merge])
    rows |= {
        f"+ {merge} + {name}": (step("merged", "merged shallow", n), [merge, name])
        for n, name in block.items()
    }
    int8 = [role for role in STACK_INT8_ARMS if role in arms]
    if int8 and len(int8) < len(STACK_INT8_ARMS):
        raise ValueError(f"the INT8 stacks need the arms {list(STACK_INT8_ARMS)}; got only {int8}.")
    if int8:
        rows["+ INT8"] = (step("int8", "int8 shallow", 1), ["INT8"])
        rows |= {
            f"+ INT8 + {name}": (step("int8", "int8 shallow", n), ["INT8", name]) for n, name in block.items()
        }
        rows |= {
            f"+ INT8 + {name}": (step("int8", STACK_LAYER_ARM, n), ["INT8", name])
            for n, name in layer.items()
        }
    base = rows["static shapes"][0]
    out = {}
    for name, (row, levers) in rows.items():
        entry = {
            "levers": ["static shapes", *levers],
            "s_per_step": row["s_per"],
            "cpu_s_per_step": row["cpu_s_per"],
        }
        entry["x_best_float"] = base["s_per"] / row["s_per"]
        entry["cpu_x_best_float"] = base["cpu_s_per"] / row["cpu_s_per"]
        if torch_fp32:
            entry["x_torch_fp32"] = torch_fp32["s_per_step"] / row["s_per"]
            entry["cpu_x_torch_fp32"] = torch_fp32["cpu_s_per_step"] / row["cpu_s_per"]
        out[name] = entry
    return out
