"""Calibration data for INT8: the prompts, and the UNet's own inputs captured while a
floating-point pipeline generates images, kept in memory or streamed to disk one sample at a time.

The activation ranges of an INT8 UNet depend on the timestep, the latents and the prompts, so
:func:`collect_unet_inputs` samples the UNet's inputs over all three (a :class:`Reservoir` of
uniform random picks); :class:`CalibrationSet` stores them one ``.npz`` per sample in a folder and
reads them back lazily, so NNCF's passes never hold more than one sample in memory and a child
process gets the set by its path. A set replaces its folder whole (:meth:`CalibrationSet.save`,
:func:`collect_unet_inputs`): a save that fails or is killed half-way leaves the previous one.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterable, Iterator, Sequence, Sized
from importlib import resources
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from sdaccel.core.faults import fault_point
from sdaccel.core.staging import disk_bytes, require_free_space, staged_folder
from sdaccel.cpu.ir_files import reporting_full_disk


def read_prompts(path: str | os.PathLike | None = None) -> list[str]:
    """The calibration prompts: one per line, ``#`` comments and blank lines skipped. Without a
    path, the file shipped with the package (``sdaccel/data/calibration_prompts.txt``).

    A missing file or one without a prompt is an error that names it (never an empty list, which
    would only fail later, after the weights were compressed)."""
    if path is None:
        text = resources.files("sdaccel").joinpath("data/calibration_prompts.txt").read_text()
    else:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"Calibration prompt file {path} does not exist: fix the path, or pass None for the "
                "prompts shipped with sdaccel (sdaccel/data/calibration_prompts.txt)."
            )
        text = path.read_text()
    prompts = [
        line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    if not prompts:
        raise ValueError(
            f"Calibration prompt file {path} holds no prompt: write one prompt per line (lines "
            "starting with # and blank lines are skipped), or pass None for the shipped prompts."
        )
    return prompts


class CalibrationSet:
    """Calibration inputs stored one ``.npz`` per sample in a folder, read back lazily.

    Iterating it loads one sample at a time, so NNCF's several passes over the data never hold
    more than one sample in memory, and the set can be handed to a child process by its path.
    ``names`` keeps only those arrays of each sample (one part's inputs, when quantizing in parts),
    ``limit`` only the first samples.
    """

    def __init__(
        self, folder: str | os.PathLike, names: Sequence[str] | None = None, limit: int | None = None
    ):
        self.folder = Path(folder)
        self.names = None if names is None else list(names)
        self.limit = limit

    @property
    def files(self) -> list[Path]:
        return sorted(self.folder.glob("sample_*.npz"))[: self.limit]

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for path in self.files:
            with np.load(path) as npz:
                yield {name: npz[name] for name in (npz.files if self.names is None else self.names)}

    def write(self, index: int, sample: dict[str, np.ndarray]) -> None:
        """Write ``sample`` as the ``index``-th file (replacing one of that index)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        np.savez(self.folder / f"sample_{index:05d}.npz", **sample)
        fault_point("quantize.calibration-sample-saved")

    def require_room_for(self, more: int, what: str = "the calibration set", fewer: str = "") -> None:
        """Raise ``OSError(ENOSPC)``, naming the fix (and ``fewer``, how to ask for fewer samples),
        unless ``more`` samples of the size of the first one fit on the disk: called once the first
        sample is written, before the others."""
        files = self.files
        if not files or more <= 0:
            return
        size = disk_bytes(files[0])
        fewer = f"; or {fewer}" if fewer else ""
        require_free_space(
            self.folder, size * more, f"{what} ({more} more samples of {size / 2**20:.1f} MiB{fewer})"
        )

    @classmethod
    def save(cls, samples: Iterable[dict[str, np.ndarray]], folder: str | os.PathLike) -> CalibrationSet:
        """Write ``samples`` (any iterable: they are streamed) one file each into ``folder``, which is
        replaced whole at the end (:func:`sdaccel.core.staging.staged_folder`): a save that fails or
        is killed half-way leaves the previous set as it was. When ``samples`` has a length, the
        room for all of them is checked once the first is written."""
        count = len(samples) if isinstance(samples, Sized) else None
        with reporting_full_disk(f"Writing the calibration set {folder}"):
            with staged_folder(folder) as stage:
                store = cls(stage)
                for index, sample in enumerate(samples):
                    store.write(index, sample)
                    if index == 0 and count is not None:
                        store.require_room_for(count - 1)
        return cls(folder)


class Reservoir:
    """A uniform random subsample of at most ``capacity`` items of a stream of unknown length
    (Vitter's algorithm R): item ``n`` (0-based) replaces a random slot with probability
    ``capacity / (n + 1)``. With ``store`` (a :class:`CalibrationSet`), kept items are written to
    disk at their slot instead of kept in memory.
    """

    def __init__(self, capacity: int, seed: int = 0, store: CalibrationSet | None = None):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.seen = 0
        self.items: list = []
        self.store = store
        self._kept = 0
        self._rng = random.Random(seed)

    def add(self, item) -> None:
        slot = self.seen if self.seen < self.capacity else self._rng.randrange(self.seen + 1)
        self.seen += 1
        if slot >= self.capacity:
            return
        if self.store is not None:
            self.store.write(slot, item)
            self._kept = min(self._kept + 1, self.capacity)
        elif slot == len(self.items):
            self.items.append(item)
        else:
            self.items[slot] = item

    def __len__(self) -> int:
        return self._kept if self.store is not None else len(self.items)


def collect_unet_inputs(
    pipeline,
    prompts: Sequence[str],
    steps: int,
    num_samples: int,
    *,
    stride: int = 1,
    negative_prompt: str | None = None,
    guidance_scale: float = 7.5,
    height: int | None = None,
    width: int | None = None,
    seed: int = 0,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> list[dict[str, np.ndarray]] | CalibrationSet:
    """Run the floating-point pipeline over ``prompts`` and keep a subsample of the UNet inputs.

    ``len(prompts) * steps`` UNet calls are made (one per step, CFG's two halves in one batch);
    every ``stride``-th call is offered to a :class:`Reservoir` of ``num_samples``, so the kept
    samples are spread uniformly over prompts *and* timesteps however many there are, and memory
    stays bounded by ``num_samples`` (or by one sample, with ``out_dir``: the kept samples are
    written there as they come and a :class:`CalibrationSet` is returned).

    ``pipeline`` is an ``OVPipeline`` (``sdaccel.cpu.pipeline``): its ``generate`` calls
    ``unet_input_callback(inputs)`` with the dict of arrays it is about to give the UNet. The
    arrays are copied, since a pipeline may reuse its buffers.

    An empty ``prompts`` or an ``out_dir`` that cannot be written is refused before the first
    image. ``out_dir`` is replaced whole, and only at the end (:func:`sdaccel.core.staging.staged_folder`):
    a run that fails half-way (or is killed) leaves the previous calibration set as it was. Once the
    first sample is on disk, the room for the others is checked (samples x bytes per sample), so a
    disk too small is refused after one image, not after all of them.
    """

    prompts = list(prompts)
    if not prompts:
        raise ValueError(
            "No calibration prompts: pass at least one (sdaccel.cpu.calibration.read_prompts() reads "
            "the shipped ones, or a file with one prompt per line)."
        )
    size = {} if height is None else {"height": height, "width": width}
    kept = min(num_samples, math.ceil(len(prompts) * steps / stride))  # one UNet call per step

    def run(store: CalibrationSet | None) -> Reservoir:
        reservoir = Reservoir(num_samples, seed=seed, store=store)
        calls = 0

        def keep(inputs: dict) -> None:
            nonlocal calls
            if calls % stride == 0:
                reservoir.add({name: np.array(value, copy=True) for name, value in inputs.items()})
                if store is not None and reservoir.seen == 1:
                    store.require_room_for(kept - 1, fewer="keep fewer samples (num_samples)")
            calls += 1

        for index, prompt in enumerate(tqdm(prompts, desc="calibration", disable=not progress, leave=False)):
            pipeline.generate(
                [prompt],
                negative_prompts=None if negative_prompt is None else [negative_prompt],
                steps=steps,
                guidance_scale=guidance_scale,
                seed=seed + index,
                unet_input_callback=keep,
                **size,
            )
        return reservoir

    if out_dir is None:
        return run(None).items
    with reporting_full_disk(f"Collecting the calibration set into {out_dir}"):
        with staged_folder(out_dir) as stage:
            run(CalibrationSet(stage))
    return CalibrationSet(out_dir)
