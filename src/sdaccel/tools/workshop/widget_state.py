"""The ipywidgets state of an executed notebook: what of it a copy keeps (:func:`saved_widget_state`),
and the copy without it, each progress bar replaced by its final text (:func:`drop_widget_state`)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from sdaccel.core.staging import replace_text

#: output that shows one of them.
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def saved_widget_state(nb: dict) -> list[str]:
    """What an executed notebook (as JSON) keeps of ipywidgets: saved widget state in its metadata,
    and outputs that only a widget manager can draw. One line each; an empty list when clean."""
    found = ["metadata: saved widget state"] if nb.get("metadata", {}).get("widgets") else []
    for i, cell in enumerate(nb.get("cells", [])):
        if any(WIDGET_VIEW in out.get("data", {}) for out in cell.get("outputs", [])):
            found.append(f"cell {i}: widget output")
    return found


def _widget_text(model_id: str, state: dict) -> list[dict] | None:
    """The outputs that stand for one widget, as text, from its saved final state: a tqdm bar
    (an HBox of label, progress and counter) as tqdm prints it in a terminal; a rich live display
    (an Output widget) as the outputs it captured. ``None`` for any other widget."""
    model = state.get(model_id, {})
    fields = model.get("state", {})
    if model.get("model_name") == "OutputModel":
        return [dict(out) for out in fields.get("outputs", [])]
    if model.get("model_name") != "HBoxModel":
        return None
    layout = state.get(str(fields.get("layout", "")).removeprefix("IPY_MODEL_"), {}).get("state", {})
    if layout.get("visibility") == "hidden" or layout.get("display") == "none":
        return []  # a bar closed with leave=False: tqdm hid it, and a reader of the notebook saw nothing
    parts = [state.get(c.removeprefix("IPY_MODEL_"), {}) for c in fields.get("children", [])]
    if [p.get("model_name") for p in parts] != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, bar, right = (p.get("state", {}) for p in parts)
    total, value = bar.get("max") or 0, bar.get("value") or 0
    filled = int(10 * value / total) if total else 0
    text = f"{left.get('value', '')}|{'█' * filled}{' ' * (10 - filled)}|{right.get('value', '')}"
    text = html.unescape(text).replace("\u2007", " ")
    return [{"output_type": "display_data", "data": {"text/plain": text}, "metadata": {}}]


def drop_widget_state(nb: dict) -> dict:
    """An executed notebook (as JSON) without saved widget state, each widget output replaced by
    its final state as text (:func:`_widget_text`), or by its own ``text/plain`` where that cannot
    be read. The state (up to 130 KB of progress bars per notebook) needs a widget manager's
    JavaScript to show at all; the text shows everywhere, in the docs as a literal block. Empty
    outputs that rich leaves behind (``<pre></pre>`` with no text) go too."""
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.get("cells", []):
        outputs = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                text = _widget_text(data[WIDGET_VIEW].get("model_id", ""), state)
                if text is None:
                    plain = {k: v for k, v in data.items() if k == "text/plain"}
                    text = [{**out, "data": plain}] if plain else []
                outputs += text
            elif (
                out.get("output_type") == "display_data"
                and not "".join(data.get("text/plain", "")).strip()
                and re.fullmatch(r"\s*<pre[^>]*>\s*</pre>\s*", "".join(data.get("text/html", "")) or "x")
            ):
                continue
            else:
                outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


def drop_widget_state_in(executed: Path) -> None:
    """:func:`drop_widget_state` of an executed copy on disk (rewritten atomically)."""
    try:
        nb = json.loads(executed.read_text())
    except (OSError, json.JSONDecodeError):
        return
    replace_text(executed, json.dumps(drop_widget_state(nb), indent=1, ensure_ascii=False) + "\n")
