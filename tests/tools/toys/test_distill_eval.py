"""The distilled adapter's evaluation: its Markdown table (through sdaccel.core.tables), the uint8
images of a diffusers pipeline in batches, and the grid of samples."""

from types import SimpleNamespace

import numpy as np

from sdaccel.tools.toys import distill_eval

ROWS = [
    {
        "sampler": "EulerDiscreteScheduler",
        "lora": False,
        "steps": 20,
        "guidance_scale": 6.0,
        "score": 0.984,
        "colour": 0.99,
        "shape": 0.9921,
        "background": 1.0,
        "position": 0.95,
    },
    {
        "sampler": "LCMScheduler",
        "lora": True,
        "steps": 4,
        "guidance_scale": 1.0,
        "score": 0.96875,
        "colour": 1.0,
        "shape": 0.96875,
        "background": 1.0,
        "position": 0.9,
    },
]


def test_adherence_table():
    assert distill_eval.adherence_table(ROWS) == "\n".join(
        [
            "| sampler | LoRA | steps | guidance | score (colour + shape) | colour | shape | background | position |",
            "|---|---|---|---|---|---|---|---|---|",
            "| EulerDiscreteScheduler | - | 20 | 6 | **0.984** | 0.990 | 0.992 | 1.000 | 0.950 |",
            "| LCMScheduler | LCM-LoRA | 4 | 1 | **0.969** | 1.000 | 0.969 | 1.000 | 0.900 |",
        ]
    )


def test_diffusers_images_in_batches_from_the_given_noise():
    calls = []

    def pipe(prompts, num_inference_steps, guidance_scale, latents, output_type):
        calls.append((list(prompts), num_inference_steps, guidance_scale, latents.shape, output_type))
        return SimpleNamespace(images=np.full((len(prompts), 2, 2, 3), 0.5, np.float32))

    latents = np.zeros((5, 4, 1, 1), np.float32)
    images = distill_eval.diffusers_images(pipe, list("abcde"), latents, 4, 1.0, batch=2)
    assert [c[0] for c in calls] == [["a", "b"], ["c", "d"], ["e"]]
    assert calls[0][1:] == (4, 1.0, (2, 4, 1, 1), "np")
    assert len(images) == 5 and all(i.dtype == np.uint8 and (i == 128).all() for i in images)


def test_plot_samples_writes_a_grid(tmp_path):
    image = np.zeros((8, 8, 3), np.uint8)
    result = {
        "prompts": ["a red circle on a blue background, top left"] * 3,
        "images": {"base 20 steps": [image] * 3, "lcm 4 steps": [image] * 3},
    }
    distill_eval.plot_samples(tmp_path / "samples.png", result, n=2)
    assert (tmp_path / "samples.png").read_bytes()[:4] == b"\x89PNG"
    from PIL import Image

    # the rows it draws: the samplers by default (LCM first), or those named (the TAESD command's)
    result["images"]["VAE"] = [image] * 3
    distill_eval.plot_samples(tmp_path / "samplers.png", result, n=2)
    distill_eval.plot_samples(tmp_path / "named.png", result, n=2, rows=["VAE"])
    samplers, named = (Image.open(tmp_path / f"{n}.png").size for n in ("samplers", "named"))
    assert samplers[0] == named[0] and samplers[1] > named[1], (samplers, named)
