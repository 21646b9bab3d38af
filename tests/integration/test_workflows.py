"""The public repository's CI workflow and the TPU image, checked offline: the workflow against
GitHub's workflow schema (vendored by check-jsonschema), its jobs structurally, and
deploy/Dockerfile parsed with dockerfile-parse against requirements-tpu.txt and the GKE manifests."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sdaccel.tools.workshop.doctor import parse_pins

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
CI = REPO / ".github" / "workflows" / "ci.yml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"


def load(path: Path) -> dict:
    # YAML 1.1 reads the key `on` as True: undo that one surprise
    doc = yaml.safe_load(path.read_text())
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def runs(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in steps(job))


def uses(job: dict, action: str) -> list[dict]:
    return [s for s in steps(job) if s.get("uses", "").split("@")[0] == action]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_schema(path):
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_catches_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  test:\n    steps:\n      - run: make test\n")  # no runs-on
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(broken),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "runs-on" in proc.stdout + proc.stderr


def test_ci_runs_make_test_on_pushes_and_pull_requests_with_a_pip_and_uv_cache():
    ci = load(CI)
    assert {"push", "pull_request"} <= set(ci["on"])
    test = ci["jobs"]["test"]
    assert re.search(r"^make test$", runs(test), re.M)
    assert "apt-get install -y -qq chromium" in runs(test)  # Debian's package, as the site test needs
    (cache,) = uses(test, "actions/cache")
    # make setup installs with uv (pip installs uv first)
    assert cache["with"]["path"].split() == ["~/.cache/pip", "~/.cache/uv"]
    assert "requirements-cpu.txt" in cache["with"]["key"]
    image = test["container"]
    assert image.startswith("python:3.11"), "the Makefile asks for python3.11"


def test_ci_runs_the_cpu_notebooks_smoke_tests_on_macos_arm64():
    job = load(CI)["jobs"]["cpu-notebooks"]
    assert job["runs-on"] == "${{ matrix.os }}" and "macos-14" in job["strategy"]["matrix"]["os"]
    assert job["strategy"]["fail-fast"] is False
    (python,) = uses(job, "actions/setup-python")
    assert python["with"]["python-version"] == "3.11", "requirements-cpu.txt is pinned for Python 3.11"
    script = runs(job)
    assert "make setup PYTHON=python3.11" in script
    command = " ".join(script.split())
    assert "-m pytest -n 0 tests/integration/test_notebooks.py" in command
    # the -k expression picks the execution tests of 04-07, and those only
    expression = re.search(r'-k "([^"]+)"', command).group(1)
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    cpu = [n for n in notebooks if n[:2] >= "04"]
    prefixes = {n: n.split("_")[0] + "_" for n in notebooks}  # "05_", and "05b_" for an appendix
    words = set(re.findall(r"\w+", expression))
    assert cpu and all(prefixes[n] in words for n in cpu)
    assert not any(prefixes[n] in words for n in notebooks if n not in cpu)
    source = (REPO / "tests" / "integration" / "test_notebooks.py").read_text()
    for name in ("smoke_profile", "executed_copy", "nbval"):
        assert name in expression and re.search(rf"^def test_\w*{name}\w*\(nb, smoke_notebook", source, re.M)


def test_ci_builds_the_docs_from_the_tested_notebooks_and_publishes_from_main():
    ci = load(CI)
    test = ci["jobs"]["test"]
    assert "make docs DOCS_FROM=build/test/smoke" in runs(test)
    make = (REPO / "Makefile").read_text()
    assert re.search(
        r"^docs: setup\n\t\$\(PY\) -m sdaccel.tools.workshop.docs_site --from \$\(DOCS_FROM\)", make, re.M
    )
    # where the notebook tests execute the notebooks (conftest's NOTEBOOK_BUILD, then the profile)
    assert 'NOTEBOOK_BUILD = REPO / "build" / "test"' in (REPO / "tests" / "conftest.py").read_text()
    (pages_artifact,) = uses(test, "actions/upload-pages-artifact")
    assert pages_artifact["with"]["path"] == "build/docs/html"
    pages = ci["jobs"]["pages"]
    assert pages["needs"] == "test" and "refs/heads/main" in pages["if"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert uses(pages, "actions/deploy-pages")


def manifest_images() -> set[str]:
    images = set()
    for path in (REPO / "deploy" / "gke").glob("*.yaml"):
        images |= set(re.findall(r"^\s*image:\s*(\S+)", path.read_text(), re.M))
    return images


def test_image_job_builds_deploy_dockerfile_under_the_manifests_name():
    (image,) = manifest_images()  # every manifest runs the same image
    repository, tag = image.rsplit(":", 1)
    job = load(CI)["jobs"]["tpu-image"]
    (build,) = uses(job, "docker/build-push-action")
    assert build["with"]["file"] == "deploy/Dockerfile" and build["with"]["context"] == "."
    template = job["env"]["IMAGE"]
    # the workflow fills the project from a repository variable, with the manifests' placeholder as default
    assert template.replace("${{ vars.GCP_PROJECT || 'YOUR_PROJECT' }}", "YOUR_PROJECT") == repository
    assert f"${{{{ env.IMAGE }}}}:{tag}" in build["with"]["tags"]
    assert "refs/heads/main" in job["env"]["PUSH"] and build["with"]["push"] == "${{ env.PUSH == 'true' }}"


# ----------------------------------------------------------------------------------------------
# deploy/Dockerfile
# ----------------------------------------------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    parser = DockerfileParser(path=str(DOCKERFILE))
    return [(i["instruction"], i["value"]) for i in parser.structure if i["instruction"] != "COMMENT"]


def pip_installs(command: str) -> list[list[str]]:
    """The argument lists of every `pip install` in a shell command."""
    found = []
    for part in re.split(r"&&|;", command):
        words = shlex.split(part)
        if words[:2] == ["pip", "install"] or words[1:4] == ["-m", "pip", "install"]:
            found.append(words[words.index("install") + 1 :])
    return found


def test_dockerfile_installs_exactly_requirements_tpu():
    steps = instructions()
    (base,) = [v for k, v in steps if k == "FROM"]
    assert base.startswith("python:3.11"), "requirements-tpu.txt is pinned for Python 3.11"
    installs = [args for k, v in steps if k == "RUN" for args in pip_installs(v)]
    assert ["-r", "requirements-tpu.txt"] in installs
    tpu_pins = parse_pins((REPO / "requirements-tpu.txt").read_text())
    for args in installs:
        for arg in args:
            if arg.startswith("-") or arg in ("requirements-tpu.txt", "."):
                continue
            req = Requirement(arg)  # a package named on its own must carry the TPU file's pin
            assert str(req.specifier) == f"=={tpu_pins[canonicalize_name(req.name)]}", arg
    assert ["--no-deps", "."] in installs, "the package itself, with no unpinned dependency"
    assert "torch" not in tpu_pins


def test_dockerfile_copies_what_it_installs_before_installing_it():
    order = [(k, v) for k, v in instructions() if k in ("COPY", "RUN")]
    copied: list[str] = []
    for kind, value in order:
        if kind == "COPY":
            sources = value.split()[:-1]
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: no such path in the repository"
            copied += sources
        elif "requirements-tpu.txt" in value:
            assert "requirements-tpu.txt" in copied
        elif "pip install --no-deps ." in value:
            assert {"pyproject.toml", "src"} <= set(copied)


def test_dockerfile_runs_the_manifests_entry_point():
    (cmd,) = [v for k, v in instructions() if k == "CMD"]
    assert json.loads(cmd)[:3] == ["python", "-m", "sdaccel.tpu.generate"]
    for path in (REPO / "deploy" / "gke").glob("*.yaml"):
        assert 'command: ["python", "-m", "sdaccel.tpu.generate"]' in path.read_text()


def test_deploy_readme_points_at_the_dockerfile():
    text = (REPO / "deploy" / "README.md").read_text()
    assert "deploy/Dockerfile" in text and "```dockerfile" not in text, "one Dockerfile, not a second copy"
