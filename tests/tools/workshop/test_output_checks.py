"""The checks of an executed copy, one line per problem (the notebooks' own outputs are checked in
tests/integration/test_notebook_outputs.py and test_notebooks.py)."""

import ast
from pathlib import Path

from sdaccel.tools.workshop.output_checks import (
    banned_phrases,
    cell_text,
    development_words,
    frozen_bars,
    learner_text,
    noisy_outputs,
    raw_dumps,
    repeated_lines,
)


def test_a_whole_dict_is_a_raw_dump_and_a_labelled_value_is_not():
    text = "{'a': 1, 'b': 2, 'c': 3}\nprecision -> {'unet': 'f32', 'vae': 'f32', 'text': 'f32'}\n{\"x\": 1}"
    assert raw_dumps(text) == ["{'a': 1, 'b': 2, 'c': 3}"]
    assert raw_dumps('{"a": 1, "b": 2, "c": 3}') == ['{"a": 1, "b": 2, "c": 3}']


def test_a_bar_whose_parts_disagree_is_frozen():
    assert frozen_bars("denoise: 100%|██████████| 12/52 [00:01<00:03]")
    assert frozen_bars("denoise:  23%|██▎       | 12/52 [00:01<00:03]") == []
    assert frozen_bars("denoise: 100%|██████████| 52/52 [00:04<00:00]") == []


def test_sources_and_outputs_are_read_for_development_notes():
    cell = {
        "cell_type": "code",
        "source": ["x = 1\n"],
        "outputs": [{"output_type": "stream", "text": "On this machine it took 3 s\n"}],
    }
    assert "x = 1" in cell_text(cell, ()) and "this machine" in cell_text(cell, ())
    assert banned_phrases({"cells": [cell]}) == ["cell 0: 'this machine'"]


# ----------------------------------------------------------------------------------------------
# The noise of #56: bars left in a cell, "nothing to do", repeated lines, build paths, raw dumps,
# development words. Each: a made-up notebook with the noise fails, a clean one and the usual
# false friends pass.
# ----------------------------------------------------------------------------------------------


def out(text: str, name: str = "stdout") -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def shown(markdown: str) -> dict:  # display(Markdown(...)) as a kernel saves it
    return {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/markdown": markdown, "text/plain": "<IPython.core.display.Markdown object>"},
    }


def code(source: str, *outputs: dict) -> dict:
    return {"cell_type": "code", "source": source, "outputs": list(outputs), "metadata": {}}


def markdown(source: str) -> dict:
    return {"cell_type": "markdown", "source": source, "metadata": {}}


def where(problems: list[str]) -> list[str]:
    return [p.split(":")[0] for p in problems]


def test_a_finished_bar_left_in_a_cell_is_noise_ours_and_diffusers():
    nb = {
        "cells": [
            code("calibrate()", out("calibration: 100%|██████████| 16/16 [00:01<00:00, 12.39it/s]\n")),
            code("pipe(prompt)", out("100%|██████████| 10/10 [00:00<00:00, 87.33it/s]\n")),  # diffusers'
            code("run()", out("sweep:  50%|███████▌       | 1/2 [00:00<00:00]\n")),  # a terminal's width
            code("print(t)", out("| full INT8 | 100% | 12/12 |\nadherence 100% (10/10 prompts)\n")),
        ]
    }
    problems = noisy_outputs(nb)
    assert where(problems) == ["cell 0", "cell 1", "cell 2"]
    assert all("progress bar left" in p and "leave=False" in p for p in problems)
    assert "set_progress_bar_config(disable=True)" in problems[1]


def test_a_nothing_to_do_line_is_noise_even_once():
    said = "../build/smoke/outputs/openvino/x already holds a complete OpenVINO export; nothing to do.\n"
    nb = {"cells": [code("export()", out("Nothing To Do here\n")), code("export()", out(said))]}
    problems = noisy_outputs(nb)
    assert where(problems) == ["cell 0", "cell 1"] and all("'nothing to do' line" in p for p in problems)
    clean = {"cells": [code("export()", out("exported 4 components in 2.1 s\n"))]}
    assert noisy_outputs(clean) == []


def test_a_line_printed_again_is_noise_tables_and_short_lines_are_not():
    footnote = "Measured on Intel Xeon, 2 logical cores, AMX; seconds per image.\n"
    table = "configuration    s/image\n---------------  -------\nf32              1.20\n"
    nb = {
        "cells": [
            code("show(a)", out(table + footnote + "done\n")),
            code("show(b)", out(table + "done\n")),  # a table's header and rule, and a short word
            code("show(c)", out(footnote)),
            code("show(d)", out(footnote.replace("2 logical", "4 logical"))),  # another line
        ]
    }
    assert repeated_lines(nb) == [f"cell 2: the line of cell 0 again {footnote.strip()!r}: say it once"]
    assert noisy_outputs(nb) == repeated_lines(nb)


def test_a_path_into_the_build_folder_is_noise_a_source_file_is_not():
    nb = {
        "cells": [
            code("print(folder)", out("export folder: ../build/smoke/outputs/openvino/tiny\n")),
            code("print(src)", out("weights from build/checkpoints/random-sd15\n")),
            code("show()", shown("25 values in `../build/test/smoke/outputs/04/results.json`")),
        ]
    }
    problems = noisy_outputs(nb)
    assert where(problems) == ["cell 0", "cell 1", "cell 2"] and all("build folder" in p for p in problems)
    clean = {
        "cells": [
            code("print(x)", out("from benchmarks/results/cpu_sd15.json (../benchmarks/results/x.md)\n")),
            code("print(y)", out("the build folder holds the exports; rebuild/x and tools/build/y\n")),
        ]
    }
    assert noisy_outputs(clean) == []


def test_raw_dumps_a_labelled_dict_of_many_keys_a_command_line_and_a_childs_log():
    features = "{'avx2': True, 'avx512f': True, 'avx512_vnni': True, 'amx_tile': True, 'amx_int8': True}"
    command = "python ../benchmarks/bench_openvino.py --models sd15 --variants a b --batch 2 --iters 1"
    log = "[torch_fp32] SD 1.5 UNet, random weights\n[ov_bf16] SD 1.5 UNet, random weights\nok\n"
    assert raw_dumps(f"CPU: Xeon | features: {features}") == [f"CPU: Xeon | features: {features}"]
    assert raw_dumps("first call : {'compile_s': 3.1, 'run_s': 1.3, 'a': 1, 'b': 2, 'c': 3}")
    assert raw_dumps("rows: [{'a': 1}, {'a': 2}, {'a': 3}]")
    assert raw_dumps(f"`{command}`") == [f"`{command}`"]
    assert raw_dumps(log) == ["[torch_fp32] SD 1.5 UNet, random weights"]
    assert raw_dumps("2026-12-07 19:16:22 compiling\n2026-12-07 19:16:25 done\n")
    false_friends = (
        "timesteps [1, 51, 101, 151, 201, 251] and token ids [616, 320, 524, 557, 513]\n"
        "collectives: {'all-reduce': 87, 'all-gather': 6, 'all-to-all': 12}\n"
        "run `python -m sdaccel.tools.measure.tpu_plan --topology v5e-4` to compile it\n"
        "[CpuDevice(id=0), CpuDevice(id=1)]\n"
        "[torch_fp32] one labelled line\n"
        "a note: {'it': 'is {braced}', \"b\": \"]\"}\n"
    )
    assert raw_dumps(false_friends) == []
    nb = {"cells": [code("bench()", out(command + "\n")), code("print(f)", out(false_friends))]}
    (problem,) = noisy_outputs(nb)
    assert problem.startswith("cell 0: a raw dict or JSON dump, command line or log")


def test_development_words_in_markdown_comments_and_outputs():
    nb = {
        "cells": [
            markdown("Every knob of this notebook."),
            code("STEPS = 4  # the largest lever of all\nBATCH = 2"),
            code("print(s)", out("Your run timed a 0.8 M-parameter toy UNet.\n")),
            code("show()", shown("The second chain's arm is the layer cut.")),
            markdown("The package has five rooms."),
            markdown("Three Levers, and the Toys."),
        ]
    }
    assert development_words(nb) == [
        "cell 0: 'knob' (say 'setting')",
        "cell 1: 'lever' (say 'speed-up or method')",
        "cell 2: 'toy' (say 'the tiny trained model')",
        "cell 3: 'arm' (say 'variant or configuration')",
        "cell 4: 'rooms' (say 'parts of the package')",
        "cell 5: 'Levers' (say 'speed-up or method')",
        "cell 5: 'Toys' (say 'the tiny trained model')",
    ]
    assert banned_phrases(nb)[-7:] == development_words(nb)  # the tests and the runner read it there
    false_friends = {
        "cells": [
            markdown("No harm done: a warm cache; ARM64 and Arm Neoverse; leverage the room to spare."),
            markdown("`sdaccel.toy.stack_quality` and `--levers deepcache`\n```\nknob = 1\n```"),
            code("from sdaccel.toy import stack_quality\ntoy_model = knobs[arm]  # the tiny trained model"),
            code("print(p)", out("platform linux-arm64, aarch64; see sdaccel.tools.toys.x and --levers a\n")),
            code("%time run()\n!ls  # an IPython line", out("headroom 3 GiB; bedrooms\n")),
        ]
    }
    assert development_words(false_friends) == []
    assert "the tiny trained model" in learner_text(false_friends["cells"][2])  # comments are read
    assert "an IPython line" in learner_text(false_friends["cells"][4])


def test_the_packages_own_bars_disappear_when_finished():
    """Every tqdm bar of the package's code that notebooks reach (not tools/, the command lines
    that train the tiny models) passes ``leave=False``: finished, it leaves no line in a cell."""
    src = Path(__file__).resolve().parents[3] / "src" / "sdaccel"
    kept = []
    for path in sorted(src.rglob("*.py")):
        if "tools" in path.relative_to(src).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "tqdm"
            ):
                leave = next((k.value for k in node.keywords if k.arg == "leave"), None)
                if not (isinstance(leave, ast.Constant) and leave.value is False):
                    kept.append(f"{path.relative_to(src)}:{node.lineno}")
    assert kept == []
    assert len(list(src.rglob("*.py"))) > 50  # the package was read
