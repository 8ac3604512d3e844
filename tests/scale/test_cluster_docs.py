"""docs/examples/rayjob.yaml, the KubeRay example of docs/scale-out.md, is a RayJob that would run
the batch it says: it parses, its entrypoint is a valid ``dsh-orchestra batch`` command for a
cluster (``--ray auto``, ``--resume``), what it writes is on the volume every pod mounts at the
same path, and the api key comes from a secret."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from dsh_orchestra.cli._main import build_parser

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "docs" / "examples" / "rayjob.yaml"


def manifest() -> dict[str, Any]:
    data = yaml.safe_load(MANIFEST.read_text())
    assert isinstance(data, dict)
    return data


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec["template"]["spec"]["containers"])


def mounts(spec: dict[str, Any]) -> dict[str, str]:
    """Mount path -> claim name (or volume kind) of a group's first container."""
    volumes = {v["name"]: (v.get("persistentVolumeClaim") or {}).get("claimName") or next(k for k in v if k != "name")
               for v in spec["template"]["spec"]["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in containers(spec)[0]["volumeMounts"]}


def test_it_is_a_rayjob_with_a_head_and_workers() -> None:
    job = manifest()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob" and job["metadata"]["name"]
    cluster = job["spec"]["rayClusterSpec"]
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    head, workers = cluster["headGroupSpec"], cluster["workerGroupSpecs"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no actor on the head: the driver only
    assert workers and all(w["replicas"] >= 1 for w in workers)
    images = {c["image"] for c in containers(head)} | {c["image"] for w in workers for c in containers(w)}
    assert len(images) == 1  # one image: the same Python and packages for the driver and the actors
    assert "-py311" in images.pop()


def test_the_entrypoint_is_a_valid_batch_for_a_cluster() -> None:
    job = manifest()
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[:2] == ["dsh-orchestra", "batch"]
    args = build_parser().parse_args(words[1:])
    assert args.ray == "auto" and args.resume and args.runtime == "dsh" and "{actor}" in args.dsh_home
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert "deepseek-harness-runtime-bin==0.2.1rc2" in runtime_env["pip"]
    assert any(p.startswith("dsh-orchestra[ray]") for p in runtime_env["pip"])
    assert "env_vars" not in runtime_env  # Ray's agent logs env_vars: no secret there


def test_what_it_writes_is_on_the_volume_every_pod_mounts_at_one_path() -> None:
    job = manifest()
    cluster = job["spec"]["rayClusterSpec"]
    head, workers = cluster["headGroupSpec"], cluster["workerGroupSpecs"]
    shared = {path: claim for path, claim in mounts(head).items() if claim != "emptyDir"}
    assert shared, "the head mounts no persistent volume"
    for worker in workers:
        assert {p: c for p, c in mounts(worker).items() if p in shared} == shared
    args = build_parser().parse_args(shlex.split(job["spec"]["entrypoint"])[1:])
    written = [args.out, args.summary, args.audit, args.transcripts, args.workspace, args.dataset]
    for path in written:
        assert any(path.startswith(root.rstrip("/") + "/") for root in shared), path
    for worker in workers:  # the per-actor homes are node-local
        assert any(args.dsh_home.startswith(root.rstrip("/") + "/") for root in mounts(worker))


def test_the_api_key_comes_from_a_secret() -> None:
    head = manifest()["spec"]["rayClusterSpec"]["headGroupSpec"]
    env = {e["name"]: e for e in containers(head)[0]["env"]}
    key = env["DEEPSEEK_API_KEY"]
    assert "value" not in key and key["valueFrom"]["secretKeyRef"]["name"]
    assert env["DSH_TELEMETRY_MODE"]["value"] == "DISABLED"
    text = MANIFEST.read_text()
    assert "sk-" not in text
