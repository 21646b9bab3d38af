"""Token merging on the UNet, applied before export: fewer tokens in the largest self-attentions.

**The idea** (Bolya and Hoffman, *Token Merging for Fast Stable Diffusion*, CVPRW 2023; the
``tomesd`` package). At the UNet's full latent resolution every latent pixel is a token: 4096
tokens for a 512x512 SD 1.5 image, and self-attention there costs ``tokens ** 2``. Many of those
tokens are alike (flat background, the inside of a shape), so before self-attention a fraction
``ratio`` of them are averaged into similar ones, the attention runs over the rest, and afterwards
every merged token gets back the output of the token it was merged into ("unmerge"), so the
block's output has its full size again. The partition is a 2x2 stride: in every 2x2 patch one
token is a *destination* and three are *sources*; each source finds its most similar destination
(cosine similarity of the block's input), and the ``ratio * tokens`` best-matched sources are
merged. With ``tomesd``'s deterministic mode (``use_rand=False``, the top-left token of each patch
is the destination) the same inputs give the same merge, so the export is reproducible.

Only the self-attention input of the transformer blocks at full resolution is merged (``tomesd``'s
defaults: ``max_downsample=1``, ``merge_attn`` only): on SD 1.5 those are the two blocks of the
first down block and the three of the last up block. Cross-attention and the MLPs keep every
token. At most three of every four tokens can be merged, so ``0 < ratio <= 0.75``.

**Why before export.** The merge is computed from the activations (which tokens are similar
depends on the image), so it is part of the graph: ``tomesd`` patches the diffusers
``BasicTransformerBlock``\\s in place (:func:`token_merging`), and the patched UNet is traced and
converted like any other (:func:`convert_tome_unet`, with :mod:`sdaccel.cpu.export`'s tracer and
port names). The merge's sizes (how many tokens, the 2x2 grid) are fixed at trace time, so a
merged IR is valid for one latent size only: it is exported at the size it will run at, with the
height and width fixed in the IR (the batch stays dynamic), and refuses any other size.

**Exported** by :func:`export_tome` next to an export folder's UNet, one folder per ratio and size::

    <export>/unet_tome/ratio-0.5-512x512/openvino_model.xml   the UNet's inputs and output
    <export>/unet_tome/ratio-0.5-512x512/tome.json            what was merged, and from what

and run by swapping it into a pipeline: ``pipe.replace_unet(folder / "openvino_model.xml")``.
:func:`sdaccel.toy.tome_quality.measure` measures the quality cost on a trained shapes checkpoint
(prompt adherence, PSNR/SSIM against the unmerged f32 images); ``benchmarks/bench_openvino.py
--levers tome`` the speed on the real SD 1.5 UNet.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

from sdaccel.core.checkpoint import CheckpointError, read_config, read_json, resolve_checkpoint
from sdaccel.core.staging import check_writable, replace_json, staged_folder
from sdaccel.cpu.convert import fix_dims, load_torch_component, name_ports, trace_to_ov, unet_example
from sdaccel.cpu.deepcache import convert_full, convert_shallow
from sdaccel.cpu.export import MANIFEST as EXPORT_MANIFEST
from sdaccel.cpu.export import (
    MODEL_XML,
    check_source,
    checkpoint_defaults,
    source_fingerprint,
    vae_scale_factor_of,
)
from sdaccel.cpu.ir_files import save_ir

#: The folder inside an export folder that holds the merged UNets, and each one's manifest.
FOLDER = "unet_tome"
MANIFEST = "tome.json"
#: The destination grid: one destination token in every ``STRIDE x STRIDE`` patch.
STRIDE = 2
#: At most the sources can be merged: three tokens of every four.
MAX_RATIO = 1 - 1 / STRIDE**2
#: The transformer block class that ``tomesd`` patches (diffusers' name).
BLOCK = "BasicTransformerBlock"


def check_ratio(ratio) -> float:
    """``ratio`` as a float if ``0 < ratio <= MAX_RATIO``; else a ``ValueError`` naming the range."""
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not math.isfinite(ratio):
        raise ValueError(f"ratio must be a number with 0 < ratio <= {MAX_RATIO}, got {ratio!r}.")
    if not 0 < ratio <= MAX_RATIO:
        raise ValueError(
            f"ratio must be in (0, {MAX_RATIO}]: the fraction of the full-resolution tokens merged "
            f"before self-attention (one token of every {STRIDE}x{STRIDE} patch is kept as a merge "
            f"destination, so at most {MAX_RATIO} can go); got {ratio}. 0.3 to 0.5 are usual."
        )
    return float(ratio)


def _is_block(module) -> bool:
    return any(cls.__name__ == BLOCK for cls in type(module).__mro__)


def is_patched(unet) -> bool:
    """Whether ``tomesd``'s patch is on ``unet``."""
    return any(type(module).__name__ == "ToMeBlock" for module in unet.modules())


def apply_tome(unet, ratio: float) -> None:
    """Patch a diffusers ``UNet2DConditionModel`` in place with ``tomesd``: merge ``ratio`` of the
    full-resolution tokens before self-attention, deterministically (see the module doc).
    :func:`remove_tome` undoes it; :func:`token_merging` does both around a block of code."""
    import tomesd

    ratio = check_ratio(ratio)
    if not hasattr(unet, "down_blocks") or not any(_is_block(m) for m in unet.modules()):
        raise ValueError(
            f"token merging needs a diffusers UNet2DConditionModel with {BLOCK}s, got {type(unet).__name__}."
        )
    tomesd.apply_patch(
        unet,
        ratio=ratio,
        max_downsample=1,
        sx=STRIDE,
        sy=STRIDE,
        use_rand=False,
        merge_attn=True,
        merge_crossattn=False,
        merge_mlp=False,
    )


def remove_tome(unet) -> None:
    """Take ``tomesd``'s patch off ``unet`` (its blocks get their own class back, its hook goes);
    nothing happens to an unpatched UNet."""
    import tomesd

    tomesd.remove_patch(unet)
    if hasattr(unet, "_tome_info"):
        del unet._tome_info
    for module in unet.modules():
        if "_tome_info" in vars(module):
            del module._tome_info


@contextmanager
def token_merging(unet, ratio: float) -> Iterator[dict]:
    """``with token_merging(unet, 0.5) as merged:`` runs the block with ``unet`` patched, and takes
    the patch off afterwards, also on an error. ``merged`` fills with what each transformer block
    saw on the UNet calls inside the block: ``{block name: {"tokens": N, "attended": tokens its
    self-attention ran over}}`` (a hook on each block and on its self-attention)."""
    apply_tome(unet, ratio)
    seen: dict = {}
    handles: list = []
    try:
        handles = _watch(unet, seen)
        yield seen
    finally:
        for handle in handles:
            handle.remove()
        remove_tome(unet)


def _watch(unet, seen: dict) -> list:
    """Hooks that record, per transformer block, its number of tokens and the number its
    self-attention (``attn1``) received: the difference is what was merged."""
    handles = []
    for name, module in unet.named_modules():
        if not _is_block(module):
            continue

        def block_hook(_, args, kwargs, name=name):
            hidden = args[0] if args else kwargs["hidden_states"]
            seen.setdefault(name, {})["tokens"] = int(hidden.shape[1])

        def attention_hook(_, args, kwargs, name=name):
            hidden = args[0] if args else kwargs["hidden_states"]
            seen.setdefault(name, {})["attended"] = int(hidden.shape[1])

        handles.append(module.register_forward_pre_hook(block_hook, with_kwargs=True))
        handles.append(module.attn1.register_forward_pre_hook(attention_hook, with_kwargs=True))
    return handles


def merge_report(seen: dict, ratio: float, latent: tuple[int, int]) -> dict:
    """What :func:`token_merging` recorded, summed up for a manifest."""
    merged = {name: row for name, row in seen.items() if row["attended"] < row["tokens"]}
    return {
        "ratio": ratio,
        "latent_size": list(latent),
        "library": "tomesd",
        "settings": {
            "use_rand": False,
            "stride": [STRIDE, STRIDE],
            "max_downsample": 1,
            "merged": "self-attention input (attn1); cross-attention and MLP keep every token",
        },
        "merged_blocks": merged,
        "unmerged_blocks": sorted(set(seen) - set(merged)),
    }


# ----------------------------------------------------------------------------------------------
# Conversion and export
# ----------------------------------------------------------------------------------------------


def convert_tome_unet(unet, ratio: float, latent_height: int, latent_width: int, sequence_length: int = 77):
    """``unet`` with ``ratio`` of its full-resolution tokens merged -> ``(ov.Model, report)``.

    Traced at ``latent_height x latent_width`` (the merge's sizes are fixed there), which the IR
    keeps as static height and width; the batch stays dynamic. Ports are named as the plain UNet's
    (:func:`sdaccel.cpu.convert.convert_unet`). ``unet`` is left unpatched afterwards.
    """
    import torch

    from sdaccel.cpu.torch_modules import UNet

    ratio = check_ratio(ratio)
    if latent_height < STRIDE or latent_width < STRIDE:
        raise ValueError(
            f"the latent size must be at least {STRIDE}x{STRIDE}, got {latent_height}x{latent_width}."
        )
    example, dims = unet_example(unet.config, min(latent_height, latent_width), sequence_length)
    example["sample"] = torch.randn(2, unet.config.in_channels, latent_height, latent_width)
    dims["sample"] = {1: unet.config.in_channels, 2: latent_height, 3: latent_width}
    with token_merging(unet, ratio) as seen:
        ov_model = trace_to_ov(UNet(unet), example)
    name_ports(ov_model, list(example), ["out_sample"])
    return fix_dims(ov_model, dims), merge_report(seen, ratio, (latent_height, latent_width))


def convert_tome_deepcache(
    unet,
    ratio: float,
    latent_size: int,
    sequence_length: int = 77,
    parts: Sequence[str] = ("full", "shallow"),
):
    """DeepCache's two IRs (:mod:`sdaccel.cpu.deepcache`) of ``unet`` with ``ratio`` of its
    full-resolution tokens merged -> ``({"full": ov.Model, "shallow": ov.Model}, report)`` (only
    those of ``parts`` that are asked for).

    Traced at ``latent_size x latent_size`` latents, which both IRs keep as static height and width,
    as :func:`convert_tome_unet` does. The merged blocks sit in the first down block and the last up
    block, so both IRs merge: the shallow one is exactly those blocks. ``unet`` is left unpatched.
    """

    ratio = check_ratio(ratio)
    if latent_size < STRIDE:
        raise ValueError(f"the latent size must be at least {STRIDE}x{STRIDE}, got {latent_size}.")
    converters = {"full": convert_full, "shallow": convert_shallow}
    if not parts or set(parts) - set(converters):
        raise ValueError(f"parts must be some of {list(converters)}, got {parts!r}.")
    models = {}
    with token_merging(unet, ratio) as seen:
        # tomesd reads the latent size that a hook on unet.forward records; DeepCache's pieces
        # call the UNet's blocks, never its forward, so the size is set here
        unet._tome_info["size"] = (latent_size, latent_size)
        for part in parts:
            models[part] = converters[part](unet, latent_size, sequence_length, fixed_size=True)
    return models, merge_report(seen, ratio, (latent_size, latent_size))


def tome_folder(
    export_dir: str | os.PathLike, ratio: float, height: int, width: int, deepcache: bool = False
) -> Path:
    """Where :func:`export_tome` puts the UNet merged at ``ratio`` for ``height x width`` images
    (with ``deepcache``: its two DeepCache IRs)."""
    suffix = "-deepcache" if deepcache else ""
    return Path(export_dir) / FOLDER / f"ratio-{check_ratio(ratio):g}-{height}x{width}{suffix}"


def export_tome(
    src: str | os.PathLike,
    export_dir: str | os.PathLike,
    ratio: float,
    height: int | None = None,
    width: int | None = None,
    force: bool = False,
    weight_dtype: str = "fp32",
    deepcache: bool = False,
) -> Path:
    """Export the UNet of the checkpoint ``src`` with token merging at ``ratio`` for
    ``height x width`` images (default: the checkpoint's size) into
    :func:`tome_folder` of ``export_dir``, and return that folder.

    ``deepcache=True`` exports DeepCache's two IRs instead (:func:`convert_tome_deepcache`, square
    images only), in the layout :func:`sdaccel.cpu.deepcache.export_deepcache` writes (``full/`` and
    ``shallow/``): ``DeepCache.load`` and ``quantize_deepcache`` take the folder as it is.

    ``export_dir`` is usually the pipeline's export folder (:func:`sdaccel.cpu.export.export_pipeline`);
    if it holds an export, it must be of the same checkpoint. A finished export of the same
    checkpoint, ratio, size and weights is reused (``force=True`` exports again). Everything is
    checked before anything is loaded or written, and the folder appears whole or not at all.
    """
    import openvino as ov

    # 1. Check the request: ratio, weights, size, and the export folder it goes into
    ratio = check_ratio(ratio)
    if weight_dtype not in ("fp32", "fp16"):
        raise ValueError(f"weight_dtype must be 'fp32' or 'fp16', got {weight_dtype!r}.")
    checkpoint = resolve_checkpoint(src, components=["unet", "vae", "text_encoder"])
    height, width = check_tome_size(checkpoint, height, width, deepcache)
    pipeline_manifest = Path(export_dir) / EXPORT_MANIFEST
    if pipeline_manifest.is_file():  # the merged UNet goes next to an export of the same checkpoint
        check_source(read_json(pipeline_manifest), checkpoint, Path(export_dir))
    folder = tome_folder(export_dir, ratio, height, width, deepcache)
    settings = {"ratio": ratio, "height": height, "width": width, "weight_dtype": weight_dtype}
    settings |= {"deepcache": True} if deepcache else {}

    # 2. A finished export of the same settings is reused
    if not force and holds_tome_export(folder, checkpoint, settings):
        return folder  # reused in silence: the caller has the folder (force=True exports again)
    check_writable(folder)

    # 3. Convert the merged UNet (or DeepCache's two IRs) and save it, with its manifest, whole
    scale = vae_scale_factor_of(checkpoint, "vae")
    sequence_length = read_config(checkpoint, "text_encoder").get("max_position_embeddings", 77)
    unet = load_torch_component(checkpoint, "unet")
    start = time.perf_counter()
    with staged_folder(folder) as stage:
        if deepcache:
            models, report = convert_tome_deepcache(unet, ratio, height // scale, sequence_length)
        else:
            model, report = convert_tome_unet(unet, ratio, height // scale, width // scale, sequence_length)
            models = {".": model}
        del unet
        for part in list(models):
            (stage / part).mkdir(exist_ok=True)
            save_ir(models.pop(part), stage / part / MODEL_XML, compress_to_fp16=weight_dtype == "fp16")
        replace_json(
            stage / MANIFEST,
            {
                "source": str(checkpoint),
                "source_fingerprint": source_fingerprint(checkpoint),
                **settings,
                "export_seconds": time.perf_counter() - start,
                "openvino": ov.get_version(),
                "tomesd": _tomesd_version(),
                **report,
            },
        )
    return folder


def check_tome_size(
    checkpoint: Path, height: int | None, width: int | None, deepcache: bool
) -> tuple[int, int]:
    """The image size of :func:`export_tome` (default: the checkpoint's), checked: positive
    multiples of the checkpoint's size multiple, and square with DeepCache."""
    defaults = checkpoint_defaults(checkpoint)
    height, width = height or defaults.height, width or defaults.width
    m = defaults.size_multiple
    if height <= 0 or width <= 0 or height % m or width % m:
        raise ValueError(
            f"height and width must be positive multiples of {m} for {checkpoint}, got {height}x{width}."
        )
    if deepcache and height != width:
        raise ValueError(f"token merging with DeepCache takes square images, got {height}x{width}.")
    return height, width


def holds_tome_export(folder: Path, checkpoint: Path, settings: dict) -> bool:
    """Whether ``folder`` holds a finished :func:`export_tome` of ``checkpoint`` with ``settings``;
    a CheckpointError where it holds something else (an unfinished export, another checkpoint)."""
    if not folder.exists():
        return False
    if not (folder / MANIFEST).is_file():
        raise CheckpointError(
            f"{folder} holds no finished token-merging export (no {MANIFEST}): pass force=True to replace it."
        )
    manifest = read_json(folder / MANIFEST)
    check_source(manifest, checkpoint, folder)
    parts = ("full", "shallow") if settings.get("deepcache") else (".",)
    xmls = [folder / part / MODEL_XML for part in parts]
    return {k: manifest.get(k) for k in settings} == settings and all(xml.is_file() for xml in xmls)


def _tomesd_version() -> str:

    return version("tomesd")
