"""The checks of an executed copy, one line per problem (the notebooks' own outputs are checked in
tests/integration/test_notebook_outputs.py and test_notebooks.py)."""

from sdaccel.tools.workshop.output_checks import banned_phrases, cell_text, frozen_bars, raw_dumps


def test_a_whole_dict_is_a_raw_dump_and_a_labelled_value_is_not():
    text = "{'a': 1, 'b': 2, 'c': 3}\nprecision -> {'unet': 'f32', 'vae': 'f32', 'text': 'f32'}\n{\"x\": 1}"
    assert raw_dumps(text) == ["{'a': 1, 'b': 2, 'c': 3}"]
    assert raw_dumps('{"a": 1, "b": 2, "c": 3}') == ['{"a": 1, "b": 2, "c": 3}']


def test_a_bar_whose_parts_disagree_is_frozen():
    assert frozen_bars("denoise: 100%|██████████| 12/52 [00:01<00:03]")
    assert frozen_bars("denoise:  23%|██▎       | 12/52 [00:01<00:03]") == []
    assert frozen_bars("denoise: 100%|██████████| 52/52 [00:04<00:00]") == []


def test_sources_and_outputs_are_read_for_development_notes():
    cell = {
        "cell_type": "code",
        "source": ["x = 1\n"],
        "outputs": [{"output_type": "stream", "text": "On this machine it took 3 s\n"}],
    }
    assert "x = 1" in cell_text(cell, ()) and "this machine" in cell_text(cell, ())
    assert banned_phrases({"cells": [cell]}) == ["cell 0: 'this machine'"]
