"""The quality runner: the table of configurations runs in order, each row is scored once its
references have run (against them, never against itself), and the one table writer writes
Markdown or fixed-width text. No pipeline runs here: each configuration makes its "images"."""

import numpy as np

from sdaccel.toy import dataset, runner
from sdaccel.toy.runner import Column, number


def table(log):
    def make(name, value):
        def generate():
            log.append(name)
            return [np.full((2, 2, 3), value, np.uint8)], {"made": name}

        return generate

    return {"a": make("a", 1), "ref": make("ref", 2), "b": make("b", 3)}


def row(images, prompts, measured, against):
    return {"made": measured["made"], "against": sorted(against), "value": int(images[0][0, 0, 0])}


def test_every_configuration_runs_once_in_order_and_is_scored_against_the_others_references():
    log, scored = [], []
    rows, images = runner.score(
        table(log), ["p"], row, references=("ref", "absent"), scored=lambda n, r: scored.append(n)
    )
    assert log == ["a", "ref", "b"]
    assert list(rows) == ["a", "ref", "b"] and list(images) == ["a", "ref", "b"]
    assert rows["a"] == {"made": "a", "against": ["ref"], "value": 1}
    assert rows["ref"]["against"] == []  # never against itself
    assert scored == ["a", "ref", "b"]  # "a" waited for its reference


def test_given_reference_images_and_the_rows_order():
    rows, _ = runner.score(table([]), ["p"], row, references={"f32": []}, order=["b", "ref", "a"])
    assert list(rows) == ["b", "ref", "a"]
    assert all(r["against"] == ["f32"] for r in rows.values())


def test_the_table_writer_writes_markdown_and_fixed_width_text():
    rows = {"f32": {"adherence": {"score": 1.0}, "psnr_mean": None}, "int8": {"adherence": {"score": 0.5}}}
    columns = [
        Column("name", runner.name_cell, "l", 6),
        Column("score", number("adherence.score", ".3f"), width=6),
        Column("PSNR", number("psnr_mean", ".1f"), width=5),
    ]
    assert runner.format_table(rows, columns).splitlines() == [
        "| name | score | PSNR |",
        "|---|---:|---:|",
        "| f32 | 1.000 | - |",
        "| int8 | 0.500 | - |",
    ]
    assert runner.format_table(rows, columns, text=True).splitlines() == [
        "name    score  PSNR",
        "f32     1.000     -",
        "int8    0.500     -",
    ]


def test_an_item_scores_its_adherence_plus_a_capped_psnr_term():
    """One image that draws its prompt scores 1 plus the PSNR term: full against itself (PSNR
    capped at ``PSNR_CAP_DB``), less against another image; a blank one only the PSNR term."""
    images, captions = dataset.make_dataset(2, seed=5)
    full = runner.item_score(images[0], captions[0], images[0])
    assert full == 1.0 + runner.PSNR_WEIGHT
    apart = runner.item_score(images[0], captions[0], images[1])
    assert 1.0 <= apart < full
    blank = np.zeros_like(images[0])
    assert 0.0 <= runner.item_score(blank, captions[0], images[0]) < runner.PSNR_WEIGHT
