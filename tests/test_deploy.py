"""Deployment files, checked without a Docker engine, a cluster or a GPU (docs/deploy.md).

- Kubernetes: every overlay of ``infra/k8s`` is rendered and each resource validated against
  the Kubernetes JSON schemas bundled with ``kubernetes-validate`` (strict: unknown fields are
  errors), for the oldest and the newest Kubernetes version the manifests claim. No kustomize
  binary can be installed from PyPI, so ``render()`` below is a small renderer for exactly the
  kustomize features ``infra/k8s`` uses (resources, namespace, labels, configMapGenerator with
  files, literals and ``behavior: merge``, the name hash and its references, images, replicas,
  JSON 6902 patches), and refuses any other. Where ``kubectl`` is installed, its kustomize
  renders the same overlays and the two outputs must be equal.
- Compose: ``docker-compose.yml`` validated against the Compose Specification's JSON schema
  (the copy ``check-jsonschema`` ships).
- Dockerfiles: parsed and checked (pinned bases, a numeric non-root user, a health check, COPY
  sources that exist and are in the build context, no secret in a build argument); the agent
  image's install is ``infra/docker/install-agent.sh``, whose commands must be the Makefile's;
  its model-baking step runs here as it runs in the image.
- Cross-file: the environment variables, ports, URLs and health paths the files use are the
  ones ``agent.config`` reads and the servers serve (names taken from the code, not copied).
- The SIP edge's entrypoint runs with the real Kamailio and a real SIP endpoint as the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fnmatch
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agent.config import Settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "infra" / "k8s"
DOCKER = ROOT / "infra" / "docker"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())
#: What the manifests are written for: the oldest and the newest Kubernetes they validate on.
KUBERNETES_VERSIONS = ("1.31", "1.37")
DOCKERFILES = [ROOT / "Dockerfile", *sorted(DOCKER.glob("*.Dockerfile"))]
#: The GPU model servers: Kubernetes Service, port, the route the agent's URL names and the
#: Dockerfile that builds it.
MODEL_SERVERS = {
    "stt": (8001, "/v1/listen", "stt-gpu.Dockerfile"),
    "llm": (8002, "/v1", "llm-vllm.Dockerfile"),
    "tts": (8003, "/v1/speech", "tts-gpu.Dockerfile"),
}


# ---------------------------------------------------------------------------------------------
# What the code reads and serves
# ---------------------------------------------------------------------------------------------


class _RecordingEnv(dict[str, str]):
    """An empty environment that notes every variable name read from it."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


@cache
def settings_names() -> frozenset[str]:
    """Every environment variable the agent reads: those ``Settings.from_env`` reads, and
    those its command line reads itself (logging, in agent/__main__.py)."""
    env = _RecordingEnv()
    Settings.from_env(env)
    assert {"DATABASE_URL", "STT_URL", "SIP_PORT", "HOST", "PORT", "MAX_CALLS"} <= env.read
    source = (ROOT / "agent" / "__main__.py").read_text(encoding="utf-8")
    command_line = set(re.findall(r"os\.environ\.get\(\s*\"([A-Z][A-Z0-9_]*)\"", source))
    assert "LOG_FORMAT" in command_line
    return frozenset(env.read | command_line)


def routes(module_path: str) -> set[str]:
    """The paths a server module adds routes for (``router.add_get("/path", ...)``)."""
    source = (ROOT / module_path).read_text(encoding="utf-8")
    return set(re.findall(r"\.add_(?:get|post|route)\(\s*(?:\"[A-Z]+\",\s*)?\"(/[^\"]*)\"", source))


# ---------------------------------------------------------------------------------------------
# A small kustomize
# ---------------------------------------------------------------------------------------------

KUSTOMIZATION_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "labels",
    "resources",
    "configMapGenerator",
    "images",
    "replicas",
    "patches",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"}
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


@dataclass
class Build:
    """What one kustomization level produced: resources, and which are generated ConfigMaps."""

    resources: list[dict[str, Any]] = field(default_factory=list)
    generated: set[str] = field(default_factory=set)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _json_pointer(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _apply_json6902(document: dict[str, Any], operations: list[dict[str, Any]]) -> None:
    for operation in operations:
        op, parts = operation["op"], _json_pointer(operation["path"])
        parent: Any = document
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif op in ("add", "replace"):
            value = copy.deepcopy(operation["value"])
            if isinstance(parent, list):
                if last == "-":
                    parent.append(value)
                elif op == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            else:
                if op == "replace" and last not in parent:
                    raise AssertionError(f"replace of a missing {operation['path']}")
                parent[last] = value
        else:
            raise AssertionError(f"patch op {op!r}: not in this renderer")


def _pod_specs(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if resource["kind"] in WORKLOADS:
        yield resource["spec"]["template"]["spec"]
    elif resource["kind"] == "Pod":
        yield resource["spec"]


def _containers(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for spec in _pod_specs(resource):
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


def _generate_config_map(directory: Path, generator: dict[str, Any]) -> dict[str, Any]:
    unknown = set(generator) - {"name", "literals", "files", "behavior"}
    assert not unknown, f"configMapGenerator keys {unknown}: not in this renderer"
    data: dict[str, str] = {}
    for literal in generator.get("literals", []):
        key, sep, value = literal.partition("=")
        assert sep, literal
        data[key] = value
    for entry in generator.get("files", []):
        key, sep, path = entry.partition("=")
        if not sep:
            key, path = Path(entry).name, entry
        data[key] = (directory / path).read_text(encoding="utf-8")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": generator["name"]},
        "data": data,
    }


def _build(directory: Path) -> Build:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    unknown = set(kustomization) - KUSTOMIZATION_KEYS
    assert not unknown, f"{directory}: kustomization fields {unknown}: not in this renderer"
    build = Build()
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            sub = _build(path)
            build.resources += sub.resources
            build.generated |= sub.generated
        else:
            build.resources += _documents(path)
    for generator in kustomization.get("configMapGenerator", []):
        generated = _generate_config_map(directory, generator)
        name = generator["name"]
        existing = [
            r for r in build.resources if r["kind"] == "ConfigMap" and r["metadata"]["name"] == name
        ]
        behavior = generator.get("behavior", "create")
        if behavior == "merge":
            assert len(existing) == 1 and name in build.generated, f"merge into {name}"
            existing[0]["data"].update(generated["data"])
        else:
            assert behavior == "create" and not existing, f"{behavior} {name}"
            build.resources.append(generated)
            build.generated.add(name)
    namespace = kustomization.get("namespace")
    for resource in build.resources:
        if namespace and resource["kind"] not in CLUSTER_SCOPED:
            resource["metadata"]["namespace"] = namespace
    for labels in kustomization.get("labels", []):
        assert set(labels) == {"pairs"}, f"labels options {set(labels)}: not in this renderer"
        for resource in build.resources:
            resource["metadata"].setdefault("labels", {}).update(labels["pairs"])
    for image in kustomization.get("images", []):
        for resource in build.resources:
            for container in _containers(resource):
                name, _, tag = container["image"].partition(":")
                if name == image["name"]:
                    container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
    for replicas in kustomization.get("replicas", []):
        matched = [
            r
            for r in build.resources
            if r["kind"] in WORKLOADS and r["metadata"]["name"] == replicas["name"]
        ]
        assert matched, f"replicas: no workload {replicas['name']}"
        for resource in matched:
            resource["spec"]["replicas"] = replicas["count"]
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        assert set(target) <= {"kind", "name"}, f"patch target {target}: not in this renderer"
        operations = yaml.safe_load(patch["patch"])
        assert isinstance(operations, list), "only JSON 6902 patches in this renderer"
        matched = [
            r
            for r in build.resources
            if r["kind"] == target["kind"] and r["metadata"]["name"] == target["name"]
        ]
        assert matched, f"patch target {target} matches nothing"
        for resource in matched:
            _apply_json6902(resource, operations)
    return build


def _kustomize_hash(config_map: dict[str, Any]) -> str:
    """kustomize's name suffix: its sha256 of the ConfigMap's JSON, in its own alphabet.

    kustomize (api/hasher) means to hash the kind, the name and the data, but looks the name up
    as one field called "metadata/name", finds none and hashes "" (checked against kubectl's
    kustomize v5.5.0 by test_the_renderer_matches_kubectl_kustomize).
    """
    encoded = json.dumps(
        {"data": config_map["data"], "kind": "ConfigMap", "name": ""},
        separators=(",", ":"),
        sort_keys=True,
        ensure_ascii=False,
    )
    # Go's json.Marshal escapes these (HTML safety); kustomize hashes what it writes.
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        encoded = encoded.replace(char, escaped)
    encoded = encoded.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    digest = hashlib.sha256(encoded.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def _rename_config_map_references(resource: dict[str, Any], names: dict[str, str]) -> None:
    for spec in _pod_specs(resource):
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef")
                if ref and ref["name"] in names:
                    ref["name"] = names[ref["name"]]
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("configMapKeyRef")
                if ref and ref["name"] in names:
                    ref["name"] = names[ref["name"]]
        for volume in spec.get("volumes", []):
            ref = volume.get("configMap")
            if ref and ref["name"] in names:
                ref["name"] = names[ref["name"]]


@cache
def _render(directory: Path) -> tuple[str, ...]:
    build = _build(directory)
    names: dict[str, str] = {}
    for resource in build.resources:
        name = resource["metadata"]["name"]
        if resource["kind"] == "ConfigMap" and name in build.generated:
            names[name] = f"{name}-{_kustomize_hash(resource)}"
            resource["metadata"]["name"] = names[name]
    for resource in build.resources:
        _rename_config_map_references(resource, names)
    return tuple(json.dumps(r, sort_keys=True) for r in build.resources)


def render(directory: Path) -> list[dict[str, Any]]:
    """The resources ``kustomize build directory`` makes (for the features above)."""
    return [json.loads(r) for r in _render(directory)]


def by_key(resources: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    keyed = {
        (r["kind"], r["metadata"].get("namespace", ""), r["metadata"]["name"]): r for r in resources
    }
    assert len(keyed) == len(resources), "two resources of the same kind and name"
    return keyed


def find(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """One resource by kind and name; a generated ConfigMap by its name before the hash."""
    for resource in resources:
        resource_name = resource["metadata"]["name"]
        if resource["kind"] == kind and (
            resource_name == name or (kind == "ConfigMap" and resource_name.startswith(name + "-"))
        ):
            return resource
    raise AssertionError(f"no {kind} {name}")


def container(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(_containers(find(resources, kind, name)))


def agent_config(resources: list[dict[str, Any]]) -> dict[str, str]:
    return dict(find(resources, "ConfigMap", "agent-config")["data"])


# ---------------------------------------------------------------------------------------------
# Kubernetes
# ---------------------------------------------------------------------------------------------

RENDERED_DIRS = ["base", "models", *[f"overlays/{o}" for o in OVERLAYS]]


def test_there_are_the_overlays_the_docs_name() -> None:
    assert OVERLAYS == ["cpu-demo", "gpu-production"]


@pytest.mark.parametrize("directory", RENDERED_DIRS)
def test_the_renderer_matches_kubectl_kustomize(directory: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here: the renderer's output is checked where there is one")
    result = subprocess.run(
        [kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(K8S / directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    theirs = by_key(list(yaml.safe_load_all(result.stdout)))
    ours = by_key(render(K8S / directory))
    assert sorted(ours) == sorted(theirs)
    for key, resource in ours.items():
        assert resource == theirs[key], key


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("directory", RENDERED_DIRS)
def test_every_resource_validates_against_the_kubernetes_schemas(
    directory: str, version: str
) -> None:
    resources = render(K8S / directory)
    assert resources
    errors = []
    for resource in resources:
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = "/".join(str(p) for p in error.path)
            errors.append(f"{resource['kind']} {resource['metadata']['name']}: {path}: {error}")
    assert not errors, "\n".join(errors)


def test_the_secret_example_validates_holds_no_secret_and_names_settings() -> None:
    (secret,) = _documents(K8S / "secret.example.yaml")
    kubernetes_validate.validate(secret, KUBERNETES_VERSIONS[0], strict=True)
    assert secret["metadata"]["name"] == "agent-secrets"
    assert all("CHANGE-ME" in value for value in secret["stringData"].values())
    assert set(secret_example_names()) <= settings_names()
    assert "DATABASE_URL" in secret["stringData"]
    url = urlsplit(secret["stringData"]["DATABASE_URL"])
    assert (url.scheme, url.hostname, url.port) == ("postgresql", "postgres", 5432)
    for overlay in OVERLAYS:
        resources = render(K8S / "overlays" / overlay)
        assert not [r for r in resources if r["kind"] == "Secret"], "secrets stay out"
        # The ExternalName the URL's host names.
        postgres = find(resources, "Service", "postgres")
        assert postgres["spec"]["type"] == "ExternalName"


def secret_example_names() -> list[str]:
    """The keys of secret.example.yaml, the commented-out optional ones included."""
    text = (K8S / "secret.example.yaml").read_text(encoding="utf-8")
    return re.findall(r"^\s+#?\s*([A-Z][A-Z0-9_]*): ", text, flags=re.MULTILINE)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agents_environment_is_settings_the_agent_reads(overlay: str) -> None:
    resources = render(K8S / "overlays" / overlay)
    names = set(agent_config(resources))
    agent = container(resources, "Deployment", "agent")
    names |= {variable["name"] for variable in agent.get("env", [])}
    unknown = names - settings_names()
    assert not unknown, f"not read by agent/config.py: {sorted(unknown)}"
    # Every setting given is one Settings accepts (an env the agent starts with).
    config = agent_config(resources)
    settings = Settings.from_env({**config, "SIP_HOST": "10.1.2.3"})
    assert settings.host == "0.0.0.0" and settings.sip_port == 5060
    assert settings.max_calls == int(config["MAX_CALLS"])
    assert settings.drain_timeout_s == float(config["DRAIN_TIMEOUT_S"])
    from agent.logs import FORMATS

    assert config["LOG_FORMAT"] in FORMATS
    assert {"configMapRef", "secretRef"} == {key for source in agent["envFrom"] for key in source}


def test_gpu_production_points_the_agent_at_a_service_per_model() -> None:
    resources = render(K8S / "overlays" / "gpu-production")
    config = agent_config(resources)
    settings = Settings.from_env(config)
    assert not settings.embedded_models
    urls = {"stt": settings.stt_url, "llm": settings.llm_url, "tts": settings.tts_url}
    for name, (port, path, dockerfile) in MODEL_SERVERS.items():
        url = urlsplit(urls[name] or "")
        assert (url.hostname, url.port, url.path) == (name, port, path), name
        service = find(resources, "Service", name)
        (service_port,) = service["spec"]["ports"]
        assert service_port["port"] == port and service_port["targetPort"] == "http"
        deployment = find(resources, "Deployment", name)
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        (server,) = deployment["spec"]["template"]["spec"]["containers"]
        assert {p["name"]: p["containerPort"] for p in server["ports"]} == {"http": port}
        assert Dockerfile.parse(DOCKER / dockerfile).exposed == {f"{port}/tcp"}
    assert urlsplit(settings.stt_url or "").scheme == "ws"
    assert "/v1/listen" in routes("infra/stt_server.py")
    assert "/v1/speech" in routes("infra/tts_server.py")
    assert settings.llm_model == "gemma-3-27b-it"
    # vllm-gemma3-27b.sh serves the model under the name the agent asks for.
    script = (ROOT / "infra/llm/vllm-gemma3-27b.sh").read_text(encoding="utf-8")
    assert f"--served-model-name {settings.llm_model}" in script
    assert (
        settings.price_profile
        in tomllib.loads((ROOT / "infra/pricebook.toml").read_text(encoding="utf-8"))["profiles"]
    )


def test_cpu_demo_runs_the_embedded_models() -> None:
    resources = render(K8S / "overlays" / "cpu-demo")
    config = agent_config(resources)
    assert not {"STT_URL", "LLM_URL", "TTS_URL"} & set(config)
    assert not [
        r
        for r in resources
        if r["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "model-server"
    ]
    assert config["PRICE_PROFILE"] == "embedded-cpu"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workers_report_capacity_drain_on_stop_and_scale_on_live_calls(overlay: str) -> None:
    resources = render(K8S / "overlays" / overlay)
    config = agent_config(resources)
    deployment = find(resources, "Deployment", "agent")
    pod = deployment["spec"]["template"]["spec"]
    agent = container(resources, "Deployment", "agent")
    port = int(config["PORT"])
    assert {p["name"]: p["containerPort"] for p in agent["ports"]} == {
        "http": port,
        "sip": int(config["SIP_PORT"]),
    }
    # Probes: liveness and start-up on /health, readiness on /ready (200 below capacity, 503
    # when full or draining): routes the agent server has.
    assert agent["livenessProbe"]["httpGet"]["path"] == "/health"
    assert agent["startupProbe"]["httpGet"]["path"] == "/health"
    assert agent["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert {"/health", "/ready", "/drain"} <= routes("agent/server/app.py")
    # preStop: POST /drain on the loopback, waiting up to DRAIN_TIMEOUT_S; the SIGTERM after it
    # keeps that deadline (agent.pipeline.live_calls.LiveCalls.drain), then ends the rest and
    # flushes: the grace period covers the drain and the flush.
    command = agent["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python", "-c"]
    code = command[2]
    compile(code, "preStop", "exec")
    assert "/drain" in code and "127.0.0.1" in code and 'method="POST"' in code
    assert "DRAIN_TIMEOUT_S" in code and "PORT" in code
    drain_s = float(config["DRAIN_TIMEOUT_S"])
    assert pod["terminationGracePeriodSeconds"] >= drain_s + 20
    # The HPA: on the live-calls gauge agent/server/metrics.py exports, below each worker's
    # capacity.
    hpa = find(resources, "HorizontalPodAutoscaler", "agent")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "agent",
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] in live_calls_gauges()
    target = quantity(metric["pods"]["target"]["averageValue"])
    assert 0 < target < int(config["MAX_CALLS"])
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert "/metrics" in routes("agent/server/metrics.py")
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= drain_s


def quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (the forms the manifests use: 3, "3", "800m")."""
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


async def test_the_prestop_hook_drains_through_post_drain(tmp_path: Path) -> None:
    """Run the Deployment's preStop command against a stand-in for the contract's /drain: it
    POSTs to the loopback on PORT, waits for the answer within DRAIN_TIMEOUT_S, exits 0."""
    from aiohttp import web

    hook = container(render(K8S / "overlays" / "gpu-production"), "Deployment", "agent")
    command = hook["lifecycle"]["preStop"]["exec"]["command"]
    requests: list[tuple[str, str]] = []

    async def drain(request: web.Request) -> web.Response:
        requests.append((request.method, request.path))
        await asyncio.sleep(0.5)  # the calls in progress finish
        return web.json_response({"drained": True, "calls": 0})

    app = web.Application()
    app.router.add_post("/drain", drain)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *command[1:],
            env={**os.environ, "PORT": str(port), "DRAIN_TIMEOUT_S": "5"},
            stdout=asyncio.subprocess.PIPE,
        )
        output, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        await runner.cleanup()
    assert process.returncode == 0
    assert requests == [("POST", "/drain")]
    assert json.loads(output) == {"drained": True, "calls": 0}
    assert command[0] == "python"  # the image's PATH has the venv's python


def live_calls_gauges() -> set[str]:
    """The names of the gauges agent/server/metrics.py exports."""
    from agent.server.metrics import Metrics

    families = Metrics(lambda: 0).registry.collect()
    return {family.name for family in families if family.type == "gauge"}


def test_the_live_calls_gauge_is_agent_live_calls() -> None:
    assert "agent_live_calls" in live_calls_gauges()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_as_non_root_with_no_privileges(overlay: str) -> None:
    """The "restricted" Pod Security Standard's rules, and a read-only root file system."""
    for resource in render(K8S / "overlays" / overlay):
        for spec in _pod_specs(resource):
            name = resource["metadata"]["name"]
            context = spec["securityContext"]
            assert context["runAsNonRoot"] is True and context["runAsUser"] >= 1000, name
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert spec["automountServiceAccountToken"] is False, name
            assert spec["enableServiceLinks"] is False, name
            assert not [v for v in spec.get("volumes", []) if "hostPath" in v], name
            # Only the SIP edge is on the host's network (the trunk sends to the node).
            assert spec.get("hostNetwork", False) == (name == "sip-edge"), name
            for item in [*spec.get("initContainers", []), *spec["containers"]]:
                security = item["securityContext"]
                assert security["allowPrivilegeEscalation"] is False, name
                assert security["readOnlyRootFilesystem"] is True, name
                assert security["capabilities"] == {"drop": ["ALL"]}, name
                assert "memory" in item["resources"]["limits"], name
                assert ":" in item["image"] and not item["image"].endswith(":latest"), name


def test_model_servers_take_one_gpu_each_on_the_gpu_pool() -> None:
    resources = render(K8S / "overlays" / "gpu-production")
    servers = [
        r
        for r in resources
        if r["kind"] == "Deployment"
        and r["metadata"]["labels"].get("app.kubernetes.io/component") == "model-server"
    ]
    assert sorted(r["metadata"]["name"] for r in servers) == sorted(MODEL_SERVERS)
    for server in servers:
        spec = server["spec"]["template"]["spec"]
        (item,) = spec["containers"]
        resources_ = item["resources"]
        assert resources_["limits"]["nvidia.com/gpu"] == 1
        assert resources_["requests"]["nvidia.com/gpu"] == 1
        assert spec["nodeSelector"] == {"collections-agent/node-pool": "gpu"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert item[probe]["httpGet"]["path"] == "/health"
        image = item["image"].rpartition("/")[2].partition(":")[0]
        assert image.startswith("collections-") and image.endswith("-gpu")
    for module in ("infra/stt_server.py", "infra/tts_server.py"):
        assert "/health" in routes(module)
    policy = find(resources, "NetworkPolicy", "model-servers-from-agent")
    (rule,) = policy["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} == {port for port, _, _ in MODEL_SERVERS.values()}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_edge_serves_kamailio_cfg_in_front_of_the_headless_worker_service(
    overlay: str,
) -> None:
    resources = render(K8S / "overlays" / overlay)
    config_map = find(resources, "ConfigMap", "sip-edge-config")
    real = (ROOT / "infra/kamailio/kamailio.cfg").read_text(encoding="utf-8")
    assert config_map["data"] == {"kamailio.cfg": real}
    edge = find(resources, "DaemonSet", "sip-edge")
    spec = edge["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]
    (kamailio,) = spec["containers"]
    env = {v["name"]: v.get("value") for v in kamailio["env"]}
    assert env["LISTEN"] == "udp:$(NODE_IP):5060"
    sip = find(resources, "Service", env["WORKERS_HOST"])
    assert sip["spec"]["clusterIP"] == "None" and sip["spec"]["publishNotReadyAddresses"]
    assert (
        sip["spec"]["selector"]
        == find(resources, "Deployment", "agent")["spec"]["selector"]["matchLabels"]
    )
    (port,) = sip["spec"]["ports"]
    sip_port = int(agent_config(resources)["SIP_PORT"])
    assert (port["port"], port["protocol"], port["targetPort"]) == (sip_port, "UDP", "sip")
    assert int(env["WORKERS_PORT"]) == sip_port
    mount = kamailio["volumeMounts"][0]
    assert mount["mountPath"] == "/etc/kamailio/kamailio.cfg"
    assert kamailio["livenessProbe"]["exec"]["command"] == [
        "/usr/local/bin/kamailio-edge",
        "--check",
    ]
    # The workers' ingress lets SIP and RTP (the kernel's ephemeral ports) in.
    policy = find(resources, "NetworkPolicy", "agent-ingress")
    ports = policy["spec"]["ingress"][0]["ports"]
    assert {"protocol": "UDP", "port": sip_port} in ports
    assert {"protocol": "UDP", "port": 32768, "endPort": 60999} in ports


# ---------------------------------------------------------------------------------------------
# Compose
# ---------------------------------------------------------------------------------------------


@cache
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


def compose_schema() -> dict[str, Any]:
    """The Compose Specification's schema, as check-jsonschema vendors it (its sha256 beside)."""
    vendor = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor"
    text = (vendor / "compose-spec.json").read_text(encoding="utf-8")
    recorded = (vendor / "sha256" / "compose-spec.sha256").read_text(encoding="utf-8").split()[0]
    assert hashlib.sha256(text.encode()).hexdigest() == recorded
    return json.loads(text)


def test_compose_validates_against_the_compose_specification() -> None:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_compose_has_healthchecks_and_waits_for_them() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "agent", *MODEL_SERVERS}
    for name, service in services.items():
        assert service["healthcheck"]["test"], name
        assert not service["image"].endswith(":latest"), name
    agent = services["agent"]
    assert agent["depends_on"]["postgres"] == {"condition": "service_healthy"}
    for name in MODEL_SERVERS:
        assert agent["depends_on"][name] == {"condition": "service_healthy", "required": False}
        server = services[name]
        assert server["profiles"] == ["gpu"]
        (device,) = server["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        port, _, dockerfile = MODEL_SERVERS[name]
        assert server["build"]["dockerfile"] == f"infra/docker/{dockerfile}"
        assert f"127.0.0.1:{port}/health" in server["healthcheck"]["test"][-1]
    assert "profiles" not in agent and "profiles" not in services["postgres"]
    assert services["postgres"]["volumes"] == ["pgdata:/var/lib/postgresql/data"]
    assert agent["build"]["dockerfile"] == "Dockerfile"
    assert "127.0.0.1:8080/health" in agent["healthcheck"]["test"][-1]
    assert agent["ports"] == ["127.0.0.1:8080:8080"]
    assert agent["read_only"] is True and agent["cap_drop"] == ["ALL"]


def test_compose_passes_the_agent_only_settings_it_reads() -> None:
    environment = compose()["services"]["agent"]["environment"]
    unknown = set(environment) - settings_names()
    assert not unknown, f"not read by agent/config.py: {sorted(unknown)}"
    assert environment["PORT"] == "8080" and environment["HOST"] == "0.0.0.0"
    url = urlsplit(re.sub(r"\$\{[^}]*\}", "secret", environment["DATABASE_URL"]))
    assert url.hostname == "postgres" and url.port == 5432
    # The model URLs the .env example gives reach the compose services by name and port.
    example = env_example()
    for name, (port, path, _) in MODEL_SERVERS.items():
        url = urlsplit(example[f"{name.upper()}_URL"])
        assert (url.hostname, url.port, url.path) == (name, port, path)


def env_example() -> dict[str, str]:
    """.env.example's variables, the commented-out ones included."""
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    return dict(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$", text, flags=re.MULTILINE))


def test_the_env_example_documents_every_variable_and_holds_no_secret() -> None:
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    interpolated = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text))
    secrets = {s["environment"] for s in compose()["secrets"].values()}
    example = env_example()
    missing = (interpolated | secrets) - set(example)
    assert not missing, f"not in .env.example: {sorted(missing)}"
    # What compose passes on to the agent unchanged (no value in the file) is documented too,
    # and so is every secret the cluster's Secret may hold, but for those compose leaves out:
    # the database URL (compose makes it) and SIP (no SIP in compose: RTP needs host ports).
    passed_on = {k for k, v in compose()["services"]["agent"]["environment"].items() if v is None}
    assert passed_on <= set(example), sorted(passed_on - set(example))
    not_in_compose = {"DATABASE_URL", "SIP_CREDENTIALS", "SIP_TRUNK_USERNAME", "SIP_TRUNK_PASSWORD"}
    assert set(secret_example_names()) - not_in_compose <= set(example)
    active = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", text_of(".env.example"), re.M))
    assert active == {"POSTGRES_PASSWORD": "change-me"}, "only placeholders are set"
    assert ".env" in text_of(".gitignore").split()
    assert ".env" in text_of(".dockerignore").split()


def text_of(relative: str) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Dockerfiles
# ---------------------------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    arguments: str
    stage: int


@dataclass
class Dockerfile:
    """A Dockerfile read into its instructions, per stage, with the ARG defaults resolved."""

    path: Path
    instructions: list[Instruction]
    args: dict[str, str]
    stages: list[str]
    bases: list[str]

    @classmethod
    def parse(cls, path: Path) -> Dockerfile:
        logical: list[str] = []
        pending = ""
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if pending and stripped.startswith("#"):
                continue
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            logical.append(pending + stripped)
            pending = ""
        assert not pending, f"{path}: a continued last line"
        instructions, args, stages, bases = [], {}, [], []
        stage = -1
        for text in logical:
            keyword, _, arguments = text.partition(" ")
            keyword = keyword.upper()
            if keyword == "ARG" and stage == -1:
                name, _, default = arguments.partition("=")
                args[name] = default
            if keyword == "FROM":
                stage += 1
                words = arguments.split()
                image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
                bases.append(image)
                stages.append(words[2] if len(words) == 3 and words[1].upper() == "AS" else "")
            instructions.append(Instruction(keyword, arguments, stage))
        return cls(path, instructions, args, stages, bases)

    def final(self, keyword: str) -> list[str]:
        last = len(self.stages) - 1
        return [i.arguments for i in self.instructions if i.keyword == keyword and i.stage == last]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    @property
    def exposed(self) -> set[str]:
        ports = " ".join(self.final("EXPOSE")).split()
        return {p if "/" in p else f"{p}/tcp" for p in ports}

    def exec_form(self, keyword: str) -> list[str]:
        (arguments,) = self.final(keyword)
        if keyword == "HEALTHCHECK":
            arguments = arguments[arguments.index("CMD") + 3 :]
        return json.loads(arguments)


def dockerignore_patterns() -> list[str]:
    lines = text_of(".dockerignore").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(relative: str) -> bool:
    """Whether .dockerignore leaves ``relative`` (or a folder above it) out of the context.

    Patterns are anchored at the context's root; ``**/`` matches any depth (what the file
    uses; negations would need more).
    """
    patterns = dockerignore_patterns()
    assert not [p for p in patterns if p.startswith("!")], "negations: not in this check"
    path = PurePosixPath(relative)
    for candidate in [path, *path.parents][:-1]:
        parts = candidate.parts
        for pattern in patterns:
            if pattern.startswith("**/"):
                tails = ["/".join(parts[i:]) for i in range(len(parts))]
                if any(fnmatch.fnmatchcase(tail, pattern[3:]) for tail in tails):
                    return True
            elif fnmatch.fnmatchcase(str(candidate), pattern):
                return True
    return False


def test_the_dockerignore_keeps_secrets_and_local_state_out() -> None:
    for path in (".env", ".git/config", ".venv/bin/python", "data/agent.db", "x/__pycache__/y"):
        assert ignored(path), path
    # The image vendors Chart.js itself (the vendor stage), never a local copy.
    assert ignored("agent/server/web/vendor/chart.umd.min.js")
    for path in ("agent/server/app.py", "infra/kamailio/kamailio.cfg", "migrations/env.py"):
        assert not ignored(path), path


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_pins_its_bases_runs_as_non_root_and_checks_health(path: Path) -> None:
    dockerfile = Dockerfile.parse(path)
    stage_names = set(dockerfile.stages)
    for base in dockerfile.bases:
        if base in stage_names:
            continue
        name, _, tag = base.rpartition("/")[2].partition("@")[0].partition(":")
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{base}: pin a version tag"
    (user,) = dockerfile.final("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) >= 1000 and (not gid or int(gid) >= 1000), user
    health = dockerfile.exec_form("HEALTHCHECK")
    assert dockerfile.final("HEALTHCHECK")[0].startswith("--interval")
    assert dockerfile.final("CMD") or dockerfile.final("ENTRYPOINT")
    # The health check asks the port the image exposes (the SIP edge checks its process).
    tcp = {p for p in dockerfile.exposed if p.endswith("/tcp")}
    if tcp:
        (port,) = {p.split("/")[0] for p in tcp}
        assert f"127.0.0.1:{port}/health" in health[-1] or "PORT" in health[-1], health
    # No secret in a build argument or the image's environment: tokens are BuildKit secrets.
    names = [i.arguments.split("=")[0] for i in dockerfile.all("ARG")]
    names += re.findall(r"(\w+)=", " ".join(a.arguments for a in dockerfile.all("ENV")))
    assert not [n for n in names if re.search(r"TOKEN|SECRET|PASSWORD|API_KEY", n)], names
    for run in dockerfile.all("RUN"):
        if "fetch_weights.py" in run.arguments and "gemma" in run.arguments.lower():
            assert "--mount=type=secret,id=hf_token,required=true" in run.arguments


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_files_that_exist_in_the_build_context(path: Path) -> None:
    dockerfile = Dockerfile.parse(path)
    for copy_ in dockerfile.all("COPY"):
        words = shlex.split(copy_.arguments)
        if any(w.startswith("--from=") for w in words):
            continue
        sources = [w for w in words if not w.startswith("--")][:-1]
        assert sources, copy_.arguments
        for source in sources:
            matches = list(ROOT.glob(source))
            assert matches, f"{path.name}: COPY {source}: no such file"
            assert not ignored(source), f"{path.name}: COPY {source} is in .dockerignore"
    for script in re.findall(r"infra/docker/[\w.-]+", path.read_text(encoding="utf-8")):
        assert (ROOT / script).is_file(), script


def test_the_agent_image_installs_as_the_makefile_does(tmp_path: Path) -> None:
    dockerfile = Dockerfile.parse(ROOT / "Dockerfile")
    installs = [r.arguments for r in dockerfile.all("RUN") if "install-agent.sh" in r.arguments]
    assert len(installs) == 1
    match = re.search(r"sh infra/docker/install-agent\.sh (\S+) (\S+)", installs[0])
    assert match, installs[0]
    python, image_extras = match.groups()
    assert python == "/opt/venv/bin/python"
    # The image installs what `make run` installs (the runtime and the CPU models), no more.
    makefile = makefile_install()
    assert makefile["extras"] == set(image_extras.split(",")) == {"cpu-models"}
    # The script's own commands, run with a python that records them, are the Makefile's.
    recorded = run_install_script(makefile["extras_text"], tmp_path)
    assert recorded["commands"] == makefile["pip"]
    assert recorded["CMAKE_ARGS"] == makefile["CMAKE_ARGS"]
    # The image's stages: the runtime is the build's base, the vendor stage is `make vendor`.
    assert dockerfile.bases[1] == dockerfile.bases[2]
    assert "make vendor" in [r.arguments for r in dockerfile.all("RUN")]
    assert dockerfile.final("CMD") == ['["python", "-m", "agent", "serve"]']
    env = " ".join(dockerfile.final("ENV"))
    assert "HF_HUB_OFFLINE=1" in env and "PORT=8080" in env and "HOST=0.0.0.0" in env


def test_the_agent_image_carries_the_planners_profiles() -> None:
    """The console's dashboard plans from agent/ledger/profiles/*.json (package data): the build
    stage copies agent/ into the editable install's /app, and .dockerignore keeps none of them
    out."""
    profiles = sorted((ROOT / "agent" / "ledger" / "profiles").glob("*.json"))
    assert profiles, "agent/ledger/profiles/*.json: the planner's profiles are missing"
    for profile in profiles:
        relative = profile.relative_to(ROOT).as_posix()
        assert not ignored(relative), f"{relative} is in .dockerignore"
    dockerfile = Dockerfile.parse(ROOT / "Dockerfile")
    assert "agent agent" in [c.arguments for c in dockerfile.all("COPY")]


def makefile_install() -> dict[str, Any]:
    """The pip commands `make run` runs to install .venv, from `make -n` (nothing is run)."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed (it runs the test suite: make test)")
    result = subprocess.run(
        [make, "-n", "-B", "--no-print-directory", ".venv/.installed-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    pip = [shlex.split(line)[1:] for line in result.stdout.splitlines() if " -m pip " in line]
    assert len(pip) == 2, result.stdout
    (extras,) = [m.group(1) for w in pip[1] if (m := re.fullmatch(r"\.\[(.*)\]", w))]
    (cmake,) = re.findall(r"^export CMAKE_ARGS \?= (.*)$", text_of("Makefile"), re.MULTILINE)
    return {
        "pip": pip,
        "extras": set(extras.split(",")),
        "extras_text": extras,
        "CMAKE_ARGS": cmake,
    }


def run_install_script(extras: str, directory: Path) -> dict[str, Any]:
    """Run infra/docker/install-agent.sh with a python that only records its arguments."""
    log = directory / "commands"
    fake = directory / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$CMAKE_ARGS" >> "{log}.env"\n'
        f'printf "%s\\0" "$@" >> "{log}"; printf "\\n" >> "{log}"\n'
    )
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"}
    subprocess.run(
        ["sh", "infra/docker/install-agent.sh", str(fake), extras],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=30,
    )
    commands = [line.strip("\0").split("\0") for line in log.read_text().splitlines()]
    (cmake,) = set(Path(f"{log}.env").read_text().splitlines())
    return {"commands": commands, "CMAKE_ARGS": cmake}


@pytest.mark.models
def test_the_image_bakes_the_cpu_models_offline(tmp_path: Path) -> None:
    """The Dockerfile's bake step, as the image runs it: a fresh home, no network access."""
    env = {**os.environ, "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "infra/docker/bake_cpu_models.py", "--load"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    gemma = Path(report["llm"]["path"])
    assert gemma.is_relative_to(tmp_path / ".cache" / "collections-agent")
    assert gemma.stat().st_size == report["llm"]["bytes"] > 100_000_000
    for name in ("stt", "tts", "tts_config", "smart_turn"):
        assert report[name]["bytes"] > 0, name
    assert report["loaded"]["stt_heard_silence_as"] == ""
    assert report["loaded"]["llm_tokens"] > 0
    dockerfile = Dockerfile.parse(ROOT / "Dockerfile")
    (bake,) = [r.arguments for r in dockerfile.all("RUN") if "bake_cpu_models.py" in r.arguments]
    assert "HF_HUB_OFFLINE=1" in bake and "--load" in bake and "HOME=/home/agent" in bake


def requirement_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line} is not pinned"
            pins[_normalise(name)] = version
    return pins


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", re.sub(r"\[.*\]", "", name)).lower()


def test_the_gpu_images_pin_what_pyproject_pins() -> None:
    project = tomllib.loads(text_of("pyproject.toml"))["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["gpu"]]
    pyproject = {_normalise(d.split("==")[0]): d.split("==")[1] for d in declared}
    for path in sorted(DOCKER.glob("requirements-*.txt")):
        for name, version in requirement_pins(path).items():
            expected = pyproject.get(name) or importlib.metadata.version(name)
            assert version == expected, f"{path.name}: {name}=={version}, tested {expected}"
    assert "torch" not in requirement_pins(DOCKER / "requirements-tts-gpu.txt")


def test_the_llm_images_run_the_commands_of_infra_llm() -> None:
    trtllm = Dockerfile.parse(DOCKER / "llm-trtllm.Dockerfile").exec_form("CMD")
    # The yaml's header: "# Run: trtllm-serve MODEL --flag value \" and its continued lines.
    lines = iter(text_of("infra/llm/trtllm-gemma3-27b.yaml").splitlines())
    run = next(line for line in lines if line.startswith("# Run: "))
    command = [run.removeprefix("# Run: ")]
    while command[-1].endswith("\\"):
        command.append(next(lines).lstrip("# "))
    documented = " ".join(part.rstrip("\\") for part in command).split()
    assert documented[0] == trtllm[0] == "trtllm-serve"
    flags = [w for w in documented if w.startswith("--")]
    for flag in flags:
        assert flag in trtllm, flag
        documented_value = documented[documented.index(flag) + 1]
        value = trtllm[trtllm.index(flag) + 1]
        assert value == documented_value or value.endswith(documented_value), flag
    vllm = Dockerfile.parse(DOCKER / "llm-vllm.Dockerfile")
    assert vllm.exec_form("ENTRYPOINT") == ["/app/infra/llm/vllm-gemma3-27b.sh"]
    env = " ".join(vllm.final("ENV"))
    assert "MODEL=/models/gemma-3-27b-it" in env and "PORT=8002" in env
    assert "/models/gemma-3-27b-it" in " ".join(r.arguments for r in vllm.all("RUN"))
    stt = Dockerfile.parse(DOCKER / "stt-gpu.Dockerfile").exec_form("CMD")
    assert stt[stt.index("--port") + 1] == "8001"
    assert stt[stt.index("--backend") + 1] == "transformers"
    tts_entry = text_of("infra/docker/tts-gpu-entrypoint.sh")
    assert "port=${PORT:-8003}" in tts_entry and "--backend orpheus" in tts_entry


def test_fetch_weights_records_what_it_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fetch_weights.py against a stand-in hub: the resolved commit, the token, the files."""
    spec = importlib.util.spec_from_file_location("fetch_weights", DOCKER / "fetch_weights.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    token_file = tmp_path / "hf_token"
    token_file.write_text("hf_test\n")
    monkeypatch.setattr(module, "SECRET_FILE", token_file)
    calls: dict[str, Any] = {}

    class Api:
        def __init__(self, token: str | None = None) -> None:
            calls["api_token"] = token

        def model_info(self, repo: str, revision: str) -> Any:
            return type("Info", (), {"sha": "0123abcd" * 5})()

    def snapshot_download(**kwargs: Any) -> str:
        calls["download"] = kwargs
        dest = Path(kwargs["local_dir"])
        (dest / ".cache").mkdir(parents=True)
        (dest / "config.json").write_text("{}")
        (dest / "model.safetensors").write_bytes(b"w")
        return str(dest)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    dest = tmp_path / "models" / "m"
    module.main(["org/m", "main", str(dest), "--include", "*.json"])
    assert calls["api_token"] == "hf_test" and calls["download"]["token"] == "hf_test"
    assert calls["download"]["revision"] == "0123abcd" * 5
    assert calls["download"]["allow_patterns"] == ["*.json"]
    source = json.loads((dest / "SOURCE.json").read_text())
    assert source["commit"] == "0123abcd" * 5 and source["repo"] == "org/m"
    assert source["files"] == ["config.json", "model.safetensors"]
    assert not (dest / ".cache").exists()
    token_file.unlink()
    assert module.read_token() is None


@pytest.mark.parametrize("script", sorted(DOCKER.glob("*.sh")), ids=lambda p: p.name)
def test_shell_scripts_parse(script: Path) -> None:
    shell = (
        "bash" if text_of(str(script.relative_to(ROOT))).startswith("#!/usr/bin/env bash") else "sh"
    )
    subprocess.run([shell, "-n", str(script)], check=True, timeout=10)
    shellcheck = shutil.which("shellcheck")
    if shellcheck:
        subprocess.run([shellcheck, str(script)], check=True, timeout=30)


FAKE_VLLM = """#!/usr/bin/env python3
# A stand-in for `vllm serve`: answers /health on its --port until it is stopped.
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def test_the_tts_container_ends_when_one_of_its_servers_does(tmp_path: Path) -> None:
    """tts-gpu-entrypoint.sh with a stand-in vLLM and the real TTS server, which exits at once
    here (no SNAC weights): the container's process exits with its status, vLLM stopped."""
    (tmp_path / "vllm").write_text(FAKE_VLLM)
    (tmp_path / "vllm").chmod(0o755)
    orpheus_port = _free_udp_port()  # a free number; the stand-in binds it over TCP
    env = {
        **os.environ,
        "PATH": f"{tmp_path}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "ORPHEUS_PORT": str(orpheus_port),
        "ORPHEUS_START_TIMEOUT_S": "30",
        "SNAC_DIR": str(tmp_path / "no-snac"),
        "HF_HUB_OFFLINE": "1",
        "PORT": "0",
    }
    result = subprocess.run(
        ["bash", str(DOCKER / "tts-gpu-entrypoint.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0, result.stderr[-2000:]
    assert "a server exited" in result.stderr, result.stderr[-2000:]
    with socket.socket() as probe:  # the stand-in vLLM was stopped with it
        assert probe.connect_ex(("127.0.0.1", orpheus_port)) != 0


# ---------------------------------------------------------------------------------------------
# The SIP edge's entrypoint, with the real Kamailio
# ---------------------------------------------------------------------------------------------


def kamailio_binary() -> str:
    found = shutil.which("kamailio") or shutil.which("kamailio", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        pytest.fail("kamailio is not installed: apt-get install kamailio (make system-test-deps)")
    return found


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _options(port: int, timeout: float = 10.0) -> list[str]:
    """Send OPTIONS to the edge until a final answer comes; the status lines seen."""
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        local = sock.getsockname()[1]
        request = (
            f"OPTIONS sip:agent@127.0.0.1:{port} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{local};branch=z9hG4bK{uuid.uuid4().hex}\r\n"
            f"From: <sip:probe@127.0.0.1:{local}>;tag=probe\r\n"
            f"To: <sip:agent@127.0.0.1:{port}>\r\n"
            f"Call-ID: {uuid.uuid4().hex}\r\nCSeq: 1 OPTIONS\r\n"
            "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        ).encode()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await loop.sock_sendto(sock, request, ("127.0.0.1", port))
            with contextlib.suppress(TimeoutError):
                data, _ = await asyncio.wait_for(loop.sock_recvfrom(sock, 65535), 0.5)
                status = data.decode(errors="replace").split("\r\n", 1)[0]
                if not status.startswith("SIP/2.0 1"):
                    return [status]
    return []


async def _until(condition: Any, what: str, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.1)


async def test_the_edge_follows_the_workers_name_and_stops_on_sigterm(tmp_path: Path) -> None:
    """kamailio-edge.sh with the real kamailio.cfg: the list from the name's addresses, calls
    routed to the worker, a restart when the addresses change, a clean stop on SIGTERM."""
    from telephony.sip.ua import SipEndpoint

    kamailio = kamailio_binary()
    bin_dir, run_dir = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    hosts = tmp_path / "hosts"
    # A stand-in for the cluster's DNS: getent prints what the headless Service would resolve.
    (bin_dir / "getent").write_text(f'#!/bin/sh\ncat "{hosts}"\n')
    (bin_dir / "getent").chmod(0o755)
    hosts.write_text("127.0.0.1       STREAM agent-sip\n127.0.0.1       DGRAM\n")

    async def on_call(call: Any) -> None:
        await call.hang_up()

    worker = SipEndpoint("127.0.0.1", 0, on_call=on_call)
    await worker.start()
    edge_port = _free_udp_port()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{Path(kamailio).parent}:{os.environ['PATH']}",
        "WORKERS_HOST": "agent-sip",
        "WORKERS_PORT": str(worker.port),
        "LISTEN": f"udp:127.0.0.1:{edge_port}",
        "RUN_DIR": str(run_dir),
        "SYNC_INTERVAL": "1",
        "KAMAILIO_CFG": str(ROOT / "infra/kamailio/kamailio.cfg"),
    }
    process = await asyncio.create_subprocess_exec(
        "sh",
        str(DOCKER / "kamailio-edge.sh"),
        "-A",
        "PING_INTERVAL=1",
        "-A",
        "FR_TIMER=1000",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    listing = run_dir / "dispatcher.list"
    pid_file = run_dir / "kamailio.pid"

    def pid() -> int | None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int(pid_file.read_text())
        return None

    try:
        await _until(lambda: listing.exists() and pid() is not None, "the list and Kamailio")
        assert f"1 sip:127.0.0.1:{worker.port} 0" in listing.read_text().splitlines()
        assert await _options(edge_port) == ["SIP/2.0 200 OK"]
        check = subprocess.run(
            ["sh", str(DOCKER / "kamailio-edge.sh"), "--check"],
            env={**env, "RUN_DIR": str(run_dir)},
            check=False,
        )
        assert check.returncode == 0
        first = pid()
        hosts.write_text("")  # the workers are gone: the list empties, Kamailio restarts
        await _until(lambda: "sip:" not in listing.read_text(), "the emptied list")
        await _until(lambda: pid() not in (None, first), "Kamailio restarted")
        statuses = await _options(edge_port)
        assert statuses == ["SIP/2.0 503 No Agent Available"]
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 15) == 0
        assert not pid_file.exists()
        assert await _options(edge_port, timeout=1.0) == []
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        await worker.close()
        output = await process.stdout.read() if process.stdout else b""
        print(output.decode(errors="replace")[-3000:])
