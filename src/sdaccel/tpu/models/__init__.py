"""Stable Diffusion models in Flax NNX, one file per component.

Every model keeps activations channels-last (NHWC), the layout TPUs and XLA prefer, and names
its sub-modules exactly as diffusers / transformers do, so that ``sdaccel.tpu.models.weights.load_weights``
maps each parameter to its PyTorch tensor by name.
"""
