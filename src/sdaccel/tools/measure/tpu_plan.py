"""The TPU plan's command line: compile the real SDXL programs for Cloud TPU slices, here, with no
TPU and no weights, for several cases at once, and write the plan files that are committed.

    python -m sdaccel.tools.measure.tpu_plan                       # notebook 01's default on v5e-1
    python -m sdaccel.tools.measure.tpu_plan --topology v5e-4 --mesh auto 2x2 --batch 1 2
    python -m sdaccel.tools.measure.tpu_plan --config build/checkpoints/tiny-sdxl --height 256 --width 256

Each (topology, mesh, attention, batch) is one case of :func:`sdaccel.tpu.plan_compile.compile_case`:
HBM per chip against the chip's capacity, FLOPs per image, the time floor at the chip's peak, the
collectives, the Pallas kernel calls and the compile time; with ``--search``, the largest batch per
chip that fits, by compiling (doubling, then bisection).

Batches are per ``"data"`` shard (per chip on a data-only mesh). The command prints a table and
writes JSON (and a Markdown table) atomically; nothing is written when an argument is wrong.
Real-size programs take minutes each to compile (about 12 on one core): it is a benchmark, not a test.
So no finished compile is thrown away: each row is saved beside ``--out`` as soon as it is made, a
killed or interrupted run leaves ``--out`` as it was, and the next run reuses the rows it finished
and those ``--out`` holds under the same key (:func:`sdaccel.tpu.plan_files.plan_key`); a plan file
it cannot trust (cut short, of another layout, JAX or libtpu) is compiled again, and it says so.
Two runs of one ``--out`` take turns.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

import jax

from sdaccel.core.faults import fault_point
from sdaccel.core.staging import clear_leftovers, writer_lock
from sdaccel.tools.measure.tpu_plan_table import markdown, print_table
from sdaccel.tpu import plan_files
from sdaccel.tpu import topology as tpu_topology
from sdaccel.tpu.plan_compile import DEFAULT_CONFIG, Case, compile_case, read_configs, search_batch

COMMAND = "python -m sdaccel.tools.measure.tpu_plan"

# ----------------------------------------------------------------------------------------------
# The rows of a run, saved as they are made
# ----------------------------------------------------------------------------------------------


def journal_path(out: str | os.PathLike) -> Path:
    """Where a run of ``--out`` keeps each finished row until it publishes them: ``.NAME.rows``."""
    out = Path(out)
    return out.with_name(f".{out.name}.rows")


def save_row(journal: Path, row: dict) -> None:
    """Add ``row`` to ``journal`` (one JSON line, on disk before this returns)."""
    with open(journal, "a") as handle:
        handle.write(json.dumps(row, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def saved_rows(journal: Path) -> dict[str, dict]:
    """The rows of ``journal`` by :func:`sdaccel.tpu.plan_files.plan_key`; a line cut short by a
    kill is skipped."""
    if not journal.is_file():
        return {}
    rows = {}
    for line in journal.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("plan_key"), str):
            rows[row["plan_key"]] = row
    return rows


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--topology", nargs="+", default=["v5e-1"], help=f"of {sorted(tpu_topology.TOPOLOGIES)}"
    )
    parser.add_argument(
        "--mesh", nargs="+", default=["auto"], help="'auto' (all chips on data) or DATAxMODEL"
    )
    parser.add_argument("--attention", nargs="+", default=["splash", "xla"], choices=["splash", "xla"])
    parser.add_argument("--batch", nargs="+", type=int, default=[4], help="images per data shard (chip)")
    parser.add_argument("--height", type=int, default=1024)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--vae-images-per-chip",
        nargs="+",
        default=["1"],
        help="images each chip's VAE decodes at a time "
        "(default 1, as the pipelines do; 'all': the whole batch at once)",
    )
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--no-guidance", action="store_true", help="compile without classifier-free guidance")
    parser.add_argument(
        "--config", default=DEFAULT_CONFIG, help="reference config name or a diffusers checkpoint folder"
    )
    parser.add_argument(
        "--search", action="store_true", help="also find the largest batch that fits, by compiling"
    )
    parser.add_argument("--search-limit", type=int, default=64)
    parser.add_argument(
        "--recompile",
        action="store_true",
        help="compile every case, also those whose rows --out (or an interrupted run of it) already holds",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tpu_plan.json"))
    args = parser.parse_args(argv)
    for name in args.topology:
        tpu_topology.topology(name)  # raises with the choices
    if any(b < 1 for b in args.batch) or args.steps < 1:
        parser.error("--batch and --steps must be positive")
    for vae in args.vae_images_per_chip:
        if vae != "all" and not (
            vae.isdigit() and int(vae) >= 1 and all(b % int(vae) == 0 for b in args.batch)
        ):
            parser.error(
                f"--vae-images-per-chip {vae!r}: 'all' or a positive number that divides every --batch"
            )
    if args.out.suffix != ".json":
        parser.error(f"--out must end in .json (the Markdown table goes beside it), not {args.out}")
    read_configs(args.config)  # a wrong --config fails here, before anything is compiled
    return args


def cases(args) -> list[Case]:
    from sdaccel.tpu import sharding

    out = []
    for topo in args.topology:
        chips = tpu_topology.topology(topo).chips
        for spec in args.mesh:
            data, model = sharding.parse_mesh(spec, chips)
            if data * model > chips:
                raise SystemExit(f"Mesh {spec} needs {data * model} chips; {topo} has {chips}.")
            for attention in args.attention:
                for batch, vae in itertools.product(args.batch, args.vae_images_per_chip):
                    out.append(
                        Case(
                            topo,
                            spec,
                            attention,
                            batch,
                            args.height,
                            args.width,
                            args.steps,
                            args.dtype,
                            not args.no_guidance,
                            vae_images_per_chip=None if vae == "all" else int(vae),
                        )
                    )
    return out


def finished_rows(args, keys: list[str]) -> dict[str, dict]:
    """The rows of this run's cases (``keys``) that need no compile: those ``--out`` holds, and
    those an interrupted run of it saved (:func:`journal_path`); says on stderr what it reuses."""
    out, journal = args.out, journal_path(args.out)
    if args.recompile:
        journal.unlink(missing_ok=True)
        return {}
    published = {k: r for k, r in plan_files.reusable_rows(out).items() if k in keys}
    saved = {k: r for k, r in saved_rows(journal).items() if k in keys}
    if args.search:  # a row made without the same search does not answer it
        published, saved = (
            {k: r for k, r in rows.items() if r.get("search_limit") == args.search_limit}
            for rows in (published, saved)
        )
    if published:
        print(
            f"Reusing {len(published)} row(s) of {out}: the same cases, configs, JAX, libtpu and code "
            "(--recompile compiles them again).",
            file=sys.stderr,
        )
    if saved:
        print(
            f"Reusing {len(saved)} finished row(s) of an interrupted run ({journal.name}): only the other "
            "cases are compiled.",
            file=sys.stderr,
        )
    return {**published, **saved}


def plan_row(case: Case, key: str, args, flops_cache: dict) -> dict:
    """Compile ``case`` (and search its largest batch with ``--search``), then save its row in the
    run's journal at once, so that an interrupted run loses at most the case it was compiling."""
    print(f"compiling {case} ...", flush=True)
    row, _ = compile_case(case, args.config, flops_cache)
    if args.search:
        row["max_batch_searched"], searched = search_batch(case, args.config, args.search_limit)
        row["search"] = [{"batch": r["batch"], "peak": r["hbm_bytes"]["peak"]} for r in searched]
        row["search_limit"] = args.search_limit
    row = plan_files.as_stored({**row, "plan_key": key})
    fault_point("plan.case-compiled")
    save_row(journal_path(args.out), row)
    fault_point("plan.row-saved")
    print_table([row])
    return row


def main(argv=None) -> list[dict]:
    """``python -m sdaccel.tools.measure.tpu_plan``: plan every case, print the table, write
    ``--out`` and its Markdown table; return the rows.

    A case whose row ``--out`` already holds under the same
    :func:`~sdaccel.tpu.plan_files.plan_key` is not compiled again (``--recompile`` does), nor one
    that an interrupted run of ``--out`` finished: each row is saved in ``.NAME.rows`` beside it as
    soon as it is made, until the files are published. The run holds
    :func:`sdaccel.core.staging.writer_lock` on ``--out``: a second run of the same file waits, then
    reuses the first one's rows. Killed or interrupted at any point, ``--out`` is the old file or
    the new one, never a part."""
    if not os.environ.get("JAX_PLATFORMS"):  # compile for TPU, run nothing: the CPU stays the default
        jax.config.update("jax_platforms", "cpu")
    # 1. The arguments: nothing is written when one is wrong
    args = parse_args(argv)
    command = f"{COMMAND} " + " ".join(sys.argv[1:] if argv is None else argv)
    out, table, journal = args.out, args.out.with_suffix(".md"), journal_path(args.out)
    planned = [(case, plan_files.plan_key(case, args.config)) for case in cases(args)]
    out.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(out):
        try:
            # 2. What earlier runs left: unfinished files go, finished rows stay for reuse
            clear_leftovers(out, plan_files.partial_patterns(out, table))
            done = finished_rows(args, [key for _, key in planned])
            # 3. Each case: its finished row, or compiled now and saved at once
            flops_cache: dict = {}
            rows = [
                done[key] if key in done else plan_row(case, key, args, flops_cache) for case, key in planned
            ]
            # 4. Publish: the table, then the plan (the run's last word); then the saved rows go
            fault_point("plan.before-publish")
            print()
            print_table(rows)
            plan_files.write_plan_file(table, markdown(rows, command))
            plan_files.write_plan_file(
                out, json.dumps(plan_files.plan_document(rows, command), indent=1, default=str) + "\n"
            )
        except KeyboardInterrupt:
            kept = len(saved_rows(journal))
            print(
                f"Interrupted: {out} is as it was. {kept} finished row(s) are kept in {journal}: "
                "the same command reuses them.",
                file=sys.stderr,
            )
            raise
        journal.unlink(missing_ok=True)
    print(f"wrote {out} and {table}")
    return rows


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
