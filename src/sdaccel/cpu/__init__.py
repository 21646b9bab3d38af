"""Stable Diffusion on CPU with OpenVINO.

- :mod:`sdaccel.cpu.export`: diffusers checkpoint -> OpenVINO IR folder (the layout GenAI loads).
- :mod:`sdaccel.cpu.pipeline`: a readable Python text-to-image loop over the exported models.
- :mod:`sdaccel.cpu.genai`: the same folder through OpenVINO GenAI's C++ ``Text2ImagePipeline``.
"""
