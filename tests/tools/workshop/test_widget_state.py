"""The ipywidgets state of an executed copy: found, and dropped from a copy on disk (each bar as its
final text: tests/integration/test_notebook_outputs.py)."""

import json

from sdaccel.tools.workshop.widget_state import (
    WIDGET_STATE,
    WIDGET_VIEW,
    drop_widget_state_in,
    saved_widget_state,
)


def test_saved_state_is_found_and_dropped_from_the_copy_on_disk(tmp_path):
    view = {"output_type": "display_data", "data": {WIDGET_VIEW: {"model_id": "m1"}, "text/plain": "bar"}}
    nb = {
        "metadata": {"widgets": {WIDGET_STATE: {"state": {}}}},
        "cells": [{"cell_type": "code", "source": "", "outputs": [view]}],
    }
    assert saved_widget_state(nb) == ["metadata: saved widget state", "cell 0: widget output"]
    executed = tmp_path / "nb.ipynb"
    executed.write_text(json.dumps(nb))
    drop_widget_state_in(executed)
    kept = json.loads(executed.read_text())
    assert saved_widget_state(kept) == []
    assert kept["cells"][0]["outputs"] == [{"output_type": "display_data", "data": {"text/plain": "bar"}}]
    drop_widget_state_in(tmp_path / "missing.ipynb")  # nothing to rewrite: no error
