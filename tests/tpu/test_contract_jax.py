"""Bad inputs to the JAX front-ends (``JaxPipeline``, ``ShardedPipeline``, ``python -m sdaccel.tpu.generate``):
each is refused with an error that names the fix, before anything is compiled or written.

Before the shared contract (sdaccel.core.contract), these inputs failed deep inside JAX or the
scheduler, or silently gave something else: ``seed=None`` failed inside JAX and ``2**40`` raised
``OverflowError``; ``steps=2.5`` an ``IndexError`` in the scheduler; ``guidance_scale=nan`` and
``height=0`` were accepted (the latter became the default size); ``ShardedPipeline.generate("a red
circle")`` made 12 images, one per character, and an empty list raised ``IndexError`` inside
transformers; ``python -m sdaccel.tpu.generate`` created ``--out`` before a bad model, size or step
count failed, and mixed a new run's images with an old run's.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdaccel.core.checkpoint import CheckpointError
from sdaccel.tpu import generate
from sdaccel.tpu.pipeline import JaxPipeline
from sdaccel.tpu.sharded_pipeline import ShardedPipeline
from sdaccel.tpu.sharding import ShardingError, make_mesh

SIZE = 64  # tiny-sdxl: VAE factor 8, 2 UNet levels -> multiples of 16; trained at 128

#: (keyword arguments, error type, a piece of the message that names the fix)
BAD_CALLS = [
    (dict(prompts=[]), ValueError, "pass one prompt"),
    (dict(prompts=None), TypeError, "string or a list of strings"),
    (dict(seed=None), TypeError, r"random.randrange\(2\*\*32\)"),
    (dict(seed=2**40), ValueError, r"seed % 2\*\*32"),
    (dict(seed=-3), ValueError, r"seed % 2\*\*32"),
    (dict(steps=2.5), ValueError, "integer from 1 to 1000"),
    (dict(steps=0), ValueError, "integer from 1 to 1000"),
    (dict(guidance_scale=math.nan), ValueError, "finite number >= 0"),
    (dict(height=0), ValueError, "nearest valid size is 16x64"),
    (dict(height=60), ValueError, "multiples of 16.*nearest valid size is 64x64"),
    (dict(negative_prompts=["a", "b"]), ValueError, "2 negative prompts for 1 prompts"),
    (dict(first_index=-1), ValueError, "first_index must be an integer"),
    (dict(first_index=2**32), ValueError, "first_index must be an integer"),
]
IDS = [",".join(f"{k}={v!r}" for k, v in kw.items()) for kw, *_ in BAD_CALLS]


@pytest.fixture(scope="module")
def pipe(tiny_sdxl):
    return JaxPipeline.from_pretrained(tiny_sdxl, dtype=jnp.float32, progress=False)


@pytest.fixture(scope="module")
def sharded(tiny_sdxl):
    if jax.device_count() < 4:
        pytest.skip("needs 4 devices")
    return ShardedPipeline.from_pretrained(tiny_sdxl, make_mesh(4), dtype=jnp.float32, progress=False)


def _call(front_end, kwargs):
    call = {"prompts": "a red circle", "steps": 2, "height": SIZE, "width": SIZE, **kwargs}
    return front_end.generate(**call)


def test_defaults_come_from_the_checkpoint(pipe):
    d = pipe.defaults
    assert (d.steps, d.guidance_scale, d.height, d.width, d.size_multiple, d.max_steps) == (
        20, 5.0, 128, 128, 16, 1000,
    )  # fmt: skip


@pytest.mark.parametrize("kwargs, error, fix", BAD_CALLS, ids=IDS)
def test_pipeline_refuses_before_compiling(pipe, kwargs, error, fix):
    programs = (len(pipe._encode), len(pipe._denoise))
    with pytest.raises(error, match=fix):
        _call(pipe, kwargs)
    assert (len(pipe._encode), len(pipe._denoise)) == programs  # nothing was compiled


@pytest.mark.parametrize("kwargs, error, fix", BAD_CALLS, ids=IDS)
def test_sharded_pipeline_refuses_before_compiling(sharded, kwargs, error, fix):
    programs = (len(sharded.pipeline._encode), len(sharded.cache))
    with pytest.raises(error, match=fix):
        _call(sharded, kwargs)
    assert (len(sharded.pipeline._encode), len(sharded.cache)) == programs


def test_one_string_is_one_image_on_every_front_end(pipe, sharded):
    """A string is one prompt (it used to be 12 prompts, one per character, on the sharded one);
    the sharded pipeline pads the batch to its 4 devices and returns, and counts, one image."""
    one = _call(sharded, {"seed": 5})
    assert len(one.images) == 1 and one.array.shape == (1, SIZE, SIZE, 3)
    t = one.timings
    assert (t["images"], t["padded"], t["devices"]) == (1, 3, 4)
    assert t["images_per_s"] == pytest.approx(1 / t["run_s"]) and t["compile_s"] > 0
    plain = _call(pipe, {"seed": 5})
    np.testing.assert_allclose(one.array, plain.array, atol=1e-5, rtol=0)  # same noise index 0
    assert pipe(["a red circle"], steps=2, height=SIZE, width=SIZE, seed=5).timings["compile_s"] == 0


# ----------------------------------------------------------------------------------------------
# python -m sdaccel.tpu.generate: nothing is written before every input is checked
# ----------------------------------------------------------------------------------------------

BAD_CLI = [
    (["--steps", "0"], ValueError, "integer from 1 to 1000"),
    (["--steps", "1001"], ValueError, "integer from 1 to 1000"),
    (["--height", "60"], ValueError, "nearest valid size is 64x64"),
    (["--width", "0"], ValueError, "positive multiples of 16"),
    (["--guidance", "nan"], ValueError, "finite number >= 0"),
    (["--seed", str(2**40)], ValueError, r"seed % 2\*\*32"),
    (["--seed", "-1"], ValueError, r"seed % 2\*\*32"),
    (["--mesh", "2", "--batch", "3"], ShardingError, "multiple of 2"),
    (["--batch", "0"], ShardingError, "at least 1"),
    (["--mesh", "three"], ValueError, "DATAxMODEL"),
]


def _cli(tmp_path, tiny_sdxl, extra, prompts=("a red circle",), model=None):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(prompts) + "\n")
    model = str(tiny_sdxl) if model is None else model
    argv = ["--model", model, "--prompts", str(path), "--out", str(tmp_path / "out"), "--no-progress"]
    return generate.main([*argv, "--steps", "2", "--height", str(SIZE), "--width", str(SIZE), *extra])


def _tree(folder):
    return sorted(
        (p.relative_to(folder).as_posix(), p.read_bytes()) for p in folder.rglob("*") if p.is_file()
    )


@pytest.mark.parametrize("extra, error, fix", BAD_CLI, ids=[" ".join(e) for e, *_ in BAD_CLI])
def test_generate_cli_refuses_before_writing(tmp_path, tiny_sdxl, extra, error, fix):
    if "--mesh" in extra and "2" in extra and jax.device_count() < 2:
        pytest.skip("needs 2 devices")
    with pytest.raises(error, match=fix):
        _cli(tmp_path, tiny_sdxl, extra)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt"]  # no --out, no staging folder


def test_generate_cli_bad_model_or_prompt_file(tmp_path, tiny_sdxl):
    with pytest.raises(CheckpointError, match=r"sdaccel\.tools\.toys\.random_checkpoints build/checkpoints"):
        _cli(tmp_path, tiny_sdxl, [], model=str(tmp_path / "no-such-model"))
    with pytest.raises(SystemExit, match="no prompts"):
        _cli(tmp_path, tiny_sdxl, [], prompts=[" ", ""])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt"]


def test_generate_cli_refuses_a_non_empty_out(tmp_path, tiny_sdxl):
    out = tmp_path / "out"
    out.mkdir()
    (out / "00001.png").write_bytes(b"an earlier run")
    before = _tree(out)
    with pytest.raises(FileExistsError, match="--overwrite to replace it whole, --resume"):
        _cli(tmp_path, tiny_sdxl, [])
    with pytest.raises(FileExistsError, match="holds no run.json"):
        _cli(tmp_path, tiny_sdxl, ["--resume"])
    (out / "run.json").write_text(json.dumps({"model": str(tiny_sdxl), "steps": 3}))
    before = _tree(out)
    with pytest.raises(ValueError, match=r"other settings \(.*steps: 3 -> 2"):
        _cli(tmp_path, tiny_sdxl, ["--resume"])
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "prompts.txt"]
