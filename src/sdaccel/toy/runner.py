"""The quality runner of the toy's studies: one scoring loop over a table of named configurations.

A study (:mod:`~sdaccel.toy.whole_image_quality`, :mod:`~sdaccel.toy.stack_quality`,
:mod:`~sdaccel.toy.deepcache_quality`, :mod:`~sdaccel.toy.tome_quality`,
:mod:`~sdaccel.toy.sensitivity_quality`, :mod:`~sdaccel.toy.accuracy_control`,
:mod:`~sdaccel.toy.adherence`, :mod:`~sdaccel.toy.adherence_steps`) says what it compares as a table:
configuration name -> a function that makes that configuration's images of the held-out prompts
(building its pipeline, or swapping its UNet in) and returns them with what it measured on the way
(seconds, UNet calls, precision). :func:`score` runs the table in order and scores each
configuration as soon as its references have run: adherence against the prompts and, against the
reference configurations' images, PSNR; the study's ``row`` function says how its rows read
(:func:`adherence_row`, :func:`seeded_row` or its own). :func:`item_score` scores one image the
same way, adherence plus a capped PSNR term, for a search that ranks candidates image by image
(the validation of :mod:`~sdaccel.toy.accuracy_control`).

The images come from one of two runs: :func:`paired_images` (one batch, image ``i`` from the
paired noise of :func:`sdaccel.toy.comparison.paired_latents`) or :func:`seeded_images` (one call
per prompt, image ``i`` seeded with ``i``). :func:`format_table` is the one table writer of the
studies (Markdown, or fixed-width text), over a list of :class:`Column`;
:func:`sdaccel.toy.report.finish` writes their JSON.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from sdaccel.core.tables import markdown_table
from sdaccel.cpu.quality import compare_images, paired_summary, psnr
from sdaccel.toy import dataset
from sdaccel.toy.comparison import uint8_images

#: A configuration: makes its images of the prompts, and returns them with what it measured.
Generate = Callable[[], tuple[list, dict]]
#: How a study's row reads: ``row(images, prompts, measured, against)``, ``against`` the images of
#: each reference (by name) that is not the configuration itself.
Row = Callable[[list, Sequence[str], dict, dict], dict]
#: Weight of the PSNR term of :func:`item_score`, and the PSNR (dB) that counts as full.
PSNR_WEIGHT = 0.002
PSNR_CAP_DB = 60.0


def score(
    configurations: Mapping,
    prompts: Sequence[str],
    row: Row,
    references: Sequence[str] | Mapping[str, list] = (),
    order: Sequence | None = None,
    scored: Callable[[object, dict], None] | None = None,
) -> tuple[dict, dict]:
    """Run every configuration of the table (name -> :data:`Generate`) in order, and score each with
    ``row`` once its references have run. ``references``: the names of the table's reference
    configurations (a name not in the table is no reference), or the reference images themselves
    by name (made elsewhere). ``order``: the rows' order (default the table's); ``scored(name,
    row)``: called as each row is scored. Returns ``(rows, images)``, both by name."""
    given = dict(references) if isinstance(references, Mapping) else {}
    needed = [] if given else [r for r in references if r in configurations]
    images, measured, rows = {}, {}, {}
    for name, generate in configurations.items():
        # 1. the configuration's images, and what it measured
        images[name], measured[name] = generate()
        # 2. every configuration whose references have all run, scored
        for ready in [n for n in images if n not in rows and all(r in images for r in needed)]:
            against = {**given, **{r: images[r] for r in needed if r != ready}}
            rows[ready] = row(images[ready], prompts, measured[ready], against)
            if scored is not None:
                scored(ready, rows[ready])
    names = list(images) if order is None else sorted(images, key=list(order).index)
    return {name: rows[name] for name in names}, images


def adherence_row(images: list, prompts: Sequence[str], measured: dict, against: dict) -> dict:
    """The adherence score and the PSNR against the reference (``None`` for the reference
    itself), then what the configuration measured."""

    reference = next(iter(against.values()), None)
    psnr_mean = None if reference is None else compare_images(reference, images)["psnr_mean"]
    return {"adherence": dataset.adherence(images, prompts)["score"], "psnr_mean": psnr_mean, **measured}


def seeded_row(images: list, prompts: Sequence[str], measured: dict, against: dict) -> dict:
    """What :func:`seeded_images` measured, its ``"adherence"`` filled in (the whole
    :func:`sdaccel.toy.dataset.adherence`), then PSNR/SSIM against the reference, when there is one."""

    row = {**measured, "adherence": dataset.adherence(images, prompts)}
    reference = next(iter(against.values()), None)
    if reference is not None:
        row.update(paired_summary(reference, images))
    return row


def item_score(image, prompt: str, reference) -> float:
    """One validation item's value (:class:`sdaccel.toy.accuracy_control.AdherenceValidation`): 1
    when ``image`` shows ``prompt``'s colour and shape, plus ``PSNR_WEIGHT`` times its PSNR against
    ``reference`` (the f32 UNet's image from the same noise), capped at ``PSNR_CAP_DB`` and scaled
    to [0, 1]."""

    hit = dataset.adherence([image], [prompt])["score"]
    closeness = min(psnr(reference, image), PSNR_CAP_DB) / PSNR_CAP_DB
    return hit + PSNR_WEIGHT * closeness


def paired_images(
    pipe, prompts: Sequence[str], latents, steps: int, guidance_scale: float, size: int
) -> list:
    """The uint8 images of ``prompts`` from an :class:`~sdaccel.cpu.pipeline.OVPipeline` (whatever
    UNet and precision it holds), in one batch, image ``i`` from ``latents[i]``."""
    out = pipe.generate(
        list(prompts), steps=steps, guidance_scale=guidance_scale, height=size, width=size, latents=latents
    )
    return uint8_images(out.array)


def seeded_images(
    pipe, prompts: Sequence[str], call: dict, name: str = "", cache=None, progress: bool = False, calls=False
) -> tuple[list, dict]:
    """The images of ``prompts`` from ``pipe``, one call each, image ``i`` seeded with ``i``
    (``cache``: a DeepCache, or None), and what they measured: with ``calls``, DeepCache's interval
    (None without cache); a slot for the adherence; with ``calls``, the UNet calls per image (full /
    shallow); the median seconds per image (whole pipeline, and the UNet alone). ``name`` labels the
    progress bar."""

    outs = [
        pipe([prompt], seed=i, deepcache=cache, **call)
        for i, prompt in enumerate(tqdm(prompts, desc=name, disable=not progress, leave=False))
    ]
    measured: dict = {"interval": cache.interval if cache else None} if calls else {}
    measured["adherence"] = None
    if calls:
        unet_calls = sum(len(out.timings["unet_steps"]) for out in outs)
        full_calls = unet_calls if cache is None else cache.calls["full"]
        measured["unet_calls_per_image"] = {
            "full": full_calls / len(prompts),
            "shallow": (unet_calls - full_calls) / len(prompts),
        }
    measured["s_per_image"] = statistics.median(out.timings["run_s"] for out in outs)
    measured["unet_s_per_image"] = statistics.median(sum(out.timings["unet_steps"]) for out in outs)
    return [out.images[0] for out in outs], measured


@dataclass(frozen=True)
class Column:
    """One column of a study's table: its ``header``, its ``cell(name, row)`` text, its alignment
    (``"l"``, ``"r"`` or ``"c"``) and, in a fixed-width text table, its ``width``."""

    header: str
    cell: Callable[[str, dict], str]
    align: str = "r"
    width: int = 0


def format_table(rows: Mapping[str, dict], columns: Sequence[Column], text: bool = False) -> str:
    """``rows`` (name -> row) as a Markdown table of ``columns`` or, with ``text``, as fixed-width
    text (each cell padded to its column's width, the columns one space apart)."""
    cells = [[column.cell(name, row) for column in columns] for name, row in rows.items()]
    if not text:
        align = "".join(column.align for column in columns)
        return markdown_table([column.header for column in columns], cells, align=align)

    def line(values):
        pad = {"l": "<", "r": ">", "c": "^"}
        return " ".join(f"{v:{pad[c.align]}{c.width}}" for v, c in zip(values, columns, strict=True))

    return "\n".join([line([c.header for c in columns]), *(line(values) for values in cells)])


def number(key: str, spec: str, scale: float = 1.0, none: str = "-") -> Callable[[str, dict], str]:
    """A cell: ``row[key]`` (a path of keys, dotted: ``"adherence.score"``) times ``scale``, in
    ``spec``; ``none`` when it is missing or None."""

    def cell(name: str, row: dict) -> str:
        value = row
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return none if value is None else f"{scale * value:{spec}}"

    return cell


def name_cell(name: str, row: dict) -> str:
    """A cell: the row's name."""
    return name


def seeded_columns(name_width: int) -> list[Column]:
    """The first columns of the text tables of :func:`seeded_row`'s rows: the configuration, its
    adherence (score, colour, shape), PSNR and SSIM against the reference."""
    return [
        Column("configuration", name_cell, "l", name_width),
        Column("score", number("adherence.score", ".3f"), width=6),
        Column("colour", number("adherence.colour", ".3f"), width=6),
        Column("shape", number("adherence.shape", ".3f"), width=6),
        Column("PSNR dB", number("psnr_mean", ".1f"), width=8),
        Column("SSIM", number("ssim_mean", ".3f"), width=6),
    ]


#: The columns of the rows of :func:`adherence_row` that time one UNet call (``unet_s``, at
#: ``precision``): PSNR against the reference, FakeQuantize count, the call's milliseconds.
UNET_COLUMNS = (
    Column("PSNR vs f32 dB", number("psnr_mean", ".1f")),
    Column("FakeQuantize", lambda name, row: str(row["fake_quantize"])),
    Column("UNet call", lambda name, row: f"{1000 * row['unet_s']:.2f} ms ({row['precision']})"),
)
