"""Download, before the workshop, exactly the hub files the chosen notebooks read.

    python -m sdaccel.tools.workshop.download                          # every notebook's models
    python -m sdaccel.tools.workshop.download --notebooks 04 05        # only what the CPU notebooks read
    python -m sdaccel.tools.workshop.download --models sdxl --dest /mnt/usb/hf-cache

The files are chosen by the loaders' own patterns (:func:`sdaccel.core.checkpoint.allow_patterns`,
through the table in :mod:`sdaccel.course.resources`): one weight variant, no duplicates. Before
anything is written it lists each repository's matching files from the hub's metadata, prints how
much disk they take (and how much of it is already in the cache), and stops if the disk is too
small. ``huggingface_hub`` shows the progress.

The files go into the Hugging Face cache (``HF_HOME``, or ``--dest``, a cache folder: point
``HF_HUB_CACHE`` at it), so the notebooks' default hub ids find them with no change: once all of a
repository's files are there, its ``main`` reference is pointed at the revision fetched, which is
what a load by hub id reads (offline too). A download that is stopped (Ctrl-C, a lost network, a
killed process) is never taken for the model: the reference is written last. Run the same command
again: the files already fetched stay, each unfinished one is fetched again, and the pieces that a
killed download left in the cache (``blobs/*.incomplete``, which huggingface_hub never reuses)
are removed first (:func:`clear_unfinished`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import filelock

from sdaccel.core.faults import fault_point
from sdaccel.core.staging import replace_text
from sdaccel.course import resources


class DownloadError(RuntimeError):
    """The plan could not be made (hub unreachable, gated model, not enough disk)."""


@dataclass
class RepoPlan:
    name: str
    repo_id: str
    revision: str
    patterns: list[str]
    files: dict[str, int]  # path in the repository -> size in bytes
    cached: set[str]

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())

    @property
    def missing_bytes(self) -> int:
        return sum(size for path, size in self.files.items() if path not in self.cached)


def plan_repo(name: str, model: resources.Model, api, cache_dir: str | None = None) -> RepoPlan:
    """List the files of ``model`` that the loaders' patterns select, with their sizes, from the
    hub's metadata (``api`` is a ``huggingface_hub.HfApi``), and which are already cached."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import filter_repo_objects

    try:
        info = api.model_info(model.repo_id, files_metadata=True)
    except Exception as err:  # the hub client raises many types: all mean "no metadata"
        raise DownloadError(
            f"Could not read {model.repo_id!r} from the hub ({type(err).__name__}: {err}). Check the "
            "network (or HF_ENDPOINT); a gated model needs `hf auth login` and its licence accepted."
        ) from err
    patterns = model.allow_patterns()
    chosen = list(filter_repo_objects(info.siblings, allow_patterns=patterns, key=lambda s: s.rfilename))
    files = {s.rfilename: int(s.size or 0) for s in chosen}
    cached = {
        path
        for path in files
        if isinstance(
            try_to_load_from_cache(model.repo_id, path, cache_dir=cache_dir, revision=info.sha), str
        )
    }
    return RepoPlan(name, model.repo_id, info.sha, patterns, files, cached)


def describe(plans: list[RepoPlan]) -> str:
    lines = [f"{'model':<6} {'repository':<45} {'files':>5} {'size':>9} {'to fetch':>9}"]
    for p in plans:
        lines.append(
            f"{p.name:<6} {p.repo_id:<45} {len(p.files):>5} {_gib(p.total_bytes):>9} {_gib(p.missing_bytes):>9}"
        )
    total = sum(p.total_bytes for p in plans)
    missing = sum(p.missing_bytes for p in plans)
    lines.append(
        f"{'total':<6} {'':<45} {sum(len(p.files) for p in plans):>5} {_gib(total):>9} {_gib(missing):>9}"
    )
    return "\n".join(lines)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def cache_root(dest: str | os.PathLike | None) -> Path:
    """Where the files will land: ``dest``, or the hub cache that ``HF_HOME`` / ``HF_HUB_CACHE`` name."""
    if dest is not None:
        return Path(dest).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def check_disk(root: Path, need_bytes: int, free_bytes: Callable[[Path], int] | None = None) -> None:
    """Raise :class:`DownloadError` when the disk holding ``root`` has less than ``need_bytes`` free
    (:func:`sdaccel.course.resources.disk_shortfall`). The cache folder may not exist yet, so its
    nearest existing parent is measured."""
    disk = resources.disk_shortfall(root, need_bytes, free_bytes)
    if disk.short:
        raise DownloadError(
            f"Not enough disk at {root}: the download needs {_gib(need_bytes)} and {_gib(disk.free_bytes)} is free. "
            "Free some space, choose fewer --notebooks/--models, or pass --dest on a larger disk."
        )


def repo_cache(root: Path, repo_id: str) -> Path:
    """The folder of the model repository ``repo_id`` in the hub cache ``root``."""
    return root / f"models--{repo_id.replace('/', '--')}"


def clear_unfinished(root: Path, repo_id: str, out=print) -> int:
    """Remove the unfinished files (``blobs/*.incomplete``) that killed downloads of ``repo_id``
    left in the hub cache ``root``: huggingface_hub gives each download its own such file and never
    reuses one. A file whose download still runs stays: huggingface_hub holds the lock
    ``.locks/<repository>/<etag>.lock`` while it writes one. Says what it freed; returns the bytes."""

    folder = repo_cache(root, repo_id)
    freed = count = 0
    for piece in sorted((folder / "blobs").glob("*.incomplete")):
        lock_file = root / ".locks" / folder.name / f"{piece.name.split('.', 1)[0]}.lock"
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(lock_file)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:  # a live download is writing it
            continue
        try:
            size = piece.stat().st_size
            piece.unlink()
            freed, count = freed + size, count + 1
        except FileNotFoundError:
            pass
        finally:
            lock.release()
    if count:
        out(
            f"Removed {count} unfinished file(s) of an interrupted download of {repo_id} "
            f"({freed / 2**20:.1f} MiB freed)."
        )
    return freed


def publish_main_ref(root: Path, repo_id: str, revision: str) -> None:
    """Point the ``main`` reference of ``repo_id`` in the hub cache ``root`` at ``revision``, once
    all its files are there: a load by hub id reads the revision that ``main`` names, and
    ``huggingface_hub`` writes none for a download by commit hash, as this one is. Written whole
    (a temporary file renamed), so a reader finds the old revision or the new one."""
    ref = repo_cache(root, repo_id) / "refs" / "main"
    ref.parent.mkdir(parents=True, exist_ok=True)
    replace_text(ref, revision)


def download(
    notebooks: list[str] | None = None,
    models: list[str] | None = None,
    dest: str | os.PathLike | None = None,
    api=None,
    fetch: Callable[..., str] | None = None,
    free_bytes: Callable[[Path], int] | None = None,
    dry_run: bool = False,
    out=print,
) -> list[RepoPlan]:
    """Plan, print the plan, check the disk, then fetch. ``api`` and ``fetch`` default to
    ``huggingface_hub.HfApi()`` and ``huggingface_hub.snapshot_download`` (tests pass fakes).

    1. Plan: each repository's files and how much of them the cache lacks; print it.
    2. Remove what killed downloads left (:func:`clear_unfinished`: it frees disk), then check the
       disk. A dry run stops before either.
    3. Fetch each repository, then point its ``main`` at the revision fetched
       (:func:`publish_main_ref`).
    """
    chosen = resources.select(notebooks)
    wanted = resources.models_for(chosen, models)
    if not wanted:
        raise DownloadError(f"The notebooks {[nb.stem for nb in chosen]} read none of the models {models}.")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    if fetch is None:
        from huggingface_hub import snapshot_download as fetch
    root = cache_root(dest)
    cache_dir = str(root) if dest is not None else None
    plans = [plan_repo(name, model, api, cache_dir) for name, model in wanted.items()]
    out(f"Notebooks: {', '.join(nb.stem for nb in chosen)}")
    out(f"Destination (Hugging Face cache): {root}")
    out(describe(plans))
    need = sum(p.missing_bytes for p in plans)
    if dry_run:
        check_disk(root, need, free_bytes)
        out("Dry run: nothing downloaded.")
        return plans
    for p in plans:
        clear_unfinished(root, p.repo_id, out)
    check_disk(root, need, free_bytes)
    for p in plans:
        out(f"Fetching {p.repo_id} ({len(p.files)} files, {_gib(p.missing_bytes)} to fetch) ...")
        fetch(p.repo_id, revision=p.revision, allow_patterns=p.patterns, cache_dir=cache_dir)
        fault_point("download.repo-fetched")
        publish_main_ref(root, p.repo_id, p.revision)
    out("Done." + (f" Before running the notebooks: export HF_HUB_CACHE={root}" if dest is not None else ""))
    return plans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--notebooks", nargs="*", help=f"notebook numbers ({' '.join(resources.NOTEBOOKS)}); default all"
    )
    parser.add_argument("--models", nargs="*", help=f"only these models ({' '.join(resources.MODELS)})")
    parser.add_argument("--dest", help="a Hugging Face cache folder (default: HF_HOME's hub cache)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and the disk it takes, fetch nothing"
    )
    args = parser.parse_args(argv)
    try:
        download(args.notebooks, args.models, args.dest, dry_run=args.dry_run)
    except (ValueError, DownloadError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
