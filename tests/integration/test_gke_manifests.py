"""The GKE manifests, checked offline: Kubernetes schemas (kubernetes-validate), our entry point
and its flags, and TPU resources that match each node pool's topology."""

from __future__ import annotations

import math
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from sdaccel.tpu.generate import build_parser
from sdaccel.tpu.sharding import parse_mesh

GKE = Path(__file__).resolve().parents[2] / "deploy" / "gke"
FILES = sorted(GKE.glob("*.yaml"))
K8S_VERSION = "1.30"  # GKE's oldest supported minor version at the time of writing
#: TPU v5e hosts have at most 8 chips; slices above that span hosts of 4 chips each.
V5E_MAX_SINGLE_HOST, V5E_CHIPS_PER_HOST_MULTI = 8, 4


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def jobs(path: Path) -> list[dict]:
    return [d for d in documents(path) if d["kind"] == "Job"]


def test_there_are_single_and_multi_host_manifests():
    names = {p.stem for p in FILES}
    assert {"job-v5e-4", "job-v5e-8", "multihost-v5e-16"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_schemas(path):
    for doc in documents(path):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_jobs_run_our_entry_point_on_matching_tpus(path):
    (job,) = jobs(path)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "sdaccel.tpu.generate"]
    args = build_parser().parse_args(container["args"])  # every flag exists and parses
    selector = pod["nodeSelector"]
    assert selector["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
    chips = math.prod(int(n) for n in selector["cloud.google.com/gke-tpu-topology"].split("x"))
    hosts = 1 if chips <= V5E_MAX_SINGLE_HOST else chips // V5E_CHIPS_PER_HOST_MULTI
    per_pod = container["resources"]["limits"]["google.com/tpu"]
    assert container["resources"]["requests"]["google.com/tpu"] == per_pod
    assert per_pod * hosts == chips and per_pod == (chips if hosts == 1 else V5E_CHIPS_PER_HOST_MULTI)
    assert job["spec"].get("completions", 1) == hosts and job["spec"].get("parallelism", 1) == hosts
    data, model = parse_mesh(args.mesh, chips)
    assert data * model == chips and args.batch % data == 0, "the batch must split over the 'data' axis"
    assert pod["restartPolicy"] == "Never"
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert {v["name"] for v in pod["volumes"]} == mounts
    assert str(args.prompts).startswith("/config/") and str(args.out).startswith("/data/")


def test_multihost_job_is_indexed_behind_a_headless_service():
    path = GKE / "multihost-v5e-16.yaml"
    (service,) = [d for d in documents(path) if d["kind"] == "Service"]
    (job,) = jobs(path)
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert service["spec"]["clusterIP"] == "None" and pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    host, port = env["SDACCEL_COORDINATOR_ADDRESS"]["value"].split(":")
    assert host == f"{job['metadata']['name']}-0.{service['metadata']['name']}"  # pod of index 0
    assert int(port) in {p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert int(env["SDACCEL_NUM_PROCESSES"]["value"]) == spec["completions"]
    index = env["SDACCEL_PROCESS_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert "job-completion-index" in index
