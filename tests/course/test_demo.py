"""The interactive demo of notebook 07 (sdaccel.course.demo): its settings, its checks of a request,
its page (nothing fetched from elsewhere), and the page driven in headless Chromium on the smoke
profile's toy: type a prompt, click Generate, wait for the picture, check it and the timing text.

The browser test reuses the DevTools-protocol driver of tests/tools/workshop/test_docs_site.py and leaves
a screenshot of the page after the click in build/demo-screenshot.png.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sdaccel.course import demo
from sdaccel.tools.workshop.run_notebooks import REPO

WORK = REPO / "build" / "demo-test"  # kept between runs: the toy's exports and INT8 UNet are reused
SCREENSHOT = REPO / "build" / "demo-screenshot.png"
PROMPT = "a red circle on a blue background, top left"


def smoke_demo() -> demo.Demo:
    return demo.Demo(demo.settings_for("smoke", WORK))


def chromium_driver():
    """tests/tools/workshop/test_docs_site.py's Chromium class (a test module, so loaded by its path)."""
    path = Path(__file__).with_name("test_docs_site.py")
    spec = importlib.util.spec_from_file_location("_docs_site_driver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Chromium


def test_smoke_settings_are_the_toy_of_notebook_07():
    settings = demo.settings_for("smoke", WORK)
    assert settings.toy and Path(settings.tiny_vae).name == "tiny-shapes-sdxl-taesd"
    assert Path(settings.model).name == "tiny-shapes-sdxl" and Path(settings.model).is_dir()
    assert Path(settings.lora).name == "tiny-shapes-sdxl-lcm-lora"
    assert demo.settings_for("full") == demo.Settings()
    assert not demo.Settings().toy


def test_the_page_says_a_toy_is_a_toy_and_fetches_nothing_from_elsewhere():
    text = demo.page(smoke_demo())
    assert "toy model" in text and "random weights" not in text  # its TAESD is distilled from it
    assert not re.search(r"(https?:)?//[\w.-]+\.\w+", text), "the page must work offline"
    assert "@import" not in text and "<link" not in text
    full = demo.page(demo.Demo(demo.Settings()))
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
    status, reply = demo.answer(smoke_demo(), json.dumps({"prompt": prompt, "steps": steps}).encode())
    assert status == 400 and message in reply["error"]


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
    body = {"prompt": PROMPT, "steps": 4, "lora": True, "taesd": False, "int8": True}
    status, reply = demo.answer(stub, json.dumps(body).encode())
    assert status == 200 and stub.calls == [(PROMPT, 4, True, True, False)]
    assert image_of(reply["image"]).size == (32, 32)
    assert reply["text"] == "0.25 s for 4 steps at 32x32 pixels; UNet in f32; LCM-LoRA + INT8 UNet"


def test_the_notebook_controls_call_the_same_function():
    stub = StubDemo()
    box = demo.widgets(stub)
    controls, picture = box.children[0].children
    prompt, steps, lora, taesd, int8, button = controls.children
    assert steps.value == stub.settings.lcm_steps
    lora.value = False  # the base model's usual steps
    assert steps.value == stub.settings.base_steps
    prompt.value = PROMPT
    button.click()
    assert stub.calls == [(PROMPT, stub.settings.base_steps, False, False, False)]
    assert bytes(picture.value).startswith(b"\x89PNG") and "0.25 s" in box.children[1].value
    prompt.value = ""
    button.click()
    assert "Type a prompt first" in box.children[1].value and not button.disabled


def test_a_small_picture_is_enlarged_by_whole_pixels():
    image = Image.new("RGB", (32, 24))
    assert demo.enlarged(image).size == (256, 192)
    assert demo.enlarged(Image.new("RGB", (512, 512))).size == (512, 512)


def test_a_busy_port_says_so():
    first = demo.serve(smoke_demo(), port=0)
    try:
        with pytest.raises(OSError, match="choose another port"):
            demo.serve(smoke_demo(), port=first.server_address[1])
    finally:
        first.server_close()


def image_of(data_url: str) -> Image.Image:
    assert data_url.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("RGB")


@pytest.mark.slow
def test_the_page_generates_a_picture_in_chromium():
    Chromium = chromium_driver()
    server = demo.serve(smoke_demo(), port=0).start()
    browser = None
    try:
        with urllib.request.urlopen(server.url, timeout=30) as reply:
            assert reply.status == 200 and "Generate" in reply.read().decode()
        browser = Chromium(width=1100, height=760)
        browser.call("Page.navigate", page=True, url=server.url)
        wait_for(browser, "document.readyState === 'complete' && !!document.getElementById('generate')", 60)
        # type a prompt, keep the LCM-LoRA (4 steps), turn INT8 on, and click
        run_js(
            browser,
            "{ const box = document.getElementById('prompt');"
            f"box.value = {json.dumps(PROMPT)};"
            "box.dispatchEvent(new Event('input'));"
            "document.getElementById('int8').click();"
            "document.getElementById('generate').click(); }",
        )
        wait_for(browser, "document.getElementById('picture').naturalWidth > 0", 300)
        timing = browser.evaluate("document.getElementById('timing').textContent")
        picture = image_of(browser.evaluate("document.getElementById('picture').src"))
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        browser.screenshot(SCREENSHOT)
    finally:
        if browser is not None:
            browser.close()
        server.stop()
    assert re.match(
        r"\d+\.\d\d s for 4 steps at 32x32 pixels; UNet in INT8 weights, \w+ activations", timing
    ), timing
    assert "LCM-LoRA + INT8 UNet" in timing
    pixels = np.asarray(picture, dtype=np.float32)
    assert picture.size == (32, 32) and pixels.std() > 10, "the picture is blank"
    with pytest.raises(OSError):  # the server is stopped
        urllib.request.urlopen(server.url, timeout=5)


def run_js(browser, code: str):
    """Run ``code`` in the page; a JavaScript error fails the test with its message."""
    result = browser.call("Runtime.evaluate", page=True, expression=code, returnByValue=True)
    if "exceptionDetails" in result:
        raise AssertionError(f"JavaScript failed: {result['result'].get('description')}\n{code}")
    return result["result"].get("value")


def wait_for(browser, condition: str, timeout: float) -> None:
    """Wait until ``condition`` holds in the page; an error shown on it fails at once."""
    deadline = time.monotonic() + timeout
    while not run_js(browser, f"!!({condition})"):
        error = run_js(
            browser, "document.querySelector('.error') ? document.querySelector('.error').textContent : ''"
        )
        if error or time.monotonic() > deadline:
            text = browser.evaluate("document.body ? document.body.innerText : ''")
            raise AssertionError(error or f"The page never got to {condition!r}; it shows:\n{text}")
        time.sleep(0.25)
