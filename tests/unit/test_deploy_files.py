"""The deployment files are valid before anyone deploys them: Kubernetes manifests against the
Kubernetes schemas (kubernetes-validate ships them), the compose file against the compose spec
(check-jsonschema ships it), every NATS config through `nats-server -t`, the systemd units through
`systemd-analyze verify` where it exists, plus what each file must say for noetl-stream. Nothing
here runs a container engine, a cluster or Helm; docs/deploy.md says so."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from noetl_stream.tools.python_slots import WORKER_CAPABILITIES

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
K8S_VERSION = kubernetes_validate.latest_version()


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if d]


KUBERNETES_FILES = sorted(p for p in (DEPLOY / "kubernetes" / "base").glob("*.yaml")
                          if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", KUBERNETES_FILES, ids=lambda p: p.name)
def test_kubernetes_manifests_match_the_kubernetes_schemas(path: Path) -> None:
    for document in yaml_documents(path):
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)  # raises when invalid


def test_the_kustomization_lists_every_manifest() -> None:
    (kustomization,) = yaml_documents(DEPLOY / "kubernetes" / "base" / "kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(p.name for p in KUBERNETES_FILES)


def kinds() -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for path in KUBERNETES_FILES:
        for document in yaml_documents(path):
            found.setdefault(document["kind"], []).append(document)
    return found


def test_deployments_have_probes_resources_a_budget_and_secrets() -> None:
    found = kinds()
    deployments = found["Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"noetl-stream-server",
                                                            "noetl-stream-worker-default"}
    for deployment in deployments:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert {"readinessProbe", "livenessProbe", "resources"} <= set(container)
        assert container["resources"]["requests"] and container["resources"]["limits"]
        secrets = {e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e}
        assert "noetl-stream-secret-key" in secrets and any("nats" in s for s in secrets)
        pod_context = deployment["spec"]["template"]["spec"]["securityContext"]
        # A worker is root with a few capabilities (test_the_worker_manifests_...), a server not.
        is_worker = deployment["metadata"]["name"].startswith("noetl-stream-worker")
        assert pod_context["runAsNonRoot"] is not is_worker
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert any(b["spec"]["selector"]["matchLabels"] == selector
                   for b in found["PodDisruptionBudget"])
    nats_secrets = [s for s in found["Secret"] if "nats" in s["metadata"]["name"]]
    assert all("NOETL_STREAM_NATS_URL" in s["stringData"] for s in nats_secrets)


def test_the_worker_is_restarted_when_its_health_says_it_hangs() -> None:
    (worker,) = [d for d in kinds()["Deployment"] if d["metadata"]["name"].startswith(
        "noetl-stream-worker")]
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    port = int(args[args.index("--metrics") + 1].rsplit(":", 1)[1])
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    # The worker's own /health (metrics_endpoint.py): 503 when NATS carries no round trip.
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}


def test_the_nats_helm_values_ask_for_jetstream_r3_and_sync_always() -> None:
    (values,) = yaml_documents(DEPLOY / "kubernetes" / "nats" / "values.yaml")
    config = values["config"]
    assert config["cluster"] == {"enabled": True, "replicas": 3}
    assert config["jetstream"]["enabled"] is True
    assert config["jetstream"]["merge"]["sync_interval"] == "always"


def test_the_compose_file_matches_the_compose_spec() -> None:
    checker = BIN / "check-jsonschema"
    out = subprocess.run([str(checker), "--builtin-schema", "vendor.compose-spec",
                          str(DEPLOY / "compose.yaml")], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_compose_file_runs_three_nats_nodes_two_servers_two_workers_and_the_api() -> None:
    (compose,) = yaml_documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    commands = {name: s.get("command", []) for name, s in services.items()}
    nats = [n for n, s in services.items() if "nats" in str(s.get("image", ""))]
    assert sorted(nats) == ["nats-1", "nats-2", "nats-3"]
    assert sum(1 for c in commands.values() if c == ["server"]) == 2
    assert sum(1 for c in commands.values() if c[:1] == ["worker"]) == 2
    assert commands["api"] == ["server", "--http", "0.0.0.0:8082"]
    for name in nats:
        assert any("container.conf" in v for v in services[name]["volumes"])


NATS_CONFIGS = [DEPLOY / "nats" / "single.conf", DEPLOY / "nats" / "cluster" / "container.conf",
                *sorted((DEPLOY / "nats" / "cluster").glob("n?.conf")),
                DEPLOY / "nats" / "accounts" / "accounts.conf"]


@pytest.mark.parametrize("path", NATS_CONFIGS, ids=lambda p: p.name)
def test_nats_configs_are_valid_for_nats_server(path: Path) -> None:
    from noetl_stream.bus.nats_server import find_binary

    env = {"NATS_SERVER_NAME": "nats-1", "NOETL_SERVER_PASSWORD": "x",
           "NOETL_WORKER_DEFAULT_PASSWORD": "y", "NOETL_CLIENT_PASSWORD": "z"}
    out = subprocess.run([str(find_binary()), "-t", "-c", str(path)], capture_output=True,
                         text=True, env=env, cwd=path.parent, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sync_interval: always" in path.read_text() or path.name == "single.conf"


def test_the_container_image_runs_as_a_non_root_user_with_a_health_check() -> None:
    text = (DEPLOY / "container" / "Containerfile").read_text()
    assert "FROM python:3.12-slim" in text
    assert "USER 10001" in text and "useradd" in text
    assert 'ENTRYPOINT ["noetl-stream"]' in text
    assert "HEALTHCHECK" in text and "/health" in text


UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_units_verify(tmp_path: Path) -> None:
    # The units name their install paths; here those are this venv's executables and env file.
    swaps = {"/opt/noetl-stream/bin/noetl-stream": str(BIN / "noetl-stream"),
             "/usr/local/bin/nats-server": str(BIN / "nats-server"),
             "/etc/noetl-stream/noetl-stream.env": str(DEPLOY / "systemd" / "noetl-stream.env")}
    names = []
    for unit in UNITS:
        text = unit.read_text()
        for old, new in swaps.items():
            text = text.replace(old, new)
        name = unit.name.replace("@.", "@default.")
        (tmp_path / name).write_text(text)
        names.append(str(tmp_path / name))
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", *names], capture_output=True,
                         text=True, check=False, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Unknown" not in out.stderr, out.stderr


def test_units_restart_and_read_the_environment_file() -> None:
    env_file = (DEPLOY / "systemd" / "noetl-stream.env").read_text()
    for unit in UNITS:
        text = unit.read_text()
        assert "Restart=" in text
        if unit.name.startswith("noetl-stream"):
            assert "EnvironmentFile=/etc/noetl-stream/noetl-stream.env" in text
    for setting in ("NOETL_STREAM_NATS_URL", "NOETL_STREAM_SECRET_KEY", "NOETL_STREAM_PREFIX"):
        assert f"{setting}=" in env_file


def test_the_units_documentation_exists_once_the_wheel_is_installed(tmp_path: Path) -> None:
    """Each unit's `Documentation=` is a web address, or a file the wheel installs under the
    virtualenv docs/deploy.md makes (/opt/noetl-stream): the wheel is built and installed here
    under that prefix moved into tmp_path.
    """
    subprocess.run([str(BIN / "pip"), "wheel", "--quiet", "--no-deps", "--wheel-dir",
                    str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    [wheel] = (tmp_path / "dist").glob("noetl_stream-*.whl")
    prefix = tmp_path / "opt" / "noetl-stream"
    subprocess.run([str(BIN / "pip"), "install", "--quiet", "--no-deps", "--no-compile", "--ignore-installed",
                    "--prefix", str(prefix), str(wheel)], check=True, capture_output=True)
    named = []
    for unit in UNITS:
        for line in unit.read_text().splitlines():
            if line.startswith("Documentation="):
                named += [(unit.name, uri) for uri in line.removeprefix("Documentation=").split()]
    assert any(uri.startswith("file:") for _, uri in named)
    for name, uri in named:
        if uri.startswith(("https://", "http://")):
            continue
        assert uri.startswith("file:///opt/noetl-stream/"), (name, uri)
        path = prefix / uri.removeprefix("file:///opt/noetl-stream/")
        assert path.is_file(), f"{name}: {uri} is not installed by the wheel"


SLOT_CAPABILITIES = sorted(WORKER_CAPABILITIES)


def test_the_kubernetes_worker_is_root_with_only_the_slot_capabilities() -> None:
    for deployment in kinds()["Deployment"]:
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        if deployment["metadata"]["name"].startswith("noetl-stream-worker"):
            assert pod["securityContext"]["runAsUser"] == 0
            assert context["capabilities"] == {"drop": ["ALL"], "add": SLOT_CAPABILITIES}
        else:
            assert pod["securityContext"]["runAsUser"] == 10001
            assert context["capabilities"] == {"drop": ["ALL"]}


def test_the_compose_workers_are_root_with_only_the_slot_capabilities() -> None:
    (compose,) = yaml_documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    workers = [name for name in services if name.startswith("worker")]
    assert workers
    for name in workers:
        worker = services[name]
        assert worker["user"] == "0:0"
        assert worker["cap_drop"] == ["ALL"] and worker["cap_add"] == SLOT_CAPABILITIES
        assert worker["security_opt"] == ["no-new-privileges:true"]
        assert worker["command"][0] == "worker"
    for name in ("init", "server-1", "server-2", "api"):  # the image's own user, 10001
        assert "user" not in services[name] and "cap_add" not in services[name]


def test_the_systemd_worker_is_root_with_only_the_slot_capabilities() -> None:
    worker = (DEPLOY / "systemd" / "noetl-stream-worker@.service").read_text().splitlines()
    assert "User=root" in worker and "NoNewPrivileges=true" in worker
    bounding = [line for line in worker if line.startswith("CapabilityBoundingSet=")]
    assert bounding == ["CapabilityBoundingSet=" + " ".join(f"CAP_{c}" for c in SLOT_CAPABILITIES)]
    assert "RuntimeDirectory=noetl-stream" in worker and "RuntimeDirectoryPreserve=yes" in worker
    server = (DEPLOY / "systemd" / "noetl-stream-server.service").read_text().splitlines()
    assert "User=noetl" in server
