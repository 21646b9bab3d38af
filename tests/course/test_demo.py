"""The interactive demo of notebook 07 (sdaccel.course.demo): its settings, its checks of a request,
its gradio app (its texts link nothing elsewhere, its controls call the same function), and the app
driven in headless Chromium on the smoke profile's toy: type a prompt, tick INT8, click Generate,
wait for the picture, check it, the timing text, and that the page fetched nothing from elsewhere.

The browser test reuses the DevTools-protocol driver of tests/tools/workshop/test_docs_site.py (it
skips, saying why, where Chromium is missing) and leaves a screenshot of the page after the click in
build/demo-screenshot.png.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import socket
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sdaccel.course import demo
from sdaccel.tools.workshop.discovery import REPO

WORK = REPO / "build" / "demo-test"  # kept between runs: the toy's exports and INT8 UNet are reused
SCREENSHOT = REPO / "build" / "demo-screenshot.png"
PROMPT = "a red circle on a blue background, top left"


def smoke_demo() -> demo.Demo:
    return demo.Demo(demo.settings_for("smoke", WORK))


def chromium_driver():
    """tests/tools/workshop/test_docs_site.py's Chromium class (a test module, so loaded by its path)."""
    path = REPO / "tests" / "tools" / "workshop" / "test_docs_site.py"
    spec = importlib.util.spec_from_file_location("_docs_site_driver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Chromium


def texts(blocks) -> str:
    """Every text the app shows (its Markdown blocks)."""
    import gradio as gr

    return "\n".join(b.value for b in blocks.blocks.values() if isinstance(b, gr.Markdown))


def component(blocks, elem_id: str):
    (found,) = [b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == elem_id]
    return found


def handler(blocks, elem_id: str, event: str):
    """The function that ``event`` of the component ``elem_id`` calls, and its inputs' and outputs' ids."""
    target = component(blocks, elem_id)._id
    (fn,) = [f for f in blocks.fns.values() if (target, event) in f.targets]
    return fn.fn, [c.elem_id for c in fn.inputs], [c.elem_id for c in fn.outputs]


def test_smoke_settings_are_the_toy_of_notebook_07():
    settings = demo.settings_for("smoke", WORK)
    assert settings.toy and Path(settings.tiny_vae).name == "tiny-shapes-sdxl-taesd"
    assert Path(settings.model).name == "tiny-shapes-sdxl" and Path(settings.model).is_dir()
    assert Path(settings.lora).name == "tiny-shapes-sdxl-lcm-lora"
    assert demo.settings_for("full") == demo.Settings()
    assert not demo.Settings().toy


def test_the_page_says_a_toy_is_a_toy_and_fetches_nothing_from_elsewhere():
    text = texts(demo.app(smoke_demo()))
    assert "tiny trained model" in text and "random weights" not in text  # its TAESD is distilled from it
    assert not re.search(r"(https?:)?//[\w.-]+\.\w+", text), "the page must work offline"
    assert "@import" not in text and "<link" not in text
    full = texts(demo.app(demo.Demo(demo.Settings())))
    assert "toy" not in full and "stable-diffusion-v1-5" in full


@pytest.mark.parametrize(
    ("prompt", "steps", "message"),
    [
        ("", 4, "Type a prompt"),
        ("x" * 600, 4, "under 500"),
        ("a red circle", "four", "whole number"),
        ("a red circle", 0, "between 1 and 100"),
    ],
)
def test_a_bad_request_is_refused_with_a_clear_message(prompt, steps, message):
    image, text = demo.respond(smoke_demo(), prompt, steps, int8=False, lora=True, taesd=False)
    assert image is None and text.startswith("**Could not generate:**") and message in text


class StubDemo(demo.Demo):
    """The toy's settings, with a generation that draws a gradient at once (no model)."""

    def __init__(self):
        super().__init__(demo.settings_for("smoke", WORK))
        self.calls = []

    def generate(self, prompt, steps, int8, lora, taesd):
        prompt, steps = demo.check_request(prompt, steps)
        self.calls.append((prompt, steps, int8, lora, taesd))
        image = Image.fromarray(np.tile(np.arange(32, dtype=np.uint8)[None, :, None] * 8, (32, 1, 3)))
        return demo.Picture(image, 0.25, steps, "f32", demo.Choice(lora, taesd, int8), 0.0)


def test_the_reply_carries_the_picture_and_the_seconds():
    stub = StubDemo()
    image, text = demo.respond(stub, PROMPT, 4, int8=True, lora=True, taesd=False)
    assert stub.calls == [(PROMPT, 4, True, True, False)]
    assert image.size == (32, 32)
    assert text == "0.25 s for 4 steps at 32x32 pixels; UNet in f32; LCM-LoRA + INT8 UNet"


def test_the_app_controls_call_the_same_function():
    stub = StubDemo()
    blocks = demo.app(stub)
    assert component(blocks, "steps").value == stub.settings.lcm_steps
    on_lora, inputs, outputs = handler(blocks, "lora", "change")
    assert (inputs, outputs) == (["lora"], ["steps"])
    assert on_lora(False) == stub.settings.base_steps  # the base model's usual steps
    on_click, inputs, outputs = handler(blocks, "generate", "click")
    assert inputs == ["prompt", "steps", "int8", "lora", "taesd"] and outputs == ["picture", "timing"]
    image, text = on_click(PROMPT, stub.settings.base_steps, False, False, False)
    assert stub.calls == [(PROMPT, stub.settings.base_steps, False, False, False)]
    shown = component(blocks, "picture").postprocess(image)  # what the page receives: a PNG file
    assert Path(shown.path).read_bytes().startswith(b"\x89PNG") and "0.25 s" in text
    image, text = on_click("", 4, False, True, False)
    assert image is None and "Type a prompt first" in text


def test_a_small_picture_is_enlarged_by_whole_pixels():
    image = Image.new("RGB", (32, 24))
    assert demo.enlarged(image).size == (256, 192)
    assert demo.enlarged(Image.new("RGB", (512, 512))).size == (512, 512)


def test_a_busy_port_says_so():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        blocks = demo.app(smoke_demo())
        try:
            with pytest.raises(OSError, match="choose another port"):
                demo.launch(blocks, port=port, inline=False)
        finally:
            blocks.close()


@pytest.mark.slow
def test_the_app_generates_a_picture_in_chromium():
    Chromium = chromium_driver()  # skips, saying why, without Chromium
    blocks = demo.app(smoke_demo())
    url = demo.launch(blocks, port=0, inline=False)
    browser = None
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert reply.status == 200
        browser = Chromium(width=1100, height=900)
        browser.call("Page.navigate", page=True, url=url)
        wait_for(
            browser,
            "!!document.querySelector('#generate') && !!document.querySelector('#prompt textarea')",
            60,
        )
        # type a prompt, keep the LCM-LoRA (4 steps), tick INT8, and click Generate, as a person would
        run_js(
            browser, "{ const box = document.querySelector('#prompt textarea'); box.focus(); box.select(); }"
        )
        browser.call("Input.insertText", page=True, text=PROMPT)
        wait_for(browser, f"document.querySelector('#prompt textarea').value === {json.dumps(PROMPT)}", 10)
        click(browser, "#int8 input[type=checkbox]")
        wait_for(browser, "document.querySelector('#int8 input[type=checkbox]').checked", 10)
        click(browser, "#generate")
        wait_for(
            browser,
            "document.querySelector('#picture img') && document.querySelector('#picture img').naturalWidth > 0",
            300,
        )
        timing = browser.evaluate("document.querySelector('#timing').innerText").strip()
        source = browser.evaluate("document.querySelector('#picture img').src")
        with urllib.request.urlopen(source, timeout=30) as reply:
            picture = Image.open(io.BytesIO(reply.read())).convert("RGB")
        fetched = browser.evaluate(
            "JSON.stringify(performance.getEntriesByType('resource').map(e => e.name))"
        )
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        browser.screenshot(SCREENSHOT)
    finally:
        if browser is not None:
            browser.close()
        blocks.close()
    assert re.match(
        r"\d+\.\d\d s for 4 steps at 32x32 pixels; UNet in INT8 weights, \w+ activations", timing
    ), timing
    assert "LCM-LoRA + INT8 UNet" in timing
    elsewhere = [u for u in json.loads(fetched) if not u.startswith((url, "data:", "blob:"))]
    assert elsewhere == [], "the page must work offline"
    pixels = np.asarray(picture, dtype=np.float32)
    assert picture.size == (32, 32) and pixels.std() > 10, "the picture is blank"
    with pytest.raises(OSError):  # the server is stopped
        urllib.request.urlopen(url, timeout=5)


def run_js(browser, code: str):
    """Run ``code`` in the page; a JavaScript error fails the test with its message."""
    result = browser.call("Runtime.evaluate", page=True, expression=code, returnByValue=True)
    if "exceptionDetails" in result:
        raise AssertionError(f"JavaScript failed: {result['result'].get('description')}\n{code}")
    return result["result"].get("value")


def click(browser, selector: str) -> None:
    """A mouse click (press and release) in the middle of the element ``selector``."""
    box = run_js(
        browser,
        f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
        " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()",
    )
    for kind in ("mousePressed", "mouseReleased"):
        browser.call(
            "Input.dispatchMouseEvent", page=True, type=kind, x=box[0], y=box[1], button="left", clickCount=1
        )


ERROR = (
    "(() => { const t = document.querySelector('#timing'); const toast = document.querySelector('.toast-body');"
    " if (t && t.innerText.includes('Could not generate')) return t.innerText;"
    " return toast ? toast.innerText : ''; })()"
)


def wait_for(browser, condition: str, timeout: float) -> None:
    """Wait until ``condition`` holds in the page; an error shown on it fails at once."""
    deadline = time.monotonic() + timeout
    while not run_js(browser, f"!!({condition})"):
        error = run_js(browser, ERROR)
        if error or time.monotonic() > deadline:
            text = browser.evaluate("document.body ? document.body.innerText : ''")
            raise AssertionError(error or f"The page never got to {condition!r}; it shows:\n{text}")
        time.sleep(0.25)
