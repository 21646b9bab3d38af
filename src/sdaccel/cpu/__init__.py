"""Stable Diffusion on CPU with OpenVINO.

- :mod:`sdaccel.cpu.export`: diffusers checkpoint -> OpenVINO IR folder (the layout GenAI loads).
- :mod:`sdaccel.cpu.pipeline`: a readable Python text-to-image loop over the exported models.
- :mod:`sdaccel.cpu.genai`: the same folder through OpenVINO GenAI's C++ ``Text2ImagePipeline``.
- :mod:`sdaccel.cpu.quantize`: NNCF INT8 (weight-only, hybrid, full) with bounded calibration.
- :mod:`sdaccel.cpu.quality`: PSNR/SSIM, per-step UNet error and grids against the f32 reference.
- :mod:`sdaccel.cpu.deepcache`: the UNet's deep part once every N steps, its shallow part between.
"""
