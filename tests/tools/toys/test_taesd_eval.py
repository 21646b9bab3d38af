"""A tiny autoencoder's evaluation: the images as the pipelines post-process them, and the table
of its rows (the whole evaluation runs in the shipped folder's making: test_distill_taesd.py)."""

from sdaccel.tools.toys.taesd_eval import evaluation_table, uint8


def test_images_in_minus_one_to_one_become_uint8_hwc():
    import torch

    images = uint8(torch.tensor([-1.0, 0.0, 1.0]).reshape(1, 3, 1, 1))
    assert images[0].shape == (1, 1, 3) and images[0].dtype.name == "uint8"
    assert images[0][0, 0, 0] == 0 and images[0][0, 0, 2] == 255


def test_the_table_has_a_row_per_kind_of_latents():
    row = {"latents": "data set", "steps": None, "guidance_scale": None, "images": 64}
    row.update(psnr_mean=34.567, ssim_mean=0.9512, vae_score=0.95, taesd_score=0.9)
    table = evaluation_table([row, {**row, "latents": "LCM-LoRA", "steps": 4, "guidance_scale": 1.0}])
    lines = table.splitlines()
    assert lines[0].startswith("| latents | steps | guidance | images | PSNR dB |")
    assert "| data set | - | - | 64 | **34.57** | 0.951 | 0.950 | **0.900** |" in table
    assert "| LCM-LoRA | 4 | 1 | 64 |" in table
