"""DeepCache on OpenVINO: run the deep part of the UNet once every N steps, and only its shallow
part in between.

**The idea** (Ma et al., *DeepCache: Accelerating Diffusion Models for Free*, CVPR 2024). A UNet
has levels: the down path halves the resolution level after level, the up path doubles it back,
and skip connections carry each level's features across to the up block of the same level::

    conv_in -> down 0 ----------------------------------(skips)--------------------> up -1 -> conv_out
                 \\-> down 1 -> ... -> mid -> ... -> up -2 ---- cached feature ----/

Everything between the first down block and the last up block is the *deep* part: most of the
layers, at low resolution, computing what the picture holds and where. Between two adjacent
denoising steps the latents change by a small amount, and the paper measured that the deep
features change even less (adjacent steps' up-block features are nearly identical). So:

* on a **full step** (steps 0, N, 2N, ...) the whole UNet runs, and the input of its last up
  block, the result of the whole deep part, is kept: the **cached** feature;
* on the N - 1 **shallow steps** after it, only ``conv_in``, the first down block (without its
  downsampler), the last up block and ``conv_out`` run. The first down block gives fresh skip
  features from the current latents, timestep and prompt; the last up block combines them with
  the cached deep feature, which is up to N - 1 steps old.

An average step then costs ``(t_full + (N - 1) t_shallow) / N``. On the SD 1.5 UNet at 64x64
latents the shallow part took about 45% of a full step (``benchmarks/bench_openvino.py``, bf16;
it is the most expensive level, with attention over 4096 tokens), so N = 3 saves about a third of
the UNet time. The paper lets the cut sit at any skip connection (12 in SD 1.5, layer by layer).
This module offers two (``cut=``, :data:`CUTS`):

* ``"block"`` (the default here): at the level boundary, the input of the last up block; all of
  the first down block and of the last up block are in the shallow part;
* ``"layer"``: at the input of the last up block's *last layer*, the paper's default branch
  (``cache_block_id=0, cache_layer_id=0`` in its code). The shallow part is only ``conv_in``, that
  one layer (a ResNet and, in SD, an attention, fed with ``conv_in``'s output as its skip) and
  ``conv_out``: in SD 1.5 one of the full-resolution level's five ResNet-attention pairs, so a
  shallow step is far cheaper; the cached feature stands for more of the network, so it goes
  staler and the picture moves more at the same N.

The **quality cost** is the staleness of the deep feature: it grows with N, and with how much of
the network the deep part is. The paper reports 2.3x on SD 1.5 (50 PLMS steps) for a 0.05 drop in
CLIP score; :func:`measure` measures it on a trained checkpoint of ours (prompt adherence and
PSNR/SSIM against the uncached images).

**Two IRs**, exported by :func:`export_deepcache` next to an export folder's UNet::

    <export>/unet_deepcache/full/openvino_model.xml     inputs: the UNet's     outputs: out_sample, cached
    <export>/unet_deepcache/shallow/openvino_model.xml  inputs: the UNet's + cached   output: out_sample

(``unet_deepcache_layer/`` for the layer cut: :func:`folder_name`.)

The UNet's inputs are ``sample, timestep, encoder_hidden_states`` (and SDXL's ``text_embeds,
time_ids``), as in :mod:`sdaccel.cpu.export`; ``cached`` is ``[batch, block_out_channels[1], h, w]``
at the latent size ``h x w`` (``block_out_channels[0]`` for the layer cut: :func:`cached_shape`). Both IRs are written from the pieces of one PyTorch UNet
(:func:`convert_full`, :func:`convert_shallow`: ``embed``, ``head``, ``deep``, ``tail``), so on
the same step the shallow IR fed with the full IR's ``cached`` gives the full IR's ``out_sample``,
and the full IR gives the plain UNet's (``tests/cpu/test_deepcache.py`` checks both).

**Running it**: :class:`DeepCache` is what ``OVPipeline.generate(..., deepcache=...)`` calls on
every step in place of the pipeline's UNet::

    export_pipeline("checkpoints/tiny-shapes-sdxl", "build/ov/shapes")  # sdaccel.cpu.export
    folder = export_deepcache("checkpoints/tiny-shapes-sdxl", "build/ov/shapes")
    pipe = OVPipeline.from_pretrained("build/ov/shapes", precision="f32")
    cache = DeepCache.load(folder, pipe, interval=3)
    images = pipe(prompts, steps=20, deepcache=cache).images
    cache.calls  # {'full': 7, 'shallow': 13} for one prompt (Euler: one UNet call per step)

**INT8**: :func:`quantize_deepcache` quantizes both IRs with :func:`sdaccel.cpu.quantize_parts.quantize_ir`.
The full IR calibrates on the UNet's captured inputs as they are. The shallow IR also needs
``cached``: it is computed by running the floating-point full IR on each calibration sample, i.e.
the sample's own step stands in for the last full step before it, a close proxy since cached
features are the ones that change little from step to step.

Run ``python -m sdaccel.toy.deepcache_quality --checkpoint checkpoints/tiny-shapes-sdxl`` for the quality
measurement (:func:`measure`).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sdaccel.core.checkpoint import CheckpointError, read_config, read_json, resolve_checkpoint
from sdaccel.core.staging import check_writable, replace_json, staged_folder
from sdaccel.cpu.calibration import CalibrationSet
from sdaccel.cpu.convert import fix_dims, load_torch_component, name_ports, trace_to_ov, unet_example
from sdaccel.cpu.export import MANIFEST as EXPORT_MANIFEST
from sdaccel.cpu.export import MODEL_XML, check_source, source_fingerprint
from sdaccel.cpu.ir_files import save_ir
from sdaccel.cpu.quality import compile_f32
from sdaccel.cpu.quantize import check_calibration
from sdaccel.cpu.quantize_parts import quantize_ir

#: The folder inside an export folder that holds the two IRs, and their sub-folders.
FOLDER = "unet_deepcache"
PARTS = ("full", "shallow")
MANIFEST = "deepcache.json"
#: Where the UNet is cut: ``"block"``, at the input of the last up block (the shallow part is the
#: whole full-resolution level); ``"layer"``, at the input of the last up block's last layer, the
#: DeepCache paper's default branch (the shallow part is ``conv_in``, that one layer and ``conv_out``).
CUTS = ("block", "layer")


def cached_shape(
    unet_config, batch: int, height: int, width: int, cut: str = "block"
) -> tuple[int, int, int, int]:
    """Shape of the cached feature for ``height x width`` latents, at the full latent resolution.

    With the block cut it is the input of the last up block, the output of the up block before it
    (which ends with an upsampler): ``block_out_channels[1]`` channels (the up path runs the channel
    list backwards). With the layer cut it is the input of the last up block's last layer, the
    output of the layer before it: ``block_out_channels[0]`` channels.
    """
    return (batch, unet_config["block_out_channels"][0 if check_cut(cut) == "layer" else 1], height, width)


def check_cut(cut: str) -> str:
    """``cut`` if it is one of :data:`CUTS`, else a ``ValueError`` that lists them."""
    if cut not in CUTS:
        raise ValueError(
            f"cut must be one of {list(CUTS)} ('block': the last up block is shallow; 'layer': only "
            f"its last layer, the DeepCache paper's default), got {cut!r}."
        )
    return cut


def lever_name(interval: int, cut: str = "block") -> str:
    """How the stacks name DeepCache at ``interval`` N with ``cut`` (:mod:`sdaccel.toy.stack_quality`'s
    rows, :func:`sdaccel.tools.measure.speedups.compose_stack`'s): ``"DeepCache N=3"``, ``"DeepCache N=2
    (layer cut)"``."""
    return f"DeepCache N={interval}" + ("" if check_cut(cut) == "block" else f" ({cut} cut)")


#: The IRs :func:`quantize_deepcache` quantizes for each cut (the stacks' INT8 recipe). The layer
#: cut's shallow IR stays in float: it is ``conv_in``, one layer and ``conv_out``, an eighth of a full
#: step in bf16 (0.35 against 2.83 CPU s a call, SD 1.5 at 512x512 on a 2-core Xeon with AMX:
#: ``benchmarks/results/stack_sd15_layer_cut_xeon_amx.json``), so INT8 has little to save there; and
#: it is the layer that writes the output: quantized too, it cost the SD 1.5-layout toy one image of
#: 96 at N=2 (0.938 against 0.948).
QUANTIZED_PARTS = {"block": ("full", "shallow"), "layer": ("full",)}


def folder_name(cut: str = "block") -> str:
    """The folder of an export folder that holds the two IRs of ``cut``."""
    return FOLDER if check_cut(cut) == "block" else f"{FOLDER}_{cut}"


def trace_example(
    unet_config, example_size: int, sequence_length: int, fixed_size: bool
) -> tuple[dict, dict]:
    """The UNet's example inputs and static dimensions for a trace of the two IRs: at
    ``min(example_size, sample_size)`` latents with height and width left dynamic, or, with
    ``fixed_size``, at exactly ``example_size`` with height and width fixed in the IR (a graph that
    is valid for one latent size only, such as a token-merged UNet: :mod:`sdaccel.cpu.tome`)."""
    size = example_size if fixed_size else min(example_size, unet_config.sample_size)
    example, dims = unet_example(unet_config, size, sequence_length)
    if fixed_size:
        dims["sample"] = {**dims["sample"], 2: size, 3: size}
    return example, dims


def convert_full(
    unet, example_size: int = 32, sequence_length: int = 77, fixed_size: bool = False, cut: str = "block"
):
    """A diffusers ``UNet2DConditionModel`` -> ``ov.Model`` with outputs ``out_sample`` and ``cached``
    (``fixed_size``: see :func:`trace_example`; ``cut``: :data:`CUTS`)."""
    from sdaccel.cpu.torch_modules import DeepCacheFull

    example, dims = trace_example(unet.config, example_size, sequence_length, fixed_size)
    ov_model = trace_to_ov(DeepCacheFull(unet, check_cut(cut)), example)
    name_ports(ov_model, list(example), ["out_sample", "cached"])
    return fix_dims(ov_model, dims)


def convert_shallow(
    unet, example_size: int = 32, sequence_length: int = 77, fixed_size: bool = False, cut: str = "block"
):
    """A diffusers ``UNet2DConditionModel`` -> the shallow ``ov.Model``: the UNet's inputs plus
    ``cached``, output ``out_sample`` (``fixed_size``: see :func:`trace_example`; ``cut``:
    :data:`CUTS`)."""
    import torch

    from sdaccel.cpu.torch_modules import DeepCacheShallow

    example, dims = trace_example(unet.config, example_size, sequence_length, fixed_size)
    size = example["sample"].shape[-1]
    shape = cached_shape(unet.config, 2, size, size, cut)
    example["cached"] = torch.randn(shape)
    dims["cached"] = {1: shape[1], 2: size, 3: size} if fixed_size else {1: shape[1]}
    ov_model = trace_to_ov(DeepCacheShallow(unet, cut), example)
    name_ports(ov_model, list(example), ["out_sample"])
    return fix_dims(ov_model, dims)


def export_deepcache(
    src, export_dir: str | os.PathLike, force: bool = False, weight_dtype: str = "fp32", cut: str = "block"
) -> Path:
    """Export the full and the shallow IR into ``<export_dir>/unet_deepcache`` (``unet_deepcache_layer``
    for the layer cut: :func:`folder_name`) and return that folder.

    Args:
      src: a diffusers checkpoint (local folder or hub id) or a ``UNet2DConditionModel``.
      export_dir: usually the pipeline's export folder (:func:`sdaccel.cpu.export.export_pipeline`).
      force: export again even if both IRs are there.
      weight_dtype: ``"fp32"`` or ``"fp16"`` (weights stored in half precision).
      cut: where the shallow part ends (:data:`CUTS`).
    """
    import openvino as ov

    if weight_dtype not in ("fp32", "fp16"):
        raise ValueError(f"weight_dtype must be 'fp32' or 'fp16', got {weight_dtype!r}.")
    folder = Path(export_dir) / folder_name(cut)
    xmls = {part: folder / part / MODEL_XML for part in PARTS}
    checkpoint = None
    if isinstance(src, str | os.PathLike):
        checkpoint = resolve_checkpoint(src, components=["unet", "text_encoder"])
        pipeline_manifest = Path(export_dir) / EXPORT_MANIFEST
        if pipeline_manifest.is_file():  # the IRs go next to an export of the same checkpoint
            check_source(read_json(pipeline_manifest), checkpoint, Path(export_dir))
    if not force and folder.exists():
        if not (folder / MANIFEST).is_file():
            raise CheckpointError(
                f"{folder} holds no finished DeepCache export (no {MANIFEST}): pass force=True to replace it."
            )
        if checkpoint is not None:
            check_source(read_json(folder / MANIFEST), checkpoint, folder)
        if all(x.is_file() for x in xmls.values()):
            return folder  # reused in silence: the caller has the folder (force=True exports again)
    check_writable(folder)
    if checkpoint is not None:
        unet = load_torch_component(checkpoint, "unet")
        sequence_length = read_config(checkpoint, "text_encoder").get("max_position_embeddings", 77)
        source = str(checkpoint)
    else:
        unet, sequence_length, source = src.eval(), 77, type(src).__name__
    start = time.perf_counter()
    with staged_folder(folder) as stage:  # published whole, or not at all
        for part, convert in (("full", convert_full), ("shallow", convert_shallow)):
            ov_model = convert(unet, sequence_length=sequence_length, cut=cut)
            (stage / part).mkdir()
            save_ir(ov_model, stage / part / MODEL_XML, compress_to_fp16=weight_dtype == "fp16")
            del ov_model
        manifest = {
            "source": source,
            "source_fingerprint": None if checkpoint is None else source_fingerprint(checkpoint),
            "weight_dtype": weight_dtype,
            "cut": cut,
            "cached_channels": cached_shape(unet.config, 1, 1, 1, cut)[1],
            "export_seconds": time.perf_counter() - start,
            "openvino": ov.get_version(),
        }
        replace_json(stage / MANIFEST, manifest)
    return folder


# ----------------------------------------------------------------------------------------------
# Running: the step-by-step choice between the two IRs
# ----------------------------------------------------------------------------------------------


def compile_parts(folder: str | os.PathLike, pipeline) -> tuple:
    """Compile the full and the shallow IR of ``folder`` as ``pipeline`` compiles its UNet
    (``OVPipeline.compile_as_unet``: the same core, device and properties, hence the same inference
    precision; reshaped to its static shape when it has one, the cached feature at the full latent
    size)."""
    return tuple(pipeline.compile_as_unet(Path(folder) / part / MODEL_XML) for part in PARTS)


class DeepCache:
    """The UNet of a pipeline with DeepCache at ``interval`` N: ``cache(step, inputs)`` runs the
    full IR when ``step % N == 0`` (so always on step 0) and keeps its ``cached`` output, and the
    shallow IR with that cached feature on the other steps. ``interval=1`` runs the full IR on
    every step. ``calls`` counts the runs of each IR.

    ``full`` and ``shallow`` are compiled models (:func:`compile_parts`); one pair can serve
    several ``DeepCache`` objects with different intervals. ``reload``, when given, compiles the
    pair again (:meth:`load` passes it): after a failed inference the CPU plugin's compiled model
    can fail every later call, so a failure makes fresh ones for the next call.
    """

    def __init__(self, full, shallow, interval: int = 3, reload: Callable[[], tuple] | None = None):
        if interval < 1:
            raise ValueError(f"interval must be >= 1, got {interval}.")
        self.interval = interval
        self.models = {"full": full, "shallow": shallow}
        self.reload = reload
        self.requests = {}
        self._new_requests()
        self.calls = {"full": 0, "shallow": 0}

    def _new_requests(self) -> None:
        self.requests = {part: model.create_infer_request() for part, model in self.models.items()}
        self.cached = None

    def _recover(self) -> None:
        if self.reload is not None:
            self.models = dict(zip(PARTS, self.reload(), strict=True))
        self._new_requests()

    @classmethod
    def load(cls, folder: str | os.PathLike, pipeline, interval: int = 3) -> DeepCache:
        """Compile ``folder``'s IRs (see :func:`export_deepcache`) for ``pipeline``."""
        return cls(
            *compile_parts(folder, pipeline),
            interval=interval,
            reload=functools.partial(compile_parts, folder, pipeline),
        )

    def __call__(self, step: int, inputs: dict) -> np.ndarray:
        if step % self.interval and self.cached is None:
            raise RuntimeError("DeepCache's first step must be a full one (step 0).")
        try:
            if step % self.interval == 0:
                part = "full"
                request = self.requests[part]
                request.infer(inputs)
                self.cached = request.get_tensor("cached").data.copy()
            else:
                part = "shallow"
                request = self.requests[part]
                request.infer({**inputs, "cached": self.cached})
            out = request.get_tensor("out_sample").data.copy()
        except BaseException:
            self._recover()
            raise
        self.calls[part] += 1
        return out


# ----------------------------------------------------------------------------------------------
# INT8
# ----------------------------------------------------------------------------------------------


def quantize_deepcache(
    folder: str | os.PathLike,
    dst: str | os.PathLike,
    calibration,
    variant: str = "full_int8",
    subset_size: int = 200,
    parts: Sequence[str] = PARTS,
    **knobs,
) -> dict:
    """Quantize the IRs of ``folder`` named by ``parts`` (both by default; :data:`QUANTIZED_PARTS`
    has the stacks' choice per cut) into ``dst`` (same layout) with :func:`quantize_ir`; the others
    are copied as they are.

    ``calibration`` is a :class:`~sdaccel.cpu.calibration.CalibrationSet` (or its folder) of captured
    UNet inputs (:func:`~sdaccel.cpu.calibration.collect_unet_inputs`); ``None`` for
    ``int8_weights``. The full IR uses them as they are. For the shallow IR each sample gets the
    ``cached`` feature that the f32 full IR computes from that same sample (a proxy for the
    feature of the last full step, see the module doc). Returns :func:`quantize_ir`'s report per
    quantized part.
    """

    folder, dst = Path(folder), Path(dst)
    if isinstance(parts, str) or not parts or set(parts) - set(PARTS):
        raise ValueError(f"parts must be some of {list(PARTS)}, got {parts!r}.")
    calibration = check_calibration(calibration, variant)  # before anything is computed or written
    missing = [str(folder / part / MODEL_XML) for part in PARTS if not (folder / part / MODEL_XML).is_file()]
    if missing:
        raise FileNotFoundError(f"No DeepCache IRs at {missing}: export them first with export_deepcache.")
    check_writable(dst)
    report = {}
    with (
        tempfile.TemporaryDirectory(prefix="deepcache-calibration-") as tmp,
        staged_folder(dst) as stage,  # dst is replaced whole at the end, or left as it was
    ):
        data = {"full": None, "shallow": None}
        if calibration is not None:
            samples = (
                calibration
                if isinstance(calibration, CalibrationSet)
                else CalibrationSet.save(calibration, Path(tmp) / "full")
            )
            data["full"] = samples.folder
            if "shallow" in parts:
                full = compile_f32(folder / "full" / MODEL_XML)
                with_cache = CalibrationSet(Path(tmp) / "shallow")
                for index, sample in enumerate(samples):
                    with_cache.write(index, {**sample, "cached": full(sample)["cached"]})
                del full
                data["shallow"] = with_cache.folder
        for part in PARTS:
            if part not in parts:  # kept in float: the IR as it is
                shutil.copytree(folder / part, stage / part)
                continue
            report[part] = quantize_ir(
                folder / part / MODEL_XML, stage / part / MODEL_XML, variant, data[part], subset_size, **knobs
            )
        manifest = read_json(folder / MANIFEST) if (folder / MANIFEST).is_file() else {}
        record = {
            "quantized": variant,
            "quantized_parts": [p for p in PARTS if p in parts],
            "from": str(folder),
        }
        replace_json(stage / MANIFEST, manifest | record)
    return report


# ----------------------------------------------------------------------------------------------
# The quality measurement
# ----------------------------------------------------------------------------------------------
