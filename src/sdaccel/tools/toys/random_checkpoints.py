"""Tiny random-weight checkpoints in the exact diffusers folder layout.

    python -m sdaccel.tools.toys.random_checkpoints build/checkpoints            # writes tiny-sdxl/ and tiny-sd15/

No machine of this project reaches the model hub, so the tests and the smoke runs of the
notebooks load these folders instead of ``stabilityai/stable-diffusion-xl-base-1.0``. They are
made by diffusers' and transformers' own classes (the same versions that load them), saved with
``save_pretrained``, and so have the same files, key names and config fields as the real ones:
every code path that loads a real checkpoint loads these too. Only the sizes are small.

The weights are random (fixed seed), so the images they make are noise; the architecture, the
shapes and the numerics are real.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path

from sdaccel.core import staging
from sdaccel.core.faults import fault_point
from sdaccel.core.staging import disk_bytes

#: Words that get their own BPE merges, so that prompts tokenize into a few tokens, as with CLIP.
_WORDS = (
    "a an the of on in at with and photo picture painting drawing astronaut horse riding cat dog "
    "red green blue yellow white black purple orange circle square triangle background top bottom "
    "left right center small large mountain lake city night sunset forest portrait detailed"
).split()


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible map from bytes to printable unicode characters."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return dict(zip(bs, map(chr, cs), strict=True))


def write_clip_tokenizer_files(folder: Path) -> int:
    """Write a small CLIP BPE vocabulary (``vocab.json``, ``merges.txt``) and return its size.

    As in CLIP, every byte has a token with and without the end-of-word marker ``</w>``, merges
    build whole words, and the two special tokens take the last two ids.
    """
    folder.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    merges: list[str] = []
    for word in _WORDS:
        pieces = [*word[:-1], word[-1] + "</w>"]
        while len(pieces) > 1:
            merge = f"{pieces[0]} {pieces[1]}"
            if merge not in merges:
                merges.append(merge)
                vocab.setdefault(pieces[0] + pieces[1], len(vocab))
            pieces = [pieces[0] + pieces[1], *pieces[2:]]
    for special in ("<|startoftext|>", "<|endoftext|>"):
        vocab[special] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return len(vocab)


def _save_tokenizer(folder: Path, pad_token: str) -> int:
    """A CLIPTokenizer made from the files above, saved as transformers saves it, with the
    vocab/merges files kept beside it as in the hub layout."""
    from transformers import CLIPTokenizer

    size = write_clip_tokenizer_files(folder)
    tokenizer = CLIPTokenizer.from_pretrained(folder, pad_token=pad_token, model_max_length=77)
    tokenizer.save_pretrained(folder)
    return size


def clip_text_encoder(vocab_size: int, hidden: int, layers: int, act: str, projection: int | None, seed: int):
    """A small random CLIP text encoder (seeded; eval mode): ``CLIPTextModelWithProjection`` with a
    ``projection`` size, ``CLIPTextModel`` without, with the legacy token ids of the SD encoders."""
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        max_position_embeddings=77,
        hidden_act=act,
        projection_dim=projection or hidden,
        # the real SD/SDXL encoders carry the legacy ids (eos 2): the EOS token is the
        # highest id, found with argmax, exactly as here.
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
    )
    torch.manual_seed(seed)
    cls = CLIPTextModelWithProjection if projection else CLIPTextModel
    return cls(config).eval()


def _vae(scaling_factor: float, force_upcast: bool, seed: int):
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    # four levels, as in the real VAEs, so that latents are 1/8 of the image size
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[8, 16, 16, 16],
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=64,
        scaling_factor=scaling_factor,
        force_upcast=force_upcast,
    ).eval()


#: The noise schedule that SD 1.x and SDXL were trained with (their schedulers' published
#: configs): every scheduler written here, whatever its sampling rule, shares it.
SD_NOISE_SCHEDULE = {
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "steps_offset": 1,
}

#: The components of an SDXL checkpoint, as its ``model_index.json`` lists them.
SDXL_COMPONENTS = {
    "scheduler": ("diffusers", "EulerDiscreteScheduler"),
    "text_encoder": ("transformers", "CLIPTextModel"),
    "text_encoder_2": ("transformers", "CLIPTextModelWithProjection"),
    "tokenizer": ("transformers", "CLIPTokenizer"),
    "tokenizer_2": ("transformers", "CLIPTokenizer"),
    "unet": ("diffusers", "UNet2DConditionModel"),
    "vae": ("diffusers", "AutoencoderKL"),
}

#: The components of an SD 1.5 checkpoint (without its safety checker and feature extractor).
SD15_COMPONENTS = {
    "scheduler": ("diffusers", "PNDMScheduler"),
    "text_encoder": ("transformers", "CLIPTextModel"),
    "tokenizer": ("transformers", "CLIPTokenizer"),
    "unet": ("diffusers", "UNet2DConditionModel"),
    "vae": ("diffusers", "AutoencoderKL"),
}


def write_model_index(folder: Path, pipeline: str, components: dict[str, tuple[str, str]]) -> None:
    """``folder/model_index.json``: the ``pipeline`` class and its ``components`` (library, class)."""
    import diffusers

    index = {"_class_name": pipeline, "_diffusers_version": diffusers.__version__}
    index.update({name: list(lib_cls) for name, lib_cls in components.items()})
    (folder / "model_index.json").write_text(json.dumps(index, indent=2))


def build_tiny_sdxl(folder: str | Path, seed: int = 0) -> Path:
    """SDXL layout: two CLIP encoders (the second with a projection), two tokenizers (the second
    pads with ``!``), a UNet with ``text_time`` added conditioning, the VAE and Euler."""
    import torch
    from diffusers import EulerDiscreteScheduler, UNet2DConditionModel

    folder = Path(folder)
    vocab = _save_tokenizer(folder / "tokenizer", pad_token="<|endoftext|>")
    _save_tokenizer(folder / "tokenizer_2", pad_token="!")
    clip_text_encoder(vocab, 32, 3, "quick_gelu", None, seed).save_pretrained(folder / "text_encoder")
    clip_text_encoder(vocab, 32, 3, "gelu", 32, seed + 1).save_pretrained(folder / "text_encoder_2")
    torch.manual_seed(seed + 2)
    UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
        up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"],
        block_out_channels=[32, 64],
        layers_per_block=2,
        transformer_layers_per_block=[1, 2],
        attention_head_dim=[2, 4],
        cross_attention_dim=64,  # the two encoders' hidden states are concatenated: 32 + 32
        norm_num_groups=8,
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + 32,  # six time ids + pooled text embeds
    ).eval().save_pretrained(folder / "unet")
    _vae(0.13025, True, seed + 3).save_pretrained(folder / "vae")
    # the real SDXL scheduler config, as published
    EulerDiscreteScheduler(
        **SD_NOISE_SCHEDULE,
        timestep_spacing="leading",
        prediction_type="epsilon",
    ).save_pretrained(folder / "scheduler")
    write_model_index(
        folder,
        "StableDiffusionXLPipeline",
        SDXL_COMPONENTS,
    )
    return folder


def build_tiny_sd15(folder: str | Path, seed: int = 0) -> Path:
    """SD 1.5 layout: one CLIP encoder, a UNet with cross-attention in the first blocks and
    1x1-conv projections, the VAE and the PNDM scheduler the real checkpoint ships."""
    import torch
    from diffusers import PNDMScheduler, UNet2DConditionModel

    folder = Path(folder)
    vocab = _save_tokenizer(folder / "tokenizer", pad_token="<|endoftext|>")
    clip_text_encoder(vocab, 32, 3, "quick_gelu", None, seed).save_pretrained(folder / "text_encoder")
    torch.manual_seed(seed + 2)
    UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"],
        up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"],
        block_out_channels=[32, 64],
        layers_per_block=2,
        attention_head_dim=8,
        cross_attention_dim=32,
        norm_num_groups=8,
    ).eval().save_pretrained(folder / "unet")
    _vae(0.18215, False, seed + 3).save_pretrained(folder / "vae")
    PNDMScheduler(
        **SD_NOISE_SCHEDULE,
        skip_prk_steps=True,
        set_alpha_to_one=False,
    ).save_pretrained(folder / "scheduler")
    write_model_index(folder, "StableDiffusionPipeline", SD15_COMPONENTS)
    return folder


BUILDERS = {"tiny-sdxl": build_tiny_sdxl, "tiny-sd15": build_tiny_sd15}


def ensure_tiny(root: str | Path, name: str = "tiny-sdxl", force: bool = False) -> Path:
    """Build ``root/name`` unless a complete copy is already there; return its path.

    The checkpoint is built in a hidden staging folder and published by rename
    (:func:`sdaccel.core.staging.staged_folder`), so a reader never finds half of one. Two builders
    at once (``make run`` beside ``make test``) take turns: the second waits for the first, then
    finds its checkpoint and keeps it."""
    if name not in BUILDERS:
        raise ValueError(f"Unknown tiny checkpoint {name!r}; choose one of {sorted(BUILDERS)}.")
    folder = Path(root) / name
    if (folder / "model_index.json").is_file() and not force:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with staging.writer_lock(folder):
        if (folder / "model_index.json").is_file() and not force:
            return folder  # another builder made it while this one waited
        with staging.staged_folder(folder) as stage:
            BUILDERS[name](stage)
            fault_point("random_checkpoints.built")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path, help="folder to write the checkpoints into")
    parser.add_argument("--only", choices=sorted(BUILDERS), action="append", help="build only these")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    for name in args.only or BUILDERS:
        path = ensure_tiny(args.root, name, force=args.force)
        print(f"{path}  ({disk_bytes(path) / 1e6:.1f} MB)")


#: The published architectures that :func:`build_random_checkpoint` builds with random weights:
#: name -> folder of ``sdaccel/reference_configs``.
REFERENCE_ARCHITECTURES = {"sd15": "sd-1.5", "sdxl": "sdxl-base-1.0"}


def build_random_checkpoint(
    name: str,
    folder: str,
    seed: int = 0,
    weight_dtype: str = "fp32",
    configs: dict[str, dict] | None = None,
    variants: dict[str | None, str] | None = None,
) -> dict:
    """The real architecture ``name`` (a key of :data:`REFERENCE_ARCHITECTURES`: ``sd15``, ``sdxl``) with random
    weights (PyTorch's default initialisation, seeded), as a diffusers folder that
    ``diffusers.DiffusionPipeline``, ``sdaccel.cpu.export.export_pipeline`` and the JAX
    ``sdaccel.tpu.pipeline.JaxPipeline`` load like the published checkpoint: every component from the
    reference configs (``sdaccel/reference_configs``), the text encoders of the class their
    ``architectures`` names (SDXL's second is ``CLIPTextModelWithProjection``), the scheduler of
    the class its config names, and one CLIP tokenizer per encoder, written by ``sdaccel.tools.toys.random_checkpoints``
    with the pad token of ``tokenizers.json`` (time and memory do not depend on the vocabulary).

    ``weight_dtype="fp16"`` stores the weights in float16: half the disk (SDXL: about 6.9 GB instead
    of 13.9 GB) and the same timings, since every loader here upcasts to the dtype it is asked for
    (the benchmarks ask for float32); the random values are drawn in float32 and rounded once.
    ``configs``: component -> config replacing the reference one (a test builds a shrunk
    architecture with it). ``variants``: the weight files of each component, as variant -> dtype
    (``None`` names the default files, ``"fp16"`` the ``*.fp16.safetensors`` that ``variant="fp16"``
    loads), e.g. ``{None: "fp32", "fp16": "fp16"}`` as the hub's SD repositories hold them; by
    default ``{None: weight_dtype}``. Built in a hidden staging folder beside ``folder`` and renamed into place
    when whole (:func:`sdaccel.core.staging.staged_folder`): two builders of one folder take turns,
    and what a killed one left is removed by the next."""
    import torch

    if name not in REFERENCE_ARCHITECTURES:
        raise ValueError(
            f"no reference architecture {name!r}: choose one of {sorted(REFERENCE_ARCHITECTURES)}."
        )
    dtypes = {"fp32": torch.float32, "fp16": torch.float16}
    files = {None: weight_dtype} if variants is None else dict(variants)
    for dtype in (weight_dtype, *files.values()):
        if dtype not in dtypes:
            raise ValueError(f"weight_dtype must be one of {sorted(dtypes)}, got {dtype!r}.")
    # the widest first: a module rounded to float16 cannot be saved in float32 again
    weights = sorted(((v, dtypes[d]) for v, d in files.items()), key=lambda vd: -vd[1].itemsize)
    reference = resources.files("sdaccel").joinpath("reference_configs", REFERENCE_ARCHITECTURES[name])
    components = SDXL_COMPONENTS if name == "sdxl" else SD15_COMPONENTS

    def config(component: str) -> dict:
        if configs and component in configs:
            return dict(configs[component])
        return json.loads(reference.joinpath(f"{component}.json").read_text())

    folder = Path(folder)
    with staging.staged_folder(folder) as stage:
        _build_reference(stage, name, seed, components, config, weights)
    return {"disk_bytes": disk_bytes(folder), "weight_dtype": weight_dtype}


def _build_reference(tmp: Path, name: str, seed: int, components: dict, config, weights) -> None:
    """The components of :func:`build_random_checkpoint`, written into the empty folder ``tmp``:
    ``config(component)`` gives each one's config, ``weights`` the (variant, torch dtype) of each
    weight file, widest dtype first."""
    import diffusers
    import torch
    import transformers
    from diffusers import AutoencoderKL, UNet2DConditionModel

    def save(module, component: str) -> None:
        for variant, dtype in weights:
            module.to(dtype).save_pretrained(tmp / component, variant=variant)

    # seeds as before the SDXL layout: unet seed, text_encoder seed + 1, vae seed + 2
    torch.manual_seed(seed)
    save(UNet2DConditionModel.from_config(config("unet")).eval(), "unet")
    encoders = [c for c in components if c.startswith("text_encoder")]
    for i, component in enumerate(encoders):
        torch.manual_seed(seed + (1 if i == 0 else 2 + i))
        spec = config(component)
        cls = getattr(transformers, spec.get("architectures", ["CLIPTextModel"])[0])
        save(cls(transformers.CLIPTextConfig(**spec)).eval(), component)
    torch.manual_seed(seed + 2)
    save(AutoencoderKL.from_config(config("vae")).eval(), "vae")
    scheduler = config("scheduler")
    getattr(diffusers, scheduler["_class_name"]).from_config(scheduler).save_pretrained(tmp / "scheduler")
    tokenizers = config("tokenizers")
    for component in (c for c in components if c.startswith("tokenizer")):
        write_random_tokenizer(tmp / component, **tokenizers[component])
    index = {"_class_name": "StableDiffusionXLPipeline" if name == "sdxl" else "StableDiffusionPipeline"}
    index |= {k: list(v) for k, v in components.items()}
    (tmp / "model_index.json").write_text(json.dumps(index, indent=2))


def write_random_tokenizer(folder: Path, pad_token: str, model_max_length: int) -> None:
    """A CLIP tokenizer with ``sdaccel.tools.toys.random_checkpoints``'s small vocabulary, saved as transformers saves it."""
    from transformers import CLIPTokenizer

    write_clip_tokenizer_files(folder)
    tokenizer = CLIPTokenizer.from_pretrained(folder, pad_token=pad_token, model_max_length=model_max_length)
    tokenizer.save_pretrained(folder)


if __name__ == "__main__":
    main()
