"""Every notebook under notebooks/ is checked for its anatomy and executed in the smoke profile.

Discovery is automatic (``sdaccel.tools.workshop.discovery.discover``), so a new notebook cannot escape CI.
The execution tests assert on the values each notebook recorded in its ``results.json``, not only
on "no exception": each execution starts with an empty output folder, and a key that a check reads
but the notebook did not record fails the test, naming the key. Then nbval re-executes each
executed copy through its last checked cell and checks that every cell marked
``# NBVAL_CHECK_OUTPUT`` prints the same thing twice (seeds, shapes and device layouts are
deterministic).
"""

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from sdaccel.course import whole_image
from sdaccel.course.notebook import SETUP_CELL
from sdaccel.tools.workshop.discovery import PROFILE_ENV, discover
from sdaccel.tools.workshop.output_checks import (
    absolute_paths,
    banned_phrases,
    cells_without_figures,
    noisy_outputs,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = discover()
IDS = [nb.stem for nb in NOTEBOOKS]


def cells(nb_path: Path) -> list[dict]:
    return json.loads(nb_path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 1 and NOTEBOOKS[0].name.startswith("00_")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_outputs_are_stripped(nb):
    for i, cell in enumerate(cells(nb)):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, (
                f"{nb.name} cell {i} has outputs: run nbstripout"
            )


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_anatomy(nb):
    all_cells = cells(nb)
    assert all_cells[0]["cell_type"] == "markdown" and source(all_cells[0]).startswith("# "), "title first"
    assert "You will learn" in source(all_cells[0])
    code = [c for c in all_cells if c["cell_type"] == "code"]
    assert source(code[0]) == SETUP_CELL, "the first code cell must be sdaccel.course.notebook.SETUP_CELL"
    tagged = [c for c in all_cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{nb.name} needs exactly one cell tagged 'parameters'"
    assert tagged[0] is code[1], "the parameters cell comes right after the setup cell"
    params = source(tagged[0])
    assert "OUTPUT_DIR" in params
    assert "{checkpoints}" not in params and "tiny" not in params.lower(), "defaults must be the real models"
    assert "Next steps" in source(all_cells[-1])


# ----------------------------------------------------------------------------------------------
# Execution in the smoke profile
# ----------------------------------------------------------------------------------------------


class Recorded(Mapping):
    """A notebook's ``results.json`` as the checks read it. A key that the notebook did not record
    fails the test and names the key: it never reads as ``None``, a default or a skip."""

    def __init__(self, data: dict, notebook: str, where: str = "results"):
        self._data, self._notebook, self._where = data, notebook, where

    def __getitem__(self, key):
        if key not in self._data:
            pytest.fail(
                f"{self._notebook} did not record {self._where}[{key!r}] "
                f"(it recorded {sorted(self._data)}): a check reads it, so the notebook must write it"
            )
        value = self._data[key]
        return (
            Recorded(value, self._notebook, f"{self._where}[{key!r}]") if isinstance(value, dict) else value
        )

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


#: What each notebook must have recorded, beyond "it ran": (what is checked, the check), keyed by
#: notebook stem. Every notebook has an entry (test_every_notebook_has_checks).
CHECKS = {
    "00_environment_and_devices": [
        ("JAX runs on the CPU backend", lambda r: r["backend"] == "cpu"),
        ("8 simulated devices", lambda r: r["device_count"] == 8),
        ("a 1-D data mesh over them", lambda r: r["mesh_shape"] == {"data": 8}),
        ("the pinned JAX", lambda r: r["versions"]["jax"] == "0.10.2"),
        ("77 text tokens", lambda r: r["text_embedding_shape"][1] == 77),
    ],
    "01_sdxl_in_jax": [
        ("a UNet was loaded", lambda r: r["params"]["unet"] > 0),
        ("compile time measured", lambda r: r["compile_s"] > 0),
        ("parity with diffusers within 2/255", lambda r: r["max_abs_diff_vs_torch"] < 2 / 255),
        # the trained shapes checkpoint drew 8/8 held-out prompts right in JAX; one miss allowed
        ("adherence >= 7/8", lambda r: r["adherence"]["score"] >= 7 / 8),
        # the lowered program: the denoising loop's 20 trips, then the VAE's, one per image
        ("one while loop of the 20 steps", lambda r: r["loop_trips"] == [20, 8]),
    ],
    "02_sharding_across_cores": [
        ("same images sharded and not", lambda r: r["same_images"] is True),
        ("same images on every device count", lambda r: r["same_images_all_counts"] is True),
        ("a data mesh of 8", lambda r: r["mesh_shape"] == {"data": 8}),
        ("parameters replicated", lambda r: r["params_replicated"] is True),
        ("a 4x2 model-parallel mesh", lambda r: r["model_parallel_mesh"] == {"data": 4, "model": 2}),
        (
            "model parallelism holds fewer weight bytes per device",
            lambda r: r["weight_bytes_per_device_model_parallel"] < r["weight_bytes_per_device"],
        ),
        # the shapes UNet: 8 ResNets (one pair each) and 4 transformer layers (three pairs each)
        ("a Megatron layout counted", lambda r: r["megatron_all_reduces_per_unet_pass"] == 20),
        # our rule's layout, one trip of the denoising loop: measured 70 all-reduces, 6 all-gathers,
        # 8 collective-permutes and 12 all-to-alls
        (
            "the naive layout communicates more per UNet pass",
            lambda r: sum(r["model_axis_collectives_per_unet_pass"].values()) > 20,
        ),
    ],
    "03_tpu_performance": [
        ("the second process start hit the cache", lambda r: r["cache_hits_second_start"] >= 1),
        # a CPU has no peak in the table: no made-up utilisation
        ("no utilisation on a CPU", lambda r: r["utilisation"] is None),
        ("FLOPs per image counted", lambda r: r["flops_per_image"] > 0),
        ("a cost per 1000 images", lambda r: r["cost_per_1000_images"] > 0),
        ("the timing loop's median", lambda r: r["run_s"] > 0 and r["first_run_s"] > 0),
        # the results file's count: 277.0 TFLOP per image, the blog's 2.33 s is 60% of peak
        ("the published utilisation", lambda r: round(r["published_utilisation"], 2) == 0.60),
        (
            "the SDXL UNet call is above v5e's ridge point",
            lambda r: r["roofline"]["SDXL UNet call, v5e-4 plan"]["intensity"] > 197e12 / 819e9,
        ),
    ],
    "04_openvino_export_and_run": [
        ("f32 ran in f32", lambda r: r["precision_f32_ran"] == "f32"),
        ("parity with diffusers within 1e-4", lambda r: r["parity_vs_diffusers"]["max_abs"] < 1e-4),
        ("GenAI within 2/255 of the Python loop", lambda r: r["genai_vs_python_max_abs_255"] <= 2),
        ("static shapes timed", lambda r: r["static_speedup"] > 0),
        # tests/cpu/test_lesson_04.py: the loop and the reshape written out are what OVPipeline runs
        ("the loop written out is OVPipeline's", lambda r: r["loop_by_hand_max_abs"] <= 1e-5),
        ("the reshape by hand is static=...'s", lambda r: r["reshape_by_hand_max_abs"] <= 1e-5),
        # the committed benchmark's static rows (whole_image_sd15_lcm_static.json): faster, far from 3.5x
        (
            "the reference static speed-up read",
            lambda r: 1 < r["static_speedup_reference"]["min"] <= r["static_speedup_reference"]["max"] < 2,
        ),
        ("the UNet export has a size", lambda r: r["export_sizes_mb"]["unet"] > 0),
        # 8 held-out prompts on the trained SD 1.5-layout checkpoint: 6/8 measured in f32 and bf16
        # (0.96 on 96 prompts with evaluate_shapes); one more miss allowed for other builds
        (
            "adherence >= 5/8 in every precision",
            lambda r: all(a["score"] >= 5 / 8 for a in r["adherence"].values()),
        ),
    ],
    "05_int8_quantization": [
        ("the three INT8 variants", lambda r: set(r["variants"]) == {"int8_weights", "hybrid", "full_int8"}),
        (
            "each is smaller than fp32",
            lambda r: all(r["size_bytes"][v] < r["size_bytes"]["fp32"] for v in r["variants"]),
        ),
        ("SSIM > 0.5 for each", lambda r: all(r["quality"][v]["ssim_mean"] > 0.5 for v in r["variants"])),
        ("the reference UNet ran in f32", lambda r: r["reference_precisions"]["unet"] == "f32"),
        (
            "the INT8 UNets ran their float layers in the best float",
            lambda r: all(r["speed"][v]["precision"] == r["best_float"] for v in r["variants"]),
        ),
        # 16 held-out prompts: 15/16 measured in f32 and 14/16 with weight-only INT8
        ("f32 adherence >= 14/16", lambda r: r["adherence"]["f32"]["score"] >= 14 / 16),
        (
            "weight-only INT8 loses at most 2/16",
            lambda r: r["adherence"]["int8_weights"]["score"] >= r["adherence"]["f32"]["score"] - 2 / 16,
        ),
    ],
    "05b_int8_under_constraints": [
        (
            "full INT8 in one piece and in 2 parts",
            lambda r: r["parts"] == 2 and r["full_int8_one_piece"]["parts"] == 1,
        ),
        # a tensor read by quantized layers on both sides of a cut gets a FakeQuantize in each part
        (
            "the parts hold more FakeQuantize than one piece",
            lambda r: r["fake_quantize"]["2 parts"] > r["fake_quantize"]["one piece"],
        ),
        ("the parts' images compared with one piece's", lambda r: r["parts_vs_one_piece_psnr"] > 0),
        (
            "every layer group ranked alone in INT8, costliest first",
            lambda r: (
                len(r["sensitivity"]) >= 10
                and [g["error"] for g in r["sensitivity"]]
                == sorted((g["error"] for g in r["sensitivity"]), reverse=True)
            ),
        ),
        # plain full INT8 loses an image of the 8 validation prompts; the search gives operations back
        (
            "accuracy control searched, gave operations back and was judged on other prompts",
            lambda r: (
                r["accuracy_control"]["metric_plain"] < r["accuracy_control"]["metric_f32"]
                and len(r["accuracy_control"]["reverted"]) >= 1
                and 0 <= r["accuracy_control"]["judged"]["adherence"] <= 1
            ),
        ),
    ],
    "06_cpu_benchmark_and_comparison": [
        (
            "the three variants timed",
            lambda r: {"torch_fp32", "ov_bf16", "full_int8"} <= set(r["s_per_step"]),
        ),
        ("every time positive", lambda r: all(t > 0 for t in r["s_per_step"].values())),
        ("a speed-up of full INT8", lambda r: r["speedup"]["full_int8"]["vs_torch_fp32"] > 0),
        # the whole-image table (benchmarks/results/whole_image_sd15.json) opens the results: each
        # ratio is PyTorch fp32's whole-image seconds over the row's (the torch row: exactly 1)
        (
            "the whole-image table leads, against PyTorch fp32 at 20 steps",
            lambda r: (
                r["whole_image"]["torch_fp32_20"]["x_torch_fp32"] == 1.0
                and all(
                    abs(
                        row["x_torch_fp32"] * row["image_s"] / r["whole_image"]["torch_fp32_20"]["image_s"]
                        - 1
                    )
                    < 1e-9
                    for row in r["whole_image"].values()
                    if row["ok"]
                )
            ),
        ),
        # the core's two runs kept in benchmarks/results are shown (SD 1.5 at 512, SDXL at 1024), each
        # with its PyTorch fp32 baseline's spread across the committed runs on the same CPU
        (
            "the core's whole-image tables are shown, with the baseline's spread",
            lambda r: (
                set(r["whole_image_tables"]) == set(whole_image.CORE_FILES)
                and r["whole_image"] == r["whole_image_tables"]["whole_image_sd15.json"]
                and r["baseline_spread"]["whole_image_sd15.json"]["min"][0]
                <= r["whole_image"]["torch_fp32_20"]["image_s"]
                <= r["baseline_spread"]["whole_image_sd15.json"]["max"][0]
            ),
        ),
        # full INT8 over bf16 per UNet step in the committed AMX runs: 1.23-1.34x
        (
            "full INT8 adds little over bf16 on AMX",
            lambda r: all(1 < g < 1.5 for g in r["amx_int8_gain"].values()),
        ),
        # measured 10-17x for the 4-step LCM-LoRA rows on the reference CPU
        (
            "a whole-image configuration beats PyTorch fp32 by over 5x",
            lambda r: max(row["x_torch_fp32"] or 0 for row in r["whole_image"].values()) > 5,
        ),
    ],
    "06b_cpu_stacks_and_quality": [
        # DeepCache on the trained SD 1.5-layout checkpoint, 12 prompts: every 2nd step full
        # measured as good as no cache (11/12), and fewer full-UNet calls as the interval grows
        (
            "DeepCache N=2 loses at most 1/12 adherence",
            lambda r: (
                r["deepcache_quality"]["f32+deepcache(N=2)"]["adherence"]
                >= r["deepcache_quality"]["f32"]["adherence"] - 1 / 12
            ),
        ),
        (
            "DeepCache N=3 makes 7 full UNet calls",
            lambda r: r["deepcache_quality"]["f32+deepcache(N=3)"]["unet_calls_per_image"]["full"] == 7,
        ),
        # the float stack on the same checkpoint, 12 prompts: static shapes + token merging 0.5 +
        # DeepCache N=2 measured 11/12 as f32 (and 12/12 with the merge alone); the seconds are the
        # committed real-UNet run's, so the fastest stack within 2 points is the whole stack there
        (
            "the fastest stack within the bound is timed and within it",
            lambda r: (
                (best := r["stack"]["fastest_within_bound"]) is not None
                and r["stack"]["rows"][best]["within"]
                and r["stack"]["rows"][best]["cpu_s_per_step"]
                == min(
                    row["cpu_s_per_step"]
                    for row in r["stack"]["rows"].values()
                    if row["within"] and row["cpu_s_per_step"]
                )
            ),
        ),
        # the appendix's three runs kept in benchmarks/results: the stack, the ResNets recipe, the layer cut
        (
            "the appendix's whole-image tables are shown",
            lambda r: set(r["whole_image_tables"]) == set(whole_image.APPENDIX_FILES),
        ),
    ],
    "07_fewer_steps": [
        # the 20-step base, LCM-LoRA, + TAESD, + INT8, each timed, the ratios to the first row
        ("four configurations timed", lambda r: len(r["cpu_speed"]) == 4),
        ("every time positive", lambda r: all(row["seconds"] > 0 for row in r["cpu_speed"].values())),
        ("the base's ratio is 1", lambda r: r["cpu_speed"][r["cpu_names"]["base"]]["x_base"] == 1.0),
        # 10x fewer UNet images per picture: measured 5.5-7.5x faster per image on the toy
        (
            "LCM-LoRA at 4 steps beats the 20-step base",
            lambda r: r["cpu_speed"][r["cpu_names"]["lcm"]]["x_base"] > 1.5,
        ),
        # the fused UNet has the base's shapes: its 4-step program is the no-adapter row's, compiled once
        (
            "JAX compile kept apart, and reused after fusing",
            lambda r: (
                r["jax_speed"][r["jax_base"]]["compile_s"] > 0
                and r["jax_speed"]["LCM-LoRA, 4 steps"]["compile_s"] == 0
            ),
        ),
        ("unfuse gives the float32 base images back exactly", lambda r: r["unfused_max_diff_255"] == 0),
        # the toy TAESD (checkpoints/tiny-shapes-sdxl-taesd, distilled from the toy's VAE): a decoder
        # of 68 k parameters against the toy VAE's 423 k (6.2x smaller)
        (
            "TAESD's decoder is the smaller one, by over 4x",
            lambda r: 4 * r["decoder_parameters"]["TAESD"] < r["decoder_parameters"]["VAE"],
        ),
        # the LCM-LoRA row's latents through both decoders, 4 prompts, OpenVINO f32: measured 28.0 dB
        # and 4/4 for both (its README: 31.1 dB and 0.906 against 0.969 on 64 prompts); one image's
        # miss and 4 dB allowed for other builds
        (
            "TAESD's images of the same latents: PSNR over 24 dB against the VAE's, adherence within one image",
            lambda r: (
                r["taesd_vs_vae"]["psnr_mean"] > 24
                and r["taesd_vs_vae"]["adherence"] >= r["taesd_vs_vae"]["vae_adherence"] - 1 / 4
            ),
        ),
        # the decode alone, timed inside the whole-image calls. A timing, so not asserted: measured
        # 2.8x (4.5 -> 1.6 ms per image), and 0.99x (2.3 ms each) in a CI run on a loaded 2-core CPU
        # where the run before passed 1.3x; the notebook words the ratio it measured (few_steps.faster)
        (
            "both decodes timed",
            lambda r: r["taesd_vs_vae"]["tiny_decode_s"] > 0 and r["taesd_vs_vae"]["vae_decode_s"] > 0,
        ),
        (
            "adherence against steps for the three samplers",
            lambda r: (
                {row["sampler"] for row in r["adherence_vs_steps"]} == {"base", "lcm", "lcm_no_adapter"}
            ),
        ),
        # the LCM sampler without the adapter, same guidance (1), 32 prompts, seed 42, OpenVINO f32:
        # measured 11/32 at 1 step against the adapter's 17/32 (on 4 x 64 prompts of other seeds, JAX:
        # 46% against 62%); from 2 steps the tiny trained model draws as well without it (29/32 and
        # 31/32 at 2 and 4 steps, the adapter 29/32 and 30/32), within 0.7 dB of PSNR at every step
        (
            "at 1 step the adapter draws at least 3/32 more than the LCM sampler without it",
            lambda r: r["adapter_adds"]["1"] >= 3 / 32,
        ),
        (
            "PSNR against the base's images for every row but the base at its 20 steps",
            lambda r: all(
                (row["psnr_mean"] is None) == (row["sampler"] == "base" and row["steps"] == 20)
                for row in r["adherence_vs_steps"]
            ),
        ),
        # 32 held-out prompts, OpenVINO f32: measured 30/32 for the LCM-LoRA at 4 steps, 32/32 for
        # the base at 20 and 6/32 for the base at 4; one more miss allowed for other builds
        (
            "LCM-LoRA at 4 steps within 3/32 of the base at 20, far above the base at 4",
            lambda r: (
                (s := {(row["sampler"], row["steps"]): row["score"] for row in r["adherence_vs_steps"]})[
                    ("lcm", 4)
                ]
                >= s[("base", 20)] - 3 / 32
                and s[("lcm", 4)] >= s[("base", 4)] + 0.5
            ),
        ),
    ],
}


def failed_checks(stem: str, results: dict) -> list[str]:
    """The descriptions of the checks of ``stem`` that ``results`` does not pass (a missing key
    fails the test at once, naming it)."""
    recorded = Recorded(results, stem)
    return [what for what, check in CHECKS[stem] if not check(recorded)]


def test_every_notebook_has_checks():
    assert sorted(CHECKS) == sorted(IDS), "add the values each new notebook must record to CHECKS"
    assert all(CHECKS[stem] for stem in IDS)


def test_a_missing_key_fails_and_is_named():
    recorded = Recorded({"adherence": {"f32": {"score": 1.0}}}, "05_int8_quantization")
    assert recorded["adherence"]["f32"]["score"] == 1.0
    with pytest.raises(
        pytest.fail.Exception, match=r"did not record results\['adherence'\]\['int8_weights'\]"
    ):
        recorded["adherence"]["int8_weights"]
    with pytest.raises(pytest.fail.Exception, match=r"did not record results\['variants'\]"):
        recorded.get("variants")  # .get does not turn a missing key into None either
    with pytest.raises(pytest.fail.Exception, match=r"did not record results\['s_per_step'\]"):
        failed_checks("06_cpu_benchmark_and_comparison", {"speedup": {}})


def test_checks_reject_wrong_values():
    good = {"backend": "cpu", "device_count": 8, "mesh_shape": {"data": 8}, "versions": {"jax": "0.10.2"}}
    good["text_embedding_shape"] = [1, 77, 2048]
    assert failed_checks("00_environment_and_devices", good) == []
    assert failed_checks("00_environment_and_devices", {**good, "device_count": 1}) == ["8 simulated devices"]


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_notebook_runs_in_smoke_profile(nb, smoke_notebook):
    run = smoke_notebook(nb)
    results_file = run.output_dir / "results.json"
    assert results_file.is_file(), f"{nb.name} recorded no results"
    assert results_file.stat().st_mtime >= run.started, f"{results_file} is older than this run"
    results = json.loads(results_file.read_text())
    assert results, f"{nb.name} recorded an empty results.json"
    assert failed_checks(nb.stem, results) == [], f"{nb.name} recorded unexpected values: {results}"


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_executed_copy_reads_cleanly(nb, smoke_notebook):
    """The executed copy is documentation: its figures are inline (PNGs, not only files on disk),
    nothing a reader has to ignore (stderr, escape codes, warnings), and no development notes."""
    executed = json.loads(smoke_notebook(nb).executed.read_text())
    assert cells_without_figures(executed) == [], f"{nb.name}: plt.show() drew no inline figure"
    if "plt.show()" in nb.read_text():
        pngs = [
            o for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})
        ]
        assert pngs, f"{nb.name} draws figures but its executed copy has no image/png output"
    assert noisy_outputs(executed) == []
    assert banned_phrases(executed) == []
    assert absolute_paths(executed, ROOT) == [], "print folders relative to the notebook's"
    first = next(o for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
    assert "".join(first["text"]).startswith("Profile smoke: "), "the first output names the profile"


def checked(cell: dict) -> bool:
    """Whether nbval compares this cell's outputs: a ``# NBVAL_CHECK_OUTPUT`` comment line (read
    as nbval reads it) or its ``nbval-check-output`` tag."""
    if cell["cell_type"] != "code":
        return False
    lines = [line.strip() for line in source(cell).splitlines()]
    marked = any(line.startswith("#") and line.lstrip("#").strip() == "NBVAL_CHECK_OUTPUT" for line in lines)
    return marked or "nbval-check-output" in cell.get("metadata", {}).get("tags", [])


def through_last_checked_cell(executed: Path, copy: Path) -> Path:
    """``executed`` cut after its last ``# NBVAL_CHECK_OUTPUT`` cell, written to ``copy``. The
    kernel runs the cells in order, so no later cell can change what a checked cell printed; the
    whole notebook has just run in test_notebook_runs_in_smoke_profile."""
    nb = json.loads(executed.read_text())
    last = max(i for i, cell in enumerate(nb["cells"]) if checked(cell))
    nb["cells"] = nb["cells"][: last + 1]
    copy.write_text(json.dumps(nb))
    return copy


def test_the_nbval_copy_ends_with_the_last_checked_cell(tmp_path):
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    nb = {"cells": [{**cell, "source": s} for s in ("a = 1", "# NBVAL_CHECK_OUTPUT\nprint(a)", "b = 2")]}
    nb["cells"].insert(1, {"cell_type": "code", "source": "x = 1\n#NBVAL_CHECK_OUTPUT\nprint(x)"})
    nb["cells"].insert(0, {"cell_type": "markdown", "source": "# NBVAL_CHECK_OUTPUT"})
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    cut = json.loads(through_last_checked_cell(tmp_path / "nb.ipynb", tmp_path / "cut.ipynb").read_text())
    assert [source(c) for c in cut["cells"]] == [source(c) for c in nb["cells"][:4]]
    assert [checked(c) for c in nb["cells"]] == [False, False, True, True, False]


#: What each notebook's checked cells printed in the smoke profile, one file per notebook. Every
#: smoke run is compared with it, so a change that moves a lesson fact (a shape, a parameter count,
#: the collectives of a program) fails with a diff. After a change that moves one on purpose:
#: ``SDACCEL_RECORD_CHECKED=1 pytest tests/integration/test_notebooks.py -k checked_cells``.
CHECKED_OUTPUTS = ROOT / "tests" / "integration" / "checked_outputs"
RECORD_VAR = "SDACCEL_RECORD_CHECKED"


def checked_outputs(nb: dict) -> str:
    """The checked cells of an executed notebook, each as a ``## cell <id>`` line and the text it
    printed: its streams and the plain text of its results, with terminal colours taken out (a
    figure's display is compared by the notebook's own checks, not here)."""
    import re

    parts = []
    for cell in nb["cells"]:
        if checked(cell):
            text = "".join(
                "".join(out.get("text", "") if out["output_type"] == "stream" else "")
                + "".join(
                    out.get("data", {}).get("text/plain", "")
                    if out["output_type"] == "execute_result"
                    else ""
                )
                for out in cell.get("outputs", [])
            )
            text = re.sub(r"\x1b\[[0-9;]*m", "", text)
            parts.append(f"## cell {cell.get('id', '?')}\n{text.rstrip()}\n")
    return "\n".join(parts)


def changed_lines(expected: str, now: str, name: str) -> str:
    """A unified diff of ``expected`` (the recorded file) and ``now`` (this run); empty when equal."""
    import difflib

    diff = difflib.unified_diff(
        expected.splitlines(), now.splitlines(), f"recorded/{name}", f"this run/{name}", lineterm=""
    )
    return "\n".join(diff)


def test_a_moved_fact_shows_as_a_diff():
    cell = {"cell_type": "code", "id": "c1", "metadata": {}, "source": "# NBVAL_CHECK_OUTPUT\nprint(x)"}
    figure = {"output_type": "display_data", "data": {"text/plain": "<Figure size 8x3 with 1 Axes>"}}
    coloured = {"output_type": "stream", "text": "\x1b[38;2;255;255;255mCPU 0\x1b[0m\n"}
    before = {
        "cells": [{**cell, "outputs": [{"output_type": "stream", "text": "params: 12\n"}, figure, coloured]}]
    }
    after = {"cells": [{**cell, "outputs": [{"output_type": "stream", "text": "params: 13\n"}]}]}
    assert checked_outputs(before) == "## cell c1\nparams: 12\nCPU 0\n"
    assert changed_lines(checked_outputs(before), checked_outputs(before), "nb.txt") == ""
    diff = changed_lines(checked_outputs(before), checked_outputs(after), "nb.txt")
    assert "-params: 12" in diff and "+params: 13" in diff


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_every_notebook_has_a_checked_cell_and_its_record(nb):
    assert any(checked(cell) for cell in cells(nb)), (
        f"{nb.name}: mark a cell that prints the lesson's deterministic facts with # NBVAL_CHECK_OUTPUT"
    )
    assert (CHECKED_OUTPUTS / f"{nb.stem}.txt").is_file() or os.environ.get(RECORD_VAR), (
        f"no recorded outputs for {nb.name}: run {RECORD_VAR}=1 pytest {Path(__file__).relative_to(ROOT)} "
        "-k checked_cells"
    )


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_checked_cells_print_the_recorded_facts(nb, smoke_notebook):
    """The checked cells of this session's smoke run print what tests/integration/checked_outputs/
    recorded (nothing else is compared: timings, the CPU and its precision vary between runs)."""
    now = checked_outputs(json.loads(smoke_notebook(nb).executed.read_text()))
    record = CHECKED_OUTPUTS / f"{nb.stem}.txt"
    if os.environ.get(RECORD_VAR):
        record.parent.mkdir(exist_ok=True)
        record.write_text(now)
    diff = changed_lines(record.read_text(), now, record.name)
    assert not diff, f"{nb.name}: a checked cell printed something else than recorded:\n{diff}"


#: The notebooks that nbval re-executes through their last checked cell, to show that those cells
#: print the same twice: those where that part of the notebook takes seconds. Every notebook's
#: checked cells are also compared with their record (test_checked_cells_print_the_recorded_facts),
#: which a cell that prints something else each time fails too.
NBVAL_RERUN = {"00_environment_and_devices", "02_sharding_across_cores"}


@pytest.mark.slow
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_nbval_outputs_are_reproducible(nb, smoke_notebook, tmp_path):
    """Re-execute this session's executed copy, through its last checked cell (the cells after it
    cannot change what it printed); cells marked NBVAL_CHECK_OUTPUT must print the same again."""
    if nb.stem not in NBVAL_RERUN:
        pytest.skip("its checked cells come after minutes of work: compared with their record instead")
    executed = through_last_checked_cell(smoke_notebook(nb).executed, tmp_path / f"{nb.stem}.ipynb")
    env = {**os.environ, **PROFILE_ENV["smoke"]}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--nbval-lax",
            str(executed),
            "-o",
            "addopts=",
        ],
        cwd=executed.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
