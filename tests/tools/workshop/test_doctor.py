"""The pre-flight check: every check under faked conditions, and the real one on this machine."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sdaccel.core import env
from sdaccel.course import resources
from sdaccel.tools.workshop import doctor
from sdaccel.tools.workshop.discovery import REPO

GIB = 2**30


def test_python_version():
    assert doctor.check_python((3, 11, 7)).status == "ok"
    assert doctor.check_python((3, 10, 12)).status == "fail"
    assert doctor.check_python((3, 12, 1)).status == "warn"


def test_pins_are_parsed_like_pip_reads_them():
    text = "# comment\njax[tpu]==0.10.2  # note\nFlax==0.12.8\n-e .\nloose>=1\n\ntorch==2.13.0\n"
    assert doctor.parse_pins(text) == {"jax": "0.10.2", "flax": "0.12.8", "torch": "2.13.0"}
    real = doctor.parse_pins((REPO / "requirements-cpu.txt").read_text())
    assert real["jax"] == "0.10.2" and real["openvino"] == "2026.4.1"


def test_a_pin_for_another_platform_is_not_expected_here():
    text = 'jax==0.10.2\nlibtpu==0.0.42.1; sys_platform == "linux" and platform_machine == "x86_64"\n'
    linux = {"sys_platform": "linux", "platform_machine": "x86_64"}
    mac = {"sys_platform": "darwin", "platform_machine": "arm64"}
    assert doctor.parse_pins(text, linux) == {"jax": "0.10.2", "libtpu": "0.0.42.1"}
    assert doctor.parse_pins(text, mac) == {"jax": "0.10.2"}
    real = doctor.parse_pins((REPO / "requirements-cpu.txt").read_text(), mac)
    assert "libtpu" not in real and real["openvino"] == "2026.4.1"


def test_versions_missing_fails_different_warns_local_tag_matches():
    pins = {"jax": "0.10.2", "torch": "2.13.0", "nncf": "3.4.0"}
    good = doctor.check_versions(
        pins, {"jax": "0.10.2", "torch": "2.13.0+cpu", "nncf": "3.4.0"}, ("jax",), "r.txt"
    )
    assert good.status == "ok", good.detail
    differ = doctor.check_versions(
        pins, {"jax": "0.9.0", "torch": "2.13.0", "nncf": "3.4.0"}, ("jax",), "r.txt"
    )
    assert differ.status == "warn" and differ.data["differ"] == {"jax": ("0.9.0", "0.10.2")}
    missing = doctor.check_versions(pins, {"jax": None, "torch": "2.13.0"}, ("jax",), "r.txt")
    assert (
        missing.status == "fail"
        and missing.data["missing"] == ["jax"]
        and "pip install -r r.txt" in missing.fix
    )


def test_processes_holding_reads_a_proc_tree(tmp_path):
    device = tmp_path / "accel0"
    device.write_text("")
    other = tmp_path / "other"
    other.write_text("")
    proc = tmp_path / "proc"
    for pid, target, cmd in [(101, device, b"python\0train.py"), (202, other, b"bash")]:
        (proc / str(pid) / "fd").mkdir(parents=True)
        os.symlink(target, proc / str(pid) / "fd" / "3")
        (proc / str(pid) / "cmdline").write_bytes(cmd)
    assert doctor.processes_holding([str(device)], proc) == {101: "python train.py"}


def test_tpu_busy_fails_naming_the_process():
    devs = ["/dev/vfio/0", "/dev/vfio/1"]
    busy = doctor.check_tpu_free(devs, {4242: "python -m ipykernel_launcher", 7: "me"}, True, me=7)
    assert busy.status == "fail" and "pid 4242" in busy.detail and 7 not in busy.data["holders"]
    stale = doctor.check_tpu_free(devs, {}, lockfile_exists=True, me=7)
    assert stale.status == "warn" and "rm /tmp/libtpu_lockfile" in stale.fix
    assert doctor.check_tpu_free(devs, {}, False, 7).status == "ok"
    assert doctor.check_tpu_free([], {}, False, 7).status == "info"


def test_jax_probe_results():
    tpu = {"backend": "tpu", "count": 4, "kinds": ["TPU v5 lite"], "processes": 1}
    assert doctor.check_jax(tpu, "full", True).status == "ok"
    cpu1 = {"backend": "cpu", "count": 1, "kinds": ["cpu"], "processes": 1}
    assert doctor.check_jax(cpu1, "full", True).status == "warn"
    assert doctor.check_jax(cpu1, "full", False).status == "ok"
    assert doctor.check_jax(cpu1, "smoke", True).status == "fail"  # smoke needs 8 simulated devices
    busy = doctor.check_jax(
        {
            "error": "RuntimeError: Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by "
            "process with pid 4242."
        },
        "full",
        True,
    )
    assert busy.status == "fail" and "Another process holds the TPU" in busy.fix
    # JAX does not raise when the TPU is busy: it logs why and falls back to the CPU
    fell_back = {**cpu1, "warning": "ABORTED: The TPU is already in use by process with pid 4242."}
    fallback = doctor.check_jax(fell_back, "full", True, tpu_present=True)
    assert fallback.status == "fail" and "pid 4242" in fallback.detail and "fell back" in fallback.detail
    assert doctor.check_jax(cpu1, "smoke", False, tpu_present=True).status == "fail"  # 1 device, not 8


def test_memory_and_disk_against_the_table():
    need = resources.totals(resources.select(["01", "04"]), "full")
    assert need.ram_gib == 20.0 and need.disk_gib == 5.5
    assert doctor.check_memory(16 * GIB, need.ram_gib, "full").status == "fail"
    assert doctor.check_memory(64 * GIB, need.ram_gib, "full").status == "ok"
    assert doctor.check_disk(int(5 * GIB), 5.5, Path("/x"), "full").status == "fail"
    assert doctor.check_disk(int(6 * GIB), 5.5, Path("/x"), "full").status == "ok"


def test_cpu_features_x86_arm_and_macos():
    amx = {
        "avx2": True,
        "avx512f": True,
        "avx512_vnni": True,
        "avx512_bf16": True,
        "amx_int8": True,
        "amx_bf16": True,
        "amx_tile": True,
    }
    sapphire = doctor.check_cpu("x86_64", amx, True)
    assert (
        sapphire.status == "ok"
        and "INT8 acceleration AMX" in sapphire.detail
        and "bf16 AMX" in sapphire.detail
    )
    icelake = doctor.check_cpu("x86_64", {**{k: False for k in amx}, "avx2": True, "avx512_vnni": True}, True)
    assert "INT8 acceleration VNNI" in icelake.detail and "bf16 none (f32)" in icelake.detail
    assert doctor.check_cpu("x86_64", {"avx2": False}, True).status == "warn"
    # an Intel Mac: its sysctl feature lists, read by sdaccel.core.env
    intel_mac = env.features_from_sysctl({"machdep.cpu.leaf7_features": "AVX2 AVX512F AVX512VNNI"})
    assert "INT8 acceleration VNNI" in doctor.check_cpu("x86_64", intel_mac, True).detail


#: /proc/cpuinfo of an AWS Graviton 3 (Neoverse V1), abridged; sysctl values of Apple M1 and M2.
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd fphp asimdhp asimddp sve i8mm bf16\nCPU part\t: 0xd40\n"
M1 = {
    "machdep.cpu.brand_string": "Apple M1",
    "hw.optional.AdvSIMD": "1",
    "hw.optional.arm.FEAT_FP16": "1",
    "hw.optional.arm.FEAT_DotProd": "1",
    "hw.optional.arm.FEAT_BF16": "0",
    "hw.optional.arm.FEAT_I8MM": "0",
}
M2 = {**M1, "hw.optional.arm.FEAT_BF16": "1", "hw.optional.arm.FEAT_I8MM": "1"}


def test_arm_linux_and_apple_silicon_in_their_own_words(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(GRAVITON3)
    graviton = doctor.check_cpu("aarch64", env.cpu_features(cpuinfo), True)
    assert graviton.status == "ok" and graviton.data["tier"] == "ARM FP16 + I8MM + BF16"
    assert graviton.detail.startswith(
        "aarch64, ARM FP16 + I8MM + BF16: OpenVINO runs f16 by default; its INT8"
    )
    assert "INT8 is not expected to beat f16" in graviton.detail
    assert "BF16 is not used: OpenVINO runs bf16 on x86 only" in graviton.detail
    assert "AVX" not in graviton.detail and "VNNI" not in graviton.detail and "AMX" not in graviton.detail
    m1 = doctor.check_cpu("arm64", env.cpu_features(tmp_path / "none", sysctl=lambda: M1), True)
    assert m1.status == "ok" and m1.detail.startswith("arm64, ARM FP16 + dot product: OpenVINO runs f16")
    assert "BF16" not in m1.detail
    m2 = doctor.check_cpu("arm64", env.cpu_features(tmp_path / "none", sysctl=lambda: M2), True)
    assert m2.data["tier"] == "ARM FP16 + I8MM + BF16"
    pi4 = doctor.check_cpu("aarch64", env.features_from_cpuinfo("Features\t: fp asimd crc32\n"), True)
    assert pi4.status == "warn" and "OpenVINO runs f32 (no FP16 arithmetic)" in pi4.detail
    assert "f32" in pi4.fix and doctor.check_cpu("aarch64", pi4.data["flags"], False).status == "info"
    unread = doctor.check_cpu("arm64", {}, True)  # an ARM CPU whose features could not be read
    assert unread.status == "info" and "f16 where the CPU has FP16 arithmetic" in unread.detail


def test_hub_offline_unreachable_and_reachable():
    assert doctor.check_hub(False, "URLError: timed out", False, "full").status == "fail"
    assert doctor.check_hub(False, "URLError: timed out", False, "smoke").status == "info"
    assert doctor.check_hub(None, "offline mode", True, "full").status == "fail"
    good = doctor.check_hub(True, "HTTP 200", True, "full")
    assert good.status == "ok" and "token present" in good.detail


def test_hub_reachable_honours_offline_mode_and_times_out(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert doctor.hub_reachable("https://example.invalid") == (None, "offline mode")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    reachable, error = doctor.hub_reachable("http://127.0.0.1:9", timeout=1)  # nothing listens on port 9
    assert reachable is False and error


def fake_cache(repo_id, paths, root, refs=("main",)):
    """What ``scan_cache_dir()`` says of a cache holding ``paths`` of one revision of ``repo_id``,
    which the references ``refs`` name."""
    snapshot = root / "snapshots" / "abc"
    files = [SimpleNamespace(file_path=snapshot / p) for p in paths]
    revision = SimpleNamespace(snapshot_path=snapshot, files=files, refs=frozenset(refs))
    return SimpleNamespace(
        repos=[SimpleNamespace(repo_id=repo_id, repo_type="model", revisions=[revision])],
        incomplete_files=[],
        warnings=[],
    )


def test_models_cached_one_variant_per_component(tmp_path):
    sdxl = resources.MODELS["sdxl"]
    complete = [
        f"{c}/{'model' if 'text' in c else 'diffusion_pytorch_model'}.fp16.safetensors" for c in sdxl.parts
    ] + [f"{c}/config.json" for c in sdxl.parts]
    info = fake_cache(sdxl.repo_id, complete + ["model_index.json"], tmp_path)
    files = doctor.cached_files(info, sdxl.repo_id)
    assert doctor.missing_from_cache(sdxl, files) == []
    # a config that did not come (a copy of the cache that stopped part-way) counts too
    assert doctor.missing_from_cache(sdxl, files - {"vae/config.json", "model_index.json"}) == [
        "model_index.json",
        "vae",
    ]
    # the fp32 UNet does not count for a notebook that reads the fp16 variant
    partial = [p for p in complete if not p.startswith("unet/")] + [
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
    ]
    files = doctor.cached_files(fake_cache(sdxl.repo_id, partial, tmp_path), sdxl.repo_id)
    assert doctor.missing_from_cache(sdxl, files) == ["unet"]
    models = {"sdxl": sdxl}
    gap = doctor.check_models(models, {sdxl.repo_id: files}, hub_ok=False, profile="full")
    assert gap.status == "fail" and gap.fix.startswith(
        "python -m sdaccel.tools.workshop.download --models sdxl"
    )
    assert doctor.check_models(models, {sdxl.repo_id: files}, hub_ok=True, profile="full").status == "warn"
    assert doctor.check_models(models, {sdxl.repo_id: files}, hub_ok=False, profile="smoke").status == "info"
    # the rehearsal reads the hub stand-in offline: a gap there stops it, and the stand-in's builder fixes it
    gap = doctor.check_models(models, {sdxl.repo_id: files}, hub_ok=True, profile="rehearsal")
    assert gap.status == "fail" and gap.fix.startswith("make hub-cache")
    assert "sdaccel.tools.workshop.download" not in gap.fix


def test_the_rehearsal_needs_what_the_full_profile_needs():
    for nb in resources.NOTEBOOKS.values():
        assert nb.needs("rehearsal") == nb.needs("full")
    with pytest.raises(ValueError, match="choose one of smoke, full, rehearsal"):
        resources.NOTEBOOKS["00"].needs("huge")


def test_a_download_that_did_not_finish_is_not_cached(tmp_path):
    """Only the revision that ``main`` names counts (what a load by hub id reads): the downloader
    writes that reference last, so the files of a stopped download never pass for the model."""
    sd15 = resources.MODELS["sd15"]
    whole = ["model_index.json"] + [
        f"{c}/{name}"
        for c in sd15.parts
        for name in ("config.json", f"{'model' if 'text' in c else 'diffusion_pytorch_model'}.safetensors")
    ]
    info = fake_cache(sd15.repo_id, whole, tmp_path, refs=())
    cached, unfinished = doctor.read_cache({"sd15": sd15}, info)
    assert cached == {sd15.repo_id: set()}
    assert unfinished == {sd15.repo_id: "a download that did not finish"}
    gap = doctor.check_models({"sd15": sd15}, cached, False, "full", unfinished)
    assert gap.status == "fail" and "a download that did not finish" in gap.detail

    info = fake_cache(sd15.repo_id, whole, tmp_path)
    piece = tmp_path / f"models--{sd15.repo_id.replace('/', '--')}" / "blobs" / "ab12.0f0f0f0f.incomplete"
    info.incomplete_files = [SimpleNamespace(file_path=piece, size_on_disk=3 * 2**20)]
    cached, unfinished = doctor.read_cache({"sd15": sd15}, info)
    assert doctor.missing_from_cache(sd15, cached[sd15.repo_id]) == []
    gap = doctor.check_models({"sd15": sd15}, cached, True, "full", unfinished)
    assert gap.status == "warn" and "1 unfinished file(s) of an interrupted download, 3.0 MiB" in gap.detail
    assert doctor.check_models({"sd15": sd15}, cached, True, "full").status == "ok"


def test_smoke_checkpoints(tmp_path):
    (tmp_path / "checkpoints" / "a").mkdir(parents=True)
    (tmp_path / "checkpoints" / "a" / "model_index.json").write_text("{}")
    assert doctor.check_smoke_checkpoints(["checkpoints/a"], tmp_path, tmp_path / "b", []).status == "ok"
    missing = doctor.check_smoke_checkpoints(["checkpoints/a", "checkpoints/z"], tmp_path, tmp_path / "b", [])
    assert missing.status == "fail" and missing.data["missing"] == ["checkpoints/z"]
    unbuilt = doctor.check_smoke_checkpoints(["checkpoints/a"], tmp_path, tmp_path / "b", ["tiny-sdxl"])
    assert unbuilt.status == "warn" and "python -m sdaccel.tools.toys.random_checkpoints" in unbuilt.fix
    # the notebooks name the trained checkpoints in their smoke overrides
    repo_dirs, _ = doctor.smoke_checkpoints(["00_environment_and_devices"])
    assert repo_dirs == ["checkpoints/tiny-shapes-sdxl"]
    repo_dirs, _ = doctor.smoke_checkpoints([nb.stem for nb in resources.NOTEBOOKS.values()])
    assert repo_dirs == [
        "checkpoints/tiny-shapes-sd15",
        "checkpoints/tiny-shapes-sdxl",
        "checkpoints/tiny-shapes-sdxl-lcm-lora",
        "checkpoints/tiny-shapes-sdxl-taesd",
    ]
    # and every one of them, as this repository ships it, passes: a pipeline, an adapter, a lone TAESD
    shipped = doctor.check_smoke_checkpoints(repo_dirs, doctor.REPO, tmp_path / "b", [])
    assert shipped.status == "ok", shipped.detail


def test_unknown_notebook_is_refused_before_any_check(capsys):
    with pytest.raises(SystemExit) as err:
        doctor.main(["--notebooks", "99"])
    assert err.value.code == 2 and "No notebook '99'" in capsys.readouterr().err


def test_smoke_profile_passes_here_and_names_what_full_lacks(tmp_path):
    """This machine (no accelerator, no hub) is ready for the smoke profile; the JSON says what the
    full profile would still need."""
    out = tmp_path / "doctor.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sdaccel.tools.workshop.doctor",
            "--profile",
            "smoke",
            "--notebooks",
            "00",
            "04",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "READY for the smoke profile" in proc.stdout
    report = json.loads(out.read_text())
    assert report["blockers"] == [] and report["notebooks"] == ["00", "04"]
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["jax"]["status"] == "ok" and by_name["jax"]["data"]["count"] == 8
    assert by_name["checkpoints"]["status"] in ("ok", "warn")
    assert by_name["full:hub"]["status"] == "info" and "HF_HUB_OFFLINE" in by_name["full:hub"]["detail"]
