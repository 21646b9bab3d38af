"""Every artifact the chosen rows of ``bench_whole_image.py`` need, in order: the checkpoint, its f32
export, the INT8 UNets, the toy's recipes replayed, the stacks' DeepCache UNets, the few-step rows'
LoRA and tiny autoencoder, and the export with the LoRA fused with its INT8 UNets. Each is made in a
child (:mod:`bench_whole_image_artifacts`), or reused where an earlier run left it whole."""

from __future__ import annotations

from pathlib import Path

from bench_whole_image_artifacts import (
    calibrate_child,
    deepcache_irs,
    export,
    make_lora,
    quantize_replayed,
    quantize_stack,
    quantize_unet,
    tiny_vae,
)
from bench_whole_image_results import Bench, artifact_made
from bench_whole_image_settings import QUANT_VARIANTS, REPLAYED, REUSE, WEIGHT_DTYPE, replayed_file

from sdaccel.course.whole_image_rows import (
    JAX_LCM4_LORA_TAESD,
    LCM_ROWS,
    OV_STACK_20,
    OV_STACK_LAYER_20,
    is_openvino,
    ov_row_key,
)
from sdaccel.cpu.deepcache import QUANTIZED_PARTS, folder_name
from sdaccel.tools.toys.random_checkpoints import build_random_checkpoint


def prepare(bench: Bench, args) -> dict:
    """Every artifact the chosen rows need; returns their paths."""
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = set(args.rows)
    reuse = REUSE.get(args.model) if args.reuse and not args.quick else None
    # 1. The checkpoint: --quick's tiny one, or the real architecture with random weights
    src = checkpoint(bench, args)
    # 2. Its f32 export (--reuse: bench_memory.py's)
    f32 = export_fp32(bench, src, work, reuse, rows)
    paths = {"src": str(src), "export": str(f32)}
    # 3. The INT8 UNets of the ov_<variant>_20 rows, from one calibration
    calib = work / "calibration"
    paths.update(int8_unets(bench, args, f32, work, calib, reuse, rows))
    # 4. The toy's recipes replayed on the UNet, from the same calibration
    paths.update(replayed_unets(bench, args, f32, work, calib, rows))
    # 5. The stacks' DeepCache UNets, cut at the block or at the last layer, quantized
    paths.update(stack_unets(bench, args, src, f32, work, calib, rows))
    # 6. The few-step rows' LoRA and tiny autoencoder
    if rows & {*LCM_ROWS, JAX_LCM4_LORA_TAESD}:
        paths.update(lora_and_tiny_vae(bench, args, src, work))
    # 7. The export with the LoRA fused, and its INT8 UNets
    if rows & set(LCM_ROWS):
        paths.update(lcm_unets(bench, args, src, work, Path(paths["lora"])))
    return paths


def checkpoint(bench: Bench, args) -> Path:
    """The checkpoint every row loads: ``--quick``'s tiny one, or the random one (built once)."""
    if args.quick:
        src = Path(args.quick_checkpoint)
        bench.results["artifacts"]["checkpoint"] = {
            "path": str(src),
            "reused": True,
            "made_by": "the repository",
        }
        return src
    src = Path(args.random_root) / f"random-{args.model}"
    made = (src / "model_index.json").is_file()
    weights = WEIGHT_DTYPE[args.model]
    ok = bench.artifact(
        "checkpoint",
        f"build {args.model} with random weights ({weights} on disk)",
        build_random_checkpoint,
        args.model,
        str(src),
        0,
        weights,
        path=src,
        reused_from="sdaccel.tools.toys.random_checkpoints.build_random_checkpoint (seed 0)"
        if made
        else None,
    )
    if not ok:
        raise SystemExit(f"could not build {src}: {bench.results['artifacts']['checkpoint'].get('error')}")
    return src


def export_fp32(bench: Bench, src: Path, work: Path, reuse: dict | None, rows: set) -> Path:
    """The f32 export the OpenVINO rows load (made only where a row needs it)."""
    from sdaccel.cpu.export import is_complete

    f32 = Path(reuse["root"]) / "export-fp32" if reuse else work / "export-fp32"
    if any(is_openvino(r) for r in rows):
        ok_reuse = reuse and is_complete(f32)
        bench.artifact(
            "export_fp32",
            "export to OpenVINO IR (f32)",
            export,
            str(src),
            str(f32),
            path=f32,
            reused_from=reuse["command"] if ok_reuse else None,
        )
    return f32


def int8_unets(bench: Bench, args, f32: Path, work: Path, calib: Path, reuse: dict | None, rows: set) -> dict:
    """The UNet quantized by each recipe of an ``ov_<variant>_20`` row (--reuse: bench_memory.py's)."""
    paths = {}
    for variant in QUANT_VARIANTS:
        if ov_row_key(variant) not in rows:
            continue
        xml = (Path(reuse["root"]) if reuse else work) / f"unet_{variant}.xml"
        if variant != "int8_weights" and not (reuse and xml.is_file()) and not artifact_made(calib):
            _calibrate(bench, args, str(f32), calib, None, None)
        _int8_unet(
            bench,
            args,
            f"unet_{variant}",
            f"quantize the UNet: {variant}",
            f32,
            xml,
            variant,
            calib,
            reused_from=reuse["command"] if reuse and xml.is_file() else None,
        )
        paths[f"unet_{variant}"] = str(xml)
    return paths


def replayed_unets(bench: Bench, args, f32: Path, work: Path, calib: Path, rows: set) -> dict:
    """The UNet quantized full INT8 with what each of the toy's replayed recipes keeps in float."""
    paths = {}
    for name in REPLAYED:
        if ov_row_key(name) not in rows:
            continue
        if not artifact_made(calib):
            _calibrate(bench, args, str(f32), calib, None, None)
        xml = work / f"unet_{name}.xml"
        found = replayed_file(name, args)
        bench.artifact(
            f"unet_{name}", f"quantize the UNet: {name} (replayed from {found.name})", quantize_replayed,
            str(f32 / "unet" / "openvino_model.xml"), str(xml), name, str(found), str(calib),
            args.calib_samples, path=xml, limit_gb=args.quant_memory_gb + 4,
        )  # fmt: skip
        paths[f"unet_{name}"] = str(xml)
    return paths


def stack_unets(bench: Bench, args, src: Path, f32: Path, work: Path, calib: Path, rows: set) -> dict:
    """Each stack row's DeepCache UNets from the checkpoint, cut at the block or at the last layer,
    and quantized by the stack's INT8 recipe (the layer cut's full UNet alone: QUANTIZED_PARTS)."""
    paths = {}
    for key, cut in ((OV_STACK_20, "block"), (OV_STACK_LAYER_20, "layer")):
        if key not in rows:
            continue
        if not artifact_made(calib):
            _calibrate(bench, args, str(f32), calib, None, None)
        name = "" if cut == "block" else f"_{cut}"
        deepcache = work / "deepcache-f32" / folder_name(cut)
        bench.artifact(
            f"deepcache{name}", f"export DeepCache's full and shallow UNets, {cut} cut (f32)", deepcache_irs,
            str(src), str(deepcache.parent), cut, path=deepcache,
        )  # fmt: skip
        stack = work / f"deepcache-stack{name.replace('_', '-')}-int8"
        bench.artifact(
            f"deepcache{name}_int8",
            f"quantize {' and '.join(QUANTIZED_PARTS[cut])} ({cut} cut): full INT8, the ResNets in float",
            quantize_stack, str(deepcache), str(stack), str(calib), args.calib_samples, cut, path=stack,
            limit_gb=args.quant_memory_gb + 4,
        )  # fmt: skip
        paths[f"stack{name}"] = str(stack)
    return paths


def lora_and_tiny_vae(bench: Bench, args, src: Path, work: Path) -> dict:
    """The random LCM-LoRA-shaped adapter and the random tiny autoencoder of the few-step rows."""
    lora = work / "lcm-lora-r64" / "pytorch_lora_weights.safetensors"
    bench.artifact(
        "lora", "random LCM-LoRA-shaped adapter, rank 64", make_lora, str(src), str(lora), path=lora
    )
    taesd = work / "taesd-random"
    layout = "TAESDXL" if args.model == "sdxl" else "TAESD"
    bench.artifact(
        "tiny_vae",
        f"random tiny autoencoder ({layout} layout)",
        tiny_vae,
        str(src),
        str(taesd),
        path=taesd,
    )
    return {"lora": str(lora), "taesd": str(taesd)}


def lcm_unets(bench: Bench, args, src: Path, work: Path, lora: Path) -> dict:
    """The export with the LoRA fused, and its UNet quantized by each ``--lcm-variant`` (calibrated
    on the few-step call itself: LCM, no guidance)."""
    fused = work / "export-lcm-lora"
    bench.artifact(
        "export_lcm_lora",
        "export with the LoRA fused (f32)",
        export,
        str(src),
        str(fused),
        [[str(lora), 1.0]],
        path=fused,
    )
    lcm_calib = work / "calibration-lcm"
    paths = {"export_lcm": str(fused), "unet_lcm": {}}
    for i, variant in enumerate(args.lcm_variant):
        xml = work / f"unet_lcm_lora_{variant}.xml"
        if variant != "int8_weights" and not artifact_made(lcm_calib):
            _calibrate(bench, args, str(fused), lcm_calib, "lcm", 1.0)
        _int8_unet(
            bench,
            args,
            "unet_lcm_lora" if i == 0 else f"unet_lcm_lora_{variant}",
            f"quantize the fused UNet: {variant}",
            fused,
            xml,
            variant,
            lcm_calib,
        )
        paths["unet_lcm"][variant] = str(xml)
    return paths


def _calibrate(bench, args, folder, out_dir, scheduler, guidance):
    bench.artifact(
        f"calibration_{Path(out_dir).name}",
        f"collect {args.calib_samples} calibration samples",
        calibrate_child,
        folder,
        str(out_dir),
        args.calib_samples,
        2,
        scheduler,
        guidance,
        path=out_dir,
    )


def _int8_unet(bench, args, key, title, exported, xml, variant, calibration, reused_from=None):
    """The artifact ``key``: the UNet of the exported folder ``exported`` quantized with ``variant``
    into ``xml`` (``calibration``: the samples of hybrid and full INT8), in a child watched at
    ``--quant-memory-gb`` + 4 GiB."""
    from sdaccel.cpu.export import MODEL_XML

    bench.artifact(
        key,
        title,
        quantize_unet,
        str(Path(exported) / "unet" / MODEL_XML),
        str(xml),
        variant,
        None if variant == "int8_weights" else str(calibration),
        args.calib_samples,
        args.quant_memory_gb,
        args.quant_parts,
        path=xml,
        reused_from=reused_from,
        limit_gb=args.quant_memory_gb + 4,
    )
