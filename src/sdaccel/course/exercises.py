"""Exercises at the end of each notebook: checked answers, and the attendee copy without solutions.

Each exercise is three cells just before a notebook's "Next steps":

- a Markdown cell tagged ``exercise``: the task;
- a code cell tagged ``solution``: the answer variable set to ``None``, then the solution between
  ``# BEGIN SOLUTION`` and ``# END SOLUTION``;
- a code cell tagged ``check``: ``check("01.2", answer, expected)``, which prints whether the answer
  is right and raises :class:`ExerciseNotDone` when it is missing or wrong.

The solutions live in the notebooks themselves, so CI runs every notebook with its solutions and
every check passes. The attendee copy replaces each solution block with ``# your code here``::

    python -m sdaccel.course.exercises strip notebooks build/attendee     # or: make attendee
    python -m sdaccel.course.exercises list notebooks

``expected`` (and ``test``) may be a function of no arguments: it is called only once there is an
answer, so a check cell stays cheap, and an unanswered exercise fails before anything is computed.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdaccel.cpu.export import reshape_static
from sdaccel.cpu.precision_timing import precision_name

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
PLACEHOLDER = "# your code here"
TAGS = ("exercise", "solution", "check")
_ID = re.compile(r"""check\(\s*["'](\d\d[a-z]?\.\d+)["']""")
_MISSING = object()


class ExerciseNotDone(AssertionError):
    """An exercise's answer is missing or wrong."""


class ExerciseFormatError(ValueError):
    """A notebook's exercise cells do not follow the format above."""


# ----------------------------------------------------------------------------------------------
# Checking an answer (called from the notebooks' check cells)
# ----------------------------------------------------------------------------------------------


def same(answer, expected, rtol: float = 1e-6, atol: float = 0.0) -> bool:
    """Whether ``answer`` equals ``expected``: numbers within ``rtol``/``atol``, arrays elementwise,
    sequences and dicts item by item, strings ignoring case and surrounding spaces."""

    if isinstance(expected, bool) or isinstance(answer, bool):
        both = isinstance(answer, bool | np.bool_) and isinstance(expected, bool | np.bool_)
        return both and bool(answer) == bool(expected)
    if isinstance(expected, str):
        return isinstance(answer, str) and answer.strip().lower() == expected.strip().lower()
    if isinstance(expected, dict):
        return (
            isinstance(answer, dict)
            and set(map(str, answer)) == set(map(str, expected))
            and all(same(answer[k], expected[k], rtol, atol) for k in expected)
        )
    if isinstance(expected, np.ndarray) or isinstance(answer, np.ndarray) or hasattr(answer, "__array__"):
        try:
            a, e = np.asarray(answer), np.asarray(expected)
        except Exception:  # an answer numpy cannot read is not the array we want
            return False
        return a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=atol))
    if isinstance(expected, list | tuple):
        return (
            isinstance(answer, list | tuple)
            and len(answer) == len(expected)
            and all(same(a, e, rtol, atol) for a, e in zip(answer, expected, strict=True))
        )
    if isinstance(expected, int | float | np.number) and not isinstance(answer, str):
        try:
            return math.isclose(float(answer), float(expected), rel_tol=rtol, abs_tol=atol)
        except (TypeError, ValueError):
            return False
    return answer == expected


def check(
    exercise: str,
    answer,
    expected=_MISSING,
    *,
    test: Callable[[object], bool] | None = None,
    rtol: float = 1e-6,
    atol: float = 0.0,
    hint: str = "",
) -> None:
    """Say whether ``answer`` is right; raise :class:`ExerciseNotDone` when it is missing or wrong
    (nothing is returned, so a notebook shows only the message).

    Give either ``expected`` (a value, or a function of no arguments computing it) or ``test``
    (a function of the answer returning whether it is right)."""
    if (expected is _MISSING) == (test is None):
        raise TypeError("check() needs exactly one of expected= or test=")
    if answer is None or answer is Ellipsis:
        message = f"✗ Exercise {exercise}: not answered yet. Replace the None in the cell above."
        print(message)
        raise ExerciseNotDone(message)
    if test is not None:
        right = bool(test(answer))
    else:
        right = same(answer, expected() if callable(expected) else expected, rtol, atol)
    if right:
        print(f"✓ Exercise {exercise}: right.")
        return
    shown = repr(answer)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    message = f"✗ Exercise {exercise}: not quite (your answer: {shown})." + (f" Hint: {hint}" if hint else "")
    print(message)
    raise ExerciseNotDone(message)


def right_f16(answer, core, xml) -> bool:
    """Exercise 04.3: ``answer`` is ``(config, compiled, ran)``: ``config`` asks for f16, ``compiled``
    is the model at ``xml`` compiled on the CPU with it, and ``ran`` is the name of the precision that
    ``compiled`` reports, which is what this CPU runs a model compiled with the f16 hint in."""

    try:
        config, compiled, ran = answer
        asked = precision_name(dict(config).get("INFERENCE_PRECISION_HINT", ""))
        runs = precision_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
        inputs = [port.get_any_name() for port in compiled.inputs]
    except (TypeError, ValueError, AttributeError, RuntimeError):  # not a (config, compiled, ran) triple
        return False
    reference = core.compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f16"})
    measured = precision_name(reference.get_property("INFERENCE_PRECISION_HINT"))
    return (
        asked == "f16"
        and isinstance(ran, str)
        and ran == runs == measured
        and inputs == [port.get_any_name() for port in reference.inputs]
    )


def right_lcm_step(lcm_step, reference, state, sample, eps, noise) -> bool:
    """Exercise 07.3: ``lcm_step(state, sample, eps, noise)`` is ``reference(state)`` (the scheduler's
    first step) on the lesson's schedule and on the same schedule with boundary scalings that count
    (``c_skip`` 0.3, ``c_out`` 0.8): at the lesson's timesteps ``c_skip`` is below 1e-5 and ``c_out``
    is 1 to float32 precision, so a step without them would pass on that schedule alone."""

    import jax.numpy as jnp

    scaled = dataclasses.replace(
        state, c_skip=jnp.full_like(state.c_skip, 0.3), c_out=jnp.full_like(state.c_out, 0.8)
    )
    for schedule in (state, scaled):
        try:
            answer = lcm_step(schedule, sample, eps, noise)
        except Exception:  # a function that fails on a schedule is not the step
            return False
        if not same(answer, reference(schedule), rtol=1e-5, atol=1e-5):
            return False
    return True


class LoraCalls:
    """A pipeline as exercise 07.2's function sees it: each ``fuse_lora``, ``generate`` and
    ``unfuse_lora`` call goes to ``pipe`` and is recorded in ``calls``, in order."""

    def __init__(self, pipe):
        self._pipe, self.calls = pipe, []

    def fuse_lora(self, adapters):
        self.calls.append(("fuse_lora", list(adapters)))
        return self._pipe.fuse_lora(adapters)

    def generate(self, *args, **kwargs):
        result = self._pipe.generate(*args, **kwargs)
        self.calls.append(("generate", result))
        return result

    def unfuse_lora(self):
        removed = self._pipe.unfuse_lora()
        self.calls.append(("unfuse_lora", removed))
        return removed

    def __getattr__(self, name):
        return getattr(self._pipe, name)


def right_second_lora(with_second_lora, pipe, lora, weight: float = 0.5) -> bool:
    """Exercise 07.2: ``with_second_lora(pipe, lora)`` fuses ``lora`` (and nothing else) at ``weight``,
    generates once with it fused, unfuses it once, and returns that call's images. It runs on
    ``pipe`` through :class:`LoraCalls`; whatever it leaves fused is unfused again afterwards, so the
    notebook goes on with the base weights."""

    calls = LoraCalls(pipe)
    try:
        images = with_second_lora(calls, lora)
    except Exception:  # a function that fails is not the answer
        images = None
    kinds = [kind for kind, _ in calls.calls]
    if kinds.count("fuse_lora") > kinds.count("unfuse_lora"):  # left fused: the base weights back
        pipe.unfuse_lora()
    if kinds != ["fuse_lora", "generate", "unfuse_lora"]:  # never unfused, unfused twice, out of order
        return False
    (fused,) = [a for kind, a in calls.calls if kind == "fuse_lora"]
    generated = calls.calls[1][1]
    if len(fused) != 1 or not (isinstance(fused[0], tuple | list) and len(fused[0]) == 2):
        return False
    adapter, scale = fused[0]
    right_adapter = adapter is lora or (isinstance(adapter, str | Path) and str(adapter) == str(lora))
    return (
        right_adapter and same(scale, weight) and calls.calls[2][1] == 1 and _same_images(images, generated)
    )


def _same_images(images, generated) -> bool:
    """Whether ``images`` are the images of the pipeline result ``generated``."""
    if images is generated.images:
        return True
    try:
        return same([np.asarray(i) for i in images], [np.asarray(i) for i in generated.images])
    except TypeError:  # not a list of images
        return False


class _Pending:
    """A result still being computed, as a ``jax.Array`` is when a call returns: ready at ``ready_at``
    (``time.perf_counter``); ``block_until_ready()`` waits until then and records that it was called."""

    def __init__(self, ready_at: float, waited: list):
        self.ready_at, self.waited = ready_at, waited

    def block_until_ready(self):
        time.sleep(max(0.0, self.ready_at - time.perf_counter()))
        self.waited.append(self)
        return self


class _StandIn:
    """A fresh ``jax.jit`` on a device that runs one call at a time: the first call compiles
    (``compile_s``, before it returns); every call returns at once, its result ready ``run_s[i]``
    seconds after the device is free (``run_s[0]``: the first call's own run)."""

    def __init__(self, compile_s: float, run_s: list[float]):
        self.compile_s, self.run_s = compile_s, run_s
        self.calls, self.args, self.waited, self.free_at = 0, [], [], 0.0

    def __call__(self, *args):
        if self.calls == 0:
            time.sleep(self.compile_s)
        start = max(time.perf_counter(), self.free_at)
        self.free_at = start + self.run_s[min(self.calls, len(self.run_s) - 1)]
        self.calls += 1
        self.args.append(args)
        return _Pending(self.free_at, self.waited)


#: Exercise 03.1's cases: (repeats, compile_s, run_s of each call, the first one's included). The
#: first timed call of the second is slow (another process, a page fault): only a median ignores it.
#: With one repeat, a median that also holds the first call is half the compile.
TIMING_CASES = ((1, 0.5, [0.05, 0.05]), (5, 0.5, [0.05, 0.4, 0.05, 0.05, 0.05, 0.05]))


def right_timing_loop(steady_s, tolerance_s: float = 0.02) -> bool:
    """Exercise 03.1: ``steady_s(fn, *args, repeats=n)`` calls ``fn(*args)`` once untimed, then ``n``
    timed times, waits for every result (``jax.block_until_ready``) and returns the median of the
    timed calls' seconds. Tried on :class:`_StandIn` functions (:data:`TIMING_CASES`): a loop that
    does not wait returns about 0; one that times the compile, averages, or times one call returns a
    slow call's time; one that leaves the first result unwaited times its run in the next call."""
    for repeats, compile_s, run_s in TIMING_CASES:
        fn, token = _StandIn(compile_s, run_s), object()
        try:
            answer = float(steady_s(fn, token, repeats=repeats))
        except Exception:  # not a function of (fn, *args, repeats=...) returning seconds
            return False
        expected = sorted(run_s[1 : repeats + 1])[repeats // 2]  # the median (odd repeats: the middle one)
        if (
            fn.calls != repeats + 1
            or len(fn.waited) != fn.calls
            or any(args != (token,) for args in fn.args)
            or abs(answer - expected) > tolerance_s
        ):
            return False
    return True


def right_static_unet(answer, xml, batch: int, height: int, width: int, vae_scale_factor: int) -> bool:
    """Exercise 04.2: ``answer`` is the UNet at ``xml`` reshaped to static shapes for ``batch`` images
    of ``height`` x ``width`` with guidance, then compiled: every input static and named as the
    export's, the batch doubled (negative and positive halves), the latents ``height /
    vae_scale_factor`` x ``width / vae_scale_factor``, 77 tokens; the shapes that
    :func:`sdaccel.cpu.export.reshape_static` gives, which ``OVPipeline(static=...)`` compiles."""
    import openvino as ov

    if not isinstance(answer, ov.CompiledModel):  # a model reshaped but not compiled, a dict of shapes
        return False
    expected = reshape_static(
        ov.Core().read_model(xml), batch, height, width, guidance=True, vae_scale_factor=vae_scale_factor
    )

    def ports(model):
        inputs = {p.get_any_name(): str(p.get_partial_shape()) for p in model.inputs}
        return inputs, [p.get_any_name() for p in model.outputs]

    return ports(answer) == ports(expected) and all(p.get_partial_shape().is_static for p in answer.inputs)


#: Exercise 02.1's cases: (seed, device, images per device). Devices past the first with several
#: images each, so that drawing from the device's index, or from the image's index on its device,
#: gives other noise than the image's index in the global batch.
NOISE_CASES = ((0, 0, 2), (0, 3, 2), (7, 1, 3), (5, 2, 1))


def right_device_noise(device_noise, shape: tuple[int, ...]) -> bool:
    """Exercise 02.1: ``device_noise(seed, device, per_device)`` is the starting noise of images
    ``device * per_device`` to ``(device + 1) * per_device - 1`` of the global batch, each drawn from
    ``fold_in(key(seed), k)`` as :func:`sdaccel.tpu.pipeline.initial_noise` draws it, for every case of
    :data:`NOISE_CASES` (latents of ``shape``)."""
    import jax.numpy as jnp

    from sdaccel.tpu.pipeline import initial_noise

    for seed, device, per_device in NOISE_CASES:
        expected = initial_noise(seed, jnp.arange(device * per_device, (device + 1) * per_device), shape)
        try:
            answer = device_noise(seed, device, per_device)
        except Exception:  # not a function of (seed, device, per_device)
            return False
        if not same(answer, expected, rtol=0, atol=1e-6):
            return False
    return True


def right_unet_timing(answer, sample: dict) -> bool:
    """Exercise 06.2: ``(compiled, times, median_s)``: a UNet compiled for ``sample``'s static shapes,
    running in f32 with the latency hint, and the median of at least 3 timed calls, within a factor
    of 20 of 3 calls timed here (timings are noisy)."""
    import openvino as ov

    try:
        compiled, times, median_s = answer
        times, median_s = [float(t) for t in times], float(median_s)
    except (TypeError, ValueError):  # not (compiled, times, median_s)
        return False
    if not isinstance(compiled, ov.CompiledModel):
        return False
    if precision_name(compiled.get_property("INFERENCE_PRECISION_HINT")) != "f32":
        return False  # the property is what runs: without the hint, bf16 where the CPU has it
    if not str(compiled.get_property("PERFORMANCE_HINT")).endswith("LATENCY"):  # "LATENCY"
        return False
    shapes = {port.get_any_name(): port.get_partial_shape() for port in compiled.inputs}
    if set(shapes) != set(sample) or not all(
        shape.is_static and list(shape.to_shape()) == list(sample[name].shape)
        for name, shape in shapes.items()
    ):
        return False  # not reshaped to the sample's shapes
    if len(times) < 3 or not all(0 < t < math.inf for t in times):
        return False
    if not math.isclose(median_s, float(np.median(times)), rel_tol=1e-6):
        return False  # the median, not the mean or the minimum
    request = compiled.create_infer_request()
    here = []
    for _ in range(3):
        tick = time.perf_counter()
        request.infer(sample)
        here.append(time.perf_counter() - tick)
    return min(here) / 20 <= median_s <= max(here) * 20


#: Stacks on which exercise 06b's 06.1 is checked beside the notebook's own: the fastest overall is
#: outside a small bound, the most adherent was not timed, wall and CPU seconds rank "b" and "d"
#: differently, and every ``within`` flag says yes (it was set for one bound only).
STACK_CASES = {
    "f32": {"adherence": 0.90, "cpu_s_per_step": 2.0, "s_per_step": 1.0, "within": True},
    "a": {"adherence": 0.95, "cpu_s_per_step": None, "s_per_step": None, "within": True},
    "b": {"adherence": 0.89, "cpu_s_per_step": 1.5, "s_per_step": 0.5, "within": True},
    "c": {"adherence": 0.70, "cpu_s_per_step": 0.5, "s_per_step": 0.3, "within": True},
    "d": {"adherence": 0.885, "cpu_s_per_step": 1.2, "s_per_step": 0.9, "within": True},
}


def fastest_within(rows: dict, bound: float) -> str | None:
    """The name of the stack with the fewest CPU seconds per UNet step among the timed ones whose
    adherence is at least f32's minus ``bound`` (``None`` when none is)."""
    floor = rows["f32"]["adherence"] - bound
    timed = [n for n, r in rows.items() if r["adherence"] >= floor and r["cpu_s_per_step"] is not None]
    return min(timed, key=lambda n: rows[n]["cpu_s_per_step"], default=None)


def right_fastest_stack(pick, rows: dict) -> bool:
    """Exercise 06.1 of the appendix 06b: ``pick(rows, bound)`` names :func:`fastest_within`'s stack
    for the notebook's ``rows`` and for :data:`STACK_CASES`, at bounds from 0 to 1."""
    for case in (rows, STACK_CASES):
        for bound in (0.0, 0.01, 0.02, 0.05, 0.2, 1.0):
            try:
                answer = pick(copy.deepcopy(case), bound)
            except Exception:  # not a function of (rows, bound)
                return False
            if not isinstance(answer, str | None) or answer != fastest_within(case, bound):
                return False
    return True


# ----------------------------------------------------------------------------------------------
# The exercise cells of a notebook
# ----------------------------------------------------------------------------------------------


@dataclass
class Exercise:
    id: str
    task: int  # cell indexes
    solution: int
    check: int


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def code_cell(path: Path, marker: str) -> str:
    """The source of the one code cell of the notebook at ``path`` that contains ``marker`` (the
    tests run a lesson's cell as it stands); none or several is a ValueError."""
    cells = json.loads(Path(path).read_text())["cells"]
    found = [source(c) for c in cells if c["cell_type"] == "code" and marker in source(c)]
    if len(found) != 1:
        raise ValueError(f"{Path(path).name}: {len(found)} code cells contain {marker!r}, expected one")
    return found[0]


def exercise_cells(path: Path, exercise_id: str) -> tuple[str, str, str]:
    """(solution, attendee stub, check): the sources of exercise ``exercise_id`` of the notebook at
    ``path``, the stub being the solution cell of its attendee copy (the tests run them)."""
    nb = json.loads(Path(path).read_text())
    (found,) = [e for e in exercises(nb, Path(path).name) if e.id == exercise_id]
    stub = attendee_copy(nb, Path(path).name)["cells"][found.solution]
    return source(nb["cells"][found.solution]), source(stub), source(nb["cells"][found.check])


def strip_solution(code: str, where: str = "") -> str:
    """The code with every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block replaced by the placeholder
    (indented like the block)."""
    lines, out, inside = code.splitlines(), [], False
    for line in lines:
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ExerciseFormatError(f"{where}: {BEGIN} inside another solution block")
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + PLACEHOLDER)
        elif stripped == END:
            if not inside:
                raise ExerciseFormatError(f"{where}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ExerciseFormatError(f"{where}: {BEGIN} without {END}")
    return "\n".join(out)


def exercises(nb: dict, name: str = "notebook") -> list[Exercise]:
    """The exercises of a notebook (as a dict), checked for their format: each task cell is followed
    by its solution and its check, every solution has a block to strip, and the ids are unique."""
    cells = nb["cells"]
    found, seen = [], set()
    for i, cell in enumerate(cells):
        if "exercise" not in tags(cell) or "solution" in tags(cell) or "check" in tags(cell):
            continue
        if not re.search(r"Exercise \d\d[a-z]?\.\d+", source(cell)):
            continue  # the section's introduction
        if i + 2 >= len(cells) or "solution" not in tags(cells[i + 1]) or "check" not in tags(cells[i + 2]):
            raise ExerciseFormatError(f"{name} cell {i}: an exercise needs a 'solution' then a 'check' cell")
        solution = source(cells[i + 1])
        if BEGIN not in solution or END not in solution:
            raise ExerciseFormatError(f"{name} cell {i + 1}: a solution cell needs {BEGIN} ... {END}")
        strip_solution(solution, f"{name} cell {i + 1}")
        match = _ID.search(source(cells[i + 2]))
        if not match:
            raise ExerciseFormatError(f"{name} cell {i + 2}: a check cell calls check('NN.k', ...)")
        ex_id = match.group(1)
        if ex_id in seen or f"Exercise {ex_id}" not in source(cell):
            raise ExerciseFormatError(
                f"{name} cell {i}: exercise {ex_id} is repeated or its task names another"
            )
        seen.add(ex_id)
        found.append(Exercise(ex_id, i, i + 1, i + 2))
    tagged = sum(1 for c in cells if "solution" in tags(c))
    if tagged != len(found):
        raise ExerciseFormatError(f"{name}: {tagged} solution cells, but {len(found)} exercises around them")
    return found


def attendee_copy(nb: dict, name: str = "notebook") -> dict:
    """The notebook with every solution block replaced by the placeholder and no outputs."""

    exercises(nb, name)  # refuse a malformed notebook before writing anything
    out = copy.deepcopy(nb)
    for i, cell in enumerate(out["cells"]):
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        if "solution" in tags(cell):
            cell["source"] = strip_solution(source(cell), f"{name} cell {i}")
            cell["metadata"]["tags"] = [t if t != "solution" else "answer" for t in tags(cell)]
    return out


def strip(src: Path, dest: Path) -> list[Path]:
    """Write the attendee copy of every notebook of ``src`` (a folder or one notebook) into ``dest``,
    which is replaced as a whole once every copy is written."""
    import nbformat

    src, dest = Path(src), Path(dest)
    notebooks = sorted(src.glob("[0-9][0-9]*_*.ipynb")) if src.is_dir() else [src]
    if not notebooks:
        raise ExerciseFormatError(f"No notebooks (NN_name.ipynb) in {src}.")
    folder = src if src.is_dir() else src.parent
    if dest.resolve() == folder.resolve() or folder.resolve() in dest.resolve().parents:
        raise ExerciseFormatError(
            f"{dest} is inside {folder}: write the attendee copy somewhere else (build/attendee)."
        )
    partial = dest.with_name(dest.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    written = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        nbformat.write(nbformat.from_dict(attendee_copy(nb, path.name)), partial / path.name)
        written.append(dest / path.name)
    if dest.exists():
        shutil.rmtree(dest)
    partial.rename(dest)
    return written


def insert(nb: dict, items: list[dict], intro: str) -> dict:
    """Append exercise cells just before the final "Next steps" cell. ``items``: dicts with ``id``,
    ``title``, ``task`` (Markdown), ``solution`` and ``check`` (code). Used to add exercises."""
    import nbformat

    cells = nb["cells"]
    if not cells or "Next steps" not in source(cells[-1]):
        raise ExerciseFormatError("the notebook must end with its 'Next steps' cell")
    new = [nbformat.v4.new_markdown_cell(intro, metadata={"tags": ["exercise"]})]
    for item in items:
        new += [
            nbformat.v4.new_markdown_cell(
                f"### Exercise {item['id']} · {item['title']}\n\n{item['task']}",
                metadata={"tags": ["exercise"]},
            ),
            nbformat.v4.new_code_cell(item["solution"], metadata={"tags": ["solution"]}),
            nbformat.v4.new_code_cell(item["check"], metadata={"tags": ["check"]}),
        ]
    nb["cells"] = cells[:-1] + new + cells[-1:]
    exercises(nb)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_strip = sub.add_parser("strip", help="write the attendee copy without solutions")
    p_strip.add_argument("src", type=Path, help="a notebook or a folder of notebooks")
    p_strip.add_argument("dest", type=Path, help="the folder to write (replaced as a whole)")
    p_list = sub.add_parser("list", help="list each notebook's exercises")
    p_list.add_argument("src", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "strip":
            for path in strip(args.src, args.dest):
                print(f"wrote {path}")
        else:
            import nbformat

            paths = sorted(args.src.glob("[0-9][0-9]*_*.ipynb")) if args.src.is_dir() else [args.src]
            for path in paths:
                nb = nbformat.read(path, as_version=4)
                found = exercises(nb, path.name)
                titles = [source(nb.cells[e.task]).splitlines()[0].removeprefix("### ") for e in found]
                print(f"{path.name}: {len(found)} exercises" + "".join(f"\n  {t}" for t in titles))
    except ExerciseFormatError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
