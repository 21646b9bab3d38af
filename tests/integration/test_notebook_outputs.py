"""What a reader sees: the checks of executed copies (figures inline, no noise, no development
notes), the notebooks' text, the repository address and the Colab requirements, and one notebook
run the way a plain Jupyter kernel runs it (not through the runner)."""

import json
import re
import shutil
import tomllib
from pathlib import Path

import nbformat
import pytest

from sdaccel.course import colab as installer
from sdaccel.course import run_profiles
from sdaccel.course.notebook import REPOSITORY_URL, SETUP_CELL
from sdaccel.tools.workshop import discovery
from sdaccel.tools.workshop.discovery import discover
from sdaccel.tools.workshop.output_checks import (
    BANNED_PHRASES,
    absolute_paths,
    banned_phrases,
    cells_without_figures,
    machine_paths,
    noisy_outputs,
)
from sdaccel.tools.workshop.widget_state import (
    WIDGET_STATE,
    WIDGET_VIEW,
    drop_widget_state,
    saved_widget_state,
)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = discover()
IDS = [nb.stem for nb in NOTEBOOKS]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s#;]+)")


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def notebook(*cells) -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return json.loads(nbformat.writes(nb))


def code(source, *outputs):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    return cell


def stream(name, text):
    return {"output_type": "stream", "name": name, "text": text}


def png():
    return {
        "output_type": "display_data",
        "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
        "metadata": {},
    }


# ----------------------------------------------------------------------------------------------
# The checkers, on made-up executed notebooks
# ----------------------------------------------------------------------------------------------


def test_noise_is_found_and_named_by_cell():
    nb = notebook(
        code("print(1)", stream("stdout", "1\n")),
        code("load()", stream("stderr", "\rtext_encoder:   0%|          | 0/52")),
        code("quantize()", stream("stdout", "\x1b[?25lApplying Weight Compression \x1b[90m━━━\x1b[0m")),
        code("x", stream("stdout", "/site-packages/x.py:3: FutureWarning: `y` is deprecated\n")),
        code("import tqdm", stream("stderr", "   \n")),  # blank stderr: nothing to read
    )
    problems = noisy_outputs(nb)
    assert [p.split(":")[0] for p in problems] == ["cell 1", "cell 2", "cell 3"]
    assert "stderr" in problems[0] and "control codes" in problems[1] and "warning" in problems[2]
    dumps = notebook(
        code("print(machine)", stream("stdout", '{"cpu": "AMD EPYC", "cores": 2, "avx2": true}\n')),
        code("print(config)", stream("stdout", "{'hidden_size': 768, 'layers': 12, 'heads': 12}\n")),
        code("print(p)", stream("stdout", "precision -> {'unet': 'f32', 'vae': 'f32', 'text': 'f32'}\n")),
        code("print(s)", stream("stdout", "{'a': 1}\n{not a dict}\n")),
    )
    assert [p.split(":")[0] for p in noisy_outputs(dumps)] == ["cell 0", "cell 1"]
    assert all("raw dict or JSON dump" in p for p in noisy_outputs(dumps))
    bar = {"output_type": "display_data", "metadata": {}}  # NNCF's rich bar, as a kernel shows it
    bar["data"] = {
        "text/html": "<pre>...</pre>",
        "text/plain": "Statistics collection ━━━━━━━━━━ 100% 8/8 • 0:00:00\n",
    }
    (problem,) = noisy_outputs(notebook(code("nncf.quantize(model, data)", bar)))
    assert (
        problem.startswith("cell 0: NNCF's progress bar 'Statistics collection")
        and "no_progress_bars" in problem
    )
    colours = "\x1b[38;2;255;255;255;48;2;57;59;121m CPU 0 \x1b[0m\n"  # visualize_array_sharding
    assert noisy_outputs(notebook(code("show()", stream("stdout", colours)))) == []
    assert (
        noisy_outputs(notebook(code("print('FutureWarnings are explained below')", stream("stdout", "ok\n"))))
        == []
    )


def test_the_absolute_path_of_the_clone_is_found_in_sources_and_outputs(tmp_path):
    clone = tmp_path / "clone"
    nb = notebook(
        code(f'MODEL_ID = "{clone}/checkpoints/tiny-shapes-sd15"'),  # injected by papermill
        code("print(folder)", stream("stdout", "export folder: ../build/smoke/outputs/openvino/x\n")),
        code("folder", {"output_type": "execute_result", "data": {"text/plain": f"PosixPath('{clone}/b')"}}),
    )
    assert absolute_paths(nb, clone) == [
        f'cell 0: MODEL_ID = "{clone}/checkpoints/tiny-shapes-sd15"',
        f"cell 2: PosixPath('{clone}/b')",
    ]


def test_a_snapshot_folder_of_the_stand_in_is_a_machine_path_in_the_rehearsal(monkeypatch, tmp_path):
    # 01 printed `pipe.folder`, the hub id resolved into the stand-in's cache: the rehearsal's
    # copy showed that machine's folder where a reader wants the id they loaded.
    home = tmp_path / "hf-home"
    monkeypatch.setitem(discovery.PROFILE_ENV, "rehearsal", {"HF_HOME": str(home)})
    snapshot = home / "hub/models--org--name/snapshots/abc"
    nb = notebook(
        code("print(pipe.folder)", stream("stdout", f"loaded {snapshot} in 19.7 s\n")),
        code("print(MODEL_ID)", stream("stdout", "loaded org/name in 19.7 s\n")),
        code("print(REPO)", stream("stdout", f"{discovery.REPO}/build\n")),
    )
    assert machine_paths(nb, "rehearsal") == [
        f"cell 2: {discovery.REPO}/build",
        f"cell 0: loaded {snapshot} in 19.7 s",
    ]
    assert machine_paths(nb, "smoke") == [f"cell 2: {discovery.REPO}/build"]  # no stand-in there


def test_folders_in_the_repository_are_handed_to_the_kernel_relative_to_its_folder(tmp_path):
    notebooks = REPO / "notebooks"
    values = run_profiles.overrides("05_int8_quantization", "smoke", relative_to=notebooks)
    assert values["MODEL_ID"] == "../checkpoints/tiny-shapes-sd15"
    assert (notebooks / values["CALIBRATION_PROMPTS_FILE"]).is_file()
    assert run_profiles.within_repo(tmp_path / "x", notebooks) == str(tmp_path / "x")  # elsewhere: as given
    assert run_profiles.within_repo("build/x", notebooks) == "build/x"  # relative already: as given


def test_a_plot_without_an_inline_figure_is_found():
    nb = notebook(
        code("plt.plot([1])\nplt.show()"),  # agg backend: nothing came back
        code("plt.plot([1])\nplt.show()", png()),
        code("if False:\n    plt.show()"),  # not at the top level: not required
    )
    assert cells_without_figures(nb) == [0]


def test_development_notes_are_found_in_sources_and_outputs():
    nb = notebook(
        code("print(met)", stream("stdout", "target (>= 6x PyTorch fp32) met: {'wall': True}\n")),
        nbformat.v4.new_markdown_cell("Measured at a Load Average of 3."),
        nbformat.v4.new_markdown_cell("the target size of SDXL's crop"),
    )
    assert banned_phrases(nb) == ["cell 0: 'target ('", "cell 1: 'load average'"]
    assert all(p == p.lower() for p in BANNED_PHRASES)
    # code comments and dictionary keys are read too
    priced = notebook(
        code('PRICE = {"VM": 0.1}  # what This Machine costs'), code('PRICE = {"this machine": 1}')
    )
    assert banned_phrases(priced) == ["cell 0: 'this machine'", "cell 1: 'this machine'"]


def widget(model_id, text):
    return {
        "output_type": "display_data",
        "data": {
            WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
            "text/plain": text,
        },
        "metadata": {},
    }


def test_widget_state_is_dropped_and_each_bar_kept_as_its_final_text():
    """tqdm's bar (an HBox of label, progress, counter) becomes the line tqdm prints in a terminal;
    rich's live display (an Output widget) becomes what it captured; the state goes."""

    def model(name, **state):
        return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}

    rich_final = {
        "output_type": "display_data",
        "data": {"text/plain": "Statistics collection 100%"},
        "metadata": {},
    }
    state = {
        "bar": model("HBoxModel", children=["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]),
        "l": model("HTMLModel", value="export:\u2007100%"),
        "p": model("FloatProgressModel", value=4.0, max=4.0),
        "r": model("HTMLModel", value="\u20074/4\u2007[00:02&lt;00:00,\u20071.9it/s]"),
        "half": model("HBoxModel", children=["IPY_MODEL_l2", "IPY_MODEL_p2", "IPY_MODEL_r2"]),
        "l2": model("HTMLModel", value="f32:\u200750%"),
        "p2": model("FloatProgressModel", value=6.0, max=12.0),
        "r2": model("HTMLModel", value="\u20076/12"),
        "live": model("OutputModel", outputs=[rich_final]),
        "slider": model("IntSliderModel", value=3),
    }
    empty_pre = {
        "output_type": "display_data",
        "data": {"text/html": "<pre style='x'></pre>\n", "text/plain": ""},
    }
    nb = notebook(
        code("export()", widget("bar", "export:   0%|          | 0/4")),
        code("quantize()", widget("live", "Output()"), empty_pre, stream("stdout", "done\n")),
        code(
            "run()",
            widget("half", "f32:   0%"),
            widget("slider", "IntSlider(value=3)"),
            widget("gone", "x: 0%"),
        ),
    )
    nb["metadata"]["widgets"] = {WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    assert saved_widget_state(nb) == [
        "metadata: saved widget state",
        "cell 0: widget output",
        "cell 1: widget output",
        "cell 2: widget output",
    ]

    # the executed-copy checks (test_notebooks.py) fail on it: a reader would see "Loading widget..."
    assert noisy_outputs(nb)[:2] == ["metadata: saved widget state", "cell 0: widget output"]

    clean = drop_widget_state(nb)
    assert saved_widget_state(clean) == [] and "widgets" not in clean["metadata"]
    texts = [
        ["".join(o.get("text") or o["data"]["text/plain"]) for o in c["outputs"]] for c in clean["cells"]
    ]
    assert texts == [
        ["export: 100%|██████████| 4/4 [00:02<00:00, 1.9it/s]"],
        ["Statistics collection 100%", "done\n"],
        ["f32: 50%|█████     | 6/12", "IntSlider(value=3)", "x: 0%"],  # no state: its own fallback
    ]
    # no widget state is left; the two bars that stayed (no leave=False) are noise of their own
    assert [p.split(":")[0] for p in noisy_outputs(clean)] == ["cell 0", "cell 2"]
    assert all("progress bar left" in p for p in noisy_outputs(clean))


def test_a_bar_tqdm_hid_leaves_nothing_and_a_frozen_one_is_found():
    """A bar closed with ``leave=False`` is hidden by tqdm (its HBox's layout): a reader saw
    nothing, so the text copy keeps nothing, not the label of its last refresh ("23%" over a full
    bar and "12/52"). Such a frozen line, wherever it comes from, fails the executed-copy checks."""

    def model(name, **state):
        return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}

    state = {
        "bar": model(
            "HBoxModel", children=["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"], layout="IPY_MODEL_lay"
        ),
        "lay": {"model_name": "LayoutModel", "state": {"visibility": "hidden"}},
        "l": model("HTMLModel", value="unet:\u200723%"),
        "p": model("FloatProgressModel", value=52.0, max=52.0),
        "r": model("HTMLModel", value="\u200712/52"),
    }
    nb = notebook(code("load()", widget("bar", "unet:  23%"), stream("stdout", "loaded\n")))
    nb["metadata"]["widgets"] = {WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    clean = drop_widget_state(nb)
    assert ["".join(o.get("text")) for o in clean["cells"][0]["outputs"]] == ["loaded\n"]
    assert noisy_outputs(clean) == []

    frozen = notebook(
        code("a()", stream("stdout", "text_encoder:  23%|██████████| 12/52 [00:00<00:00, 107tensor/s]\n")),
        code("b()", stream("stdout", "vae:   0%|██████████| 0/156\n")),
        code("c()", stream("stdout", "calibration:  67%|██████▋   | 2/3\nf32: 100%|██████████| 12/12\n")),
    )
    problems = noisy_outputs(frozen)
    assert [p.split(":")[0] for p in problems] == ["cell 0", "cell 1", "cell 2"]
    assert all("frozen progress bar" in p for p in problems[:2])
    assert "progress bar left" in problems[2]  # consistent, but left in the cell all the same


def test_a_librarys_finished_loading_bar_is_found():
    """transformers' bar over the tensors of a from_pretrained and diffusers' over a pipeline's
    components, each left finished in a cell (the runner keeps a widget bar's last text): noise,
    though nothing in it is frozen. Our own bars left in a cell are noise too (leave=False)."""

    def widget_text(text):  # what the runner leaves of a widget bar (drop_widget_state)
        return {"output_type": "display_data", "data": {"text/plain": text}, "metadata": {}}

    loading = notebook(
        code("export()", widget_text("Loading weights: 100%|██████████| 52/52 [00:00<00:00, 3414.92it/s]")),
        code("ref()", widget_text("Loading pipeline components...: 100%|██████████| 7/7 [00:01<00:00]")),
        code("calibrate()", widget_text("calibration: 100%|██████████| 16/16 [00:04<00:00,  6.45it/s]")),
        code("print(1)", stream("stdout", "Loading weights is what from_pretrained does\n")),
    )
    problems = noisy_outputs(loading)
    assert [p.split(":")[0] for p in problems] == ["cell 0", "cell 1", "cell 2"]
    assert all("loading bar" in p and "no_loading_bars" in p for p in problems[:2])
    assert "progress bar left" in problems[2] and "leave=False" in problems[2]


def test_the_exporter_loads_without_a_bar_and_puts_the_switch_back(capsys):
    from transformers.utils import logging as transformers_logging

    from sdaccel.cpu.convert import load_torch_component, no_loading_bars

    assert transformers_logging.is_progress_bar_enabled()
    load_torch_component(REPO / "checkpoints" / "tiny-shapes-sdxl", "text_encoder")
    assert "Loading weights" not in capsys.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # put back as it was
    transformers_logging.disable_progress_bar()
    try:
        with no_loading_bars():
            pass
        assert not transformers_logging.is_progress_bar_enabled()  # off before: still off
    finally:
        transformers_logging.enable_progress_bar()


# ----------------------------------------------------------------------------------------------
# The notebooks as committed
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_no_development_notes_in_the_notebooks(nb):
    assert banned_phrases(json.loads(nb.read_text())) == []


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_no_cell_ends_in_a_value_it_does_not_mean_to_show(nb):
    """``gc.collect()`` as a cell's last line prints a count of objects (``31``), and a call that
    returns a folder prints ``PosixPath('...')``; assign them to ``_``. Nor does a cell print a raw
    JSON dump: the results file is on disk, the cells show what they measured."""
    for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
        lines = [line for line in "".join(cell["source"]).splitlines() if line.strip()]
        if cell["cell_type"] == "code" and lines:
            last = r"(gc\.collect|os\.kill|shutil\.rmtree|export_pipeline|quantize\.quantize_ir)\("
            assert not re.match(last, lines[-1]), f"{nb.name} cell {i}"
            assert not any(re.search(r"print\(json\.dumps\(", line) for line in lines), f"{nb.name} cell {i}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_the_profile_cell_follows_the_parameters_cell(nb):
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    assert "parameters" in cells[1]["metadata"].get("tags", [])
    profile_cell = "".join(cells[2]["source"])
    assert f'start("{nb.stem}", globals())' in profile_cell, (
        f"{nb.name}: the cell after the parameters cell must apply the profile (sdaccel.course.run_profiles.start)"
    )


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_smoke_settings_override_existing_parameters(nb):
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    params = "".join(cells[1]["source"])
    for key in run_profiles.SMOKE[nb.stem]:
        assert re.search(rf"^{key} =", params, re.M), (
            f"smoke sets {key}, which the parameters cell does not define"
        )


#: The library calls each JAX lesson exists to teach, standing in its lesson cells (not only in an
#: exercise's solution, which the attendee copy strips), per notebook (#30).
LESSON_CALLS = {
    "01_sdxl_in_jax": [
        "inspect.getsource(denoising_loop)",  # the fori_loop, guidance and scheduler step that run
        "inspect.getsource(classifier_free_guidance)",
        "pipe.scheduler.scale_model_input(",
        '"stablehlo.while" in line',  # the one loop of the compiled program (tests/course/test_lesson_01.py)
        ".as_text()",
    ],
    "02_sharding_across_cores": [
        "jax.random.normal(jax.random.fold_in(key, k), latent_shape)",  # tests/course/test_lesson_02.py
        "re.search(r.pattern, name)",  # one rule placing one weight
        "jax.device_put(weight, NamedSharding(",
        "jax.typeof(placed)",
        "jax.jit(\n    pipe.pipeline.denoise_and_decode,\n    in_shardings=",
        "out_shardings=data",
    ],
    "03_tpu_performance": [
        "inspect.getsource(compilation.enable_compilation_cache)",  # the three jax.config settings
        "jax.block_until_ready(compiled(*args))",  # the timing loop (tests/course/test_lesson_03.py)
        "run_s = statistics.median(runs_s)",
        "pipe.cache.jitted.lower(*args)",
        "lowered.compile(pipe.cache.compiler_options)",
        "executable.cost_analysis()",
        "executable.memory_analysis()",
    ],
    "04_openvino_export_and_run": [  # tests/cpu/test_lesson_cells.py: these make what the helpers make
        "ov.convert_model(decoder, example_input=example_input)",
        "ov.save_model(ov_decoder, by_hand_xml, compress_to_fp16=True)",
        'f32_config = {"INFERENCE_PRECISION_HINT": "f32"}',
        'core.compile_model(unet_model, "CPU", f32_config)',
        'compiled_f32.get_property("INFERENCE_PRECISION_HINT")',
        'pipe.unet(inputs)["out_sample"]',  # the loop written out (tests/cpu/test_lesson_04.py)
        "unet_model.reshape(static_shapes)",  # the static reshape by hand
        'unet_static = core.compile_model(unet_model, "CPU")',
    ],
    "05_int8_quantization": [
        "nncf.Dataset(calibration)",
        "nncf.IgnoredScope(patterns=list(quantize.SENSITIVE_LAYER_PATTERNS), validate=False)",
        "nncf.compress_weights(",
        "nncf.quantize(",
        "model_type=nncf.ModelType.TRANSFORMER,",
        "ignored_scope=keep_in_float,",
        "advanced_parameters=AdvancedQuantizationParameters(",
        "smooth_quant_alphas=AdvancedSmoothQuantParameters(",
        "disable_bias_correction=not BIAS_CORRECTION,",
    ],
    "07_fewer_steps": [  # tests/tpu/test_lesson_code_07.py: these compute what the pipeline runs
        "inspect.getsource(fuse_layer)",  # W + scale * alpha / r * up @ down, as fuse_lora applies it
        "inspect.getsource(LoraLayer.delta)",
        "1.0 * layer.alpha / layer.rank * (up @ down).T",  # one layer fused by hand
        "pipe.fuse_lora([(adapter, 1.0)])",
        "inspect.getsource(guidance_scale_embedding)",  # an LCM UNet's timestep_cond
        "guidance_scale_embedding(w, 256)",
        "inspect.getsource(type(lcm_scheduler).step)",  # one LCM step: x0, c_skip / c_out, fresh noise
        "lcm_scheduler.set_timesteps(LCM_STEPS)",
        "pipe.unfuse_lora()",
    ],
}


@pytest.mark.parametrize("name", sorted(LESSON_CALLS))
def test_the_lesson_calls_stand_in_lesson_cells(name):
    cells = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    lessons = "\n".join(
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "code" and not {"solution", "check"} & set(c["metadata"].get("tags", []))
    )
    assert [call for call in LESSON_CALLS[name] if call not in lessons] == []


# ----------------------------------------------------------------------------------------------
# Platforms: one repository address, lean Colab requirements
# ----------------------------------------------------------------------------------------------


def test_the_repository_address_is_the_same_everywhere():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["urls"]["Repository"] == REPOSITORY_URL
    assert installer.REPOSITORY == REPOSITORY_URL
    assert f'INSTALLER = "{REPOSITORY_URL}/raw/main/src/sdaccel/course/colab.py"' in SETUP_CELL
    readme = (REPO / "README.md").read_text()
    path = REPOSITORY_URL.removeprefix("https://github.com/")
    for nb in NOTEBOOKS:
        badge = f"https://colab.research.google.com/github/{path}/blob/main/notebooks/{nb.name}"
        assert badge in readme, f"the README has no Open in Colab badge for {nb.name}"
    assert "placeholder" not in SETUP_CELL and "<this repo>" not in readme


def test_colab_requirements_are_lean_and_agree_with_the_cpu_pins():
    colab, cpu = pins(REPO / "requirements-colab.txt"), pins(REPO / "requirements-cpu.txt")
    assert colab, "the parser found no pins"
    assert {n: (v, cpu.get(n)) for n, v in colab.items() if cpu.get(n) != v} == {}
    # Colab's own packages stay: another torch would be a multi-GB download and break its CUDA
    for kept in ("torch", "torchvision", "numpy", "matplotlib", "pillow", "ipykernel", "jupyterlab"):
        assert kept not in colab, f"requirements-colab.txt must not pin {kept}"
    for tool in ("pytest", "ruff", "nbval", "papermill", "sphinx"):
        assert tool not in colab, f"{tool} is a development tool, not needed on Colab"
    for needed in ("jax", "flax", "diffusers", "openvino", "nncf"):
        assert needed in colab
    extra = installer.tpu_extra(REPO / "requirements-colab.txt")
    assert extra == f"jax[tpu]=={colab['jax']}", "the TPU extra must be the pinned JAX"


def test_the_setup_cell_fetches_nothing_where_sdaccel_is_installed(monkeypatch):
    """As in CI (no network) and after make setup: the cell neither fetches nor runs the installer."""
    import urllib.request

    def no_network(*args, **kwargs):
        raise AssertionError(f"the setup cell fetched {args} where sdaccel is installed")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    namespace = {"__name__": "__main__"}
    exec(compile(SETUP_CELL, "setup", "exec"), namespace)
    assert namespace["INSTALLER"] == installer.INSTALLER_URL


# ----------------------------------------------------------------------------------------------
# A plain Jupyter kernel with SDACCEL_PROFILE=smoke, as `make lab` starts it
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_plain_kernel_picks_up_the_smoke_profile(tmp_path, monkeypatch):
    """Notebook 00 executed by nbclient (what Jupyter's "Run All" does), not by the runner: no
    papermill parameters, only the kernel environment of `make lab`."""
    from nbclient import NotebookClient

    source = REPO / "notebooks" / "00_environment_and_devices.ipynb"
    shutil.copy(source, tmp_path / source.name)
    for key, value in run_profiles.KERNEL_ENV["smoke"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(run_profiles.CHECKPOINTS_VAR, str(REPO / "build" / "checkpoints"))
    nb = nbformat.read(tmp_path / source.name, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    first = next(o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert first["output_type"] == "stream" and first["text"].startswith("Profile smoke: ")
    assert "Devices: JAX on the CPU with 8 simulated device(s)" in first["text"]
    results = json.loads((tmp_path / "outputs" / "00_environment" / "results.json").read_text())
    # the tiny-shapes SDXL text encoders have width 32; the real SDXL's concatenated width is 2048
    assert results["text_embedding_shape"] == [1, 77, 32]
    assert results["device_count"] == 8 and results["backend"] == "cpu"
    # Jupyter keeps the progress bars' widget state (the runner drops it from the executed copies)
    assert noisy_outputs(drop_widget_state(json.loads(nbformat.writes(nb)))) == []
