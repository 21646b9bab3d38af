"""sdaccel: the helper package behind the "Making Stable Diffusion fast" notebooks.

- ``sdaccel.checkpoint``: find a diffusers checkpoint and read its safetensors without PyTorch.
- ``sdaccel.models``: SDXL / SD 1.x / 2.x in Flax NNX (UNet, VAE, CLIP text encoders).
- ``sdaccel.schedulers``: Euler and DDIM schedulers as pure JAX functions.
- ``sdaccel.tiny``: random-weight tiny checkpoints in the diffusers layout, for tests and smoke runs.
"""

__version__ = "0.1.0"
