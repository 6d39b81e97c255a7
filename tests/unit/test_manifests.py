"""``deploy/kubernetes/``'s invariants, read from the manifests as ``kubectl apply -k`` applies them: the pod sealed
without privilege, its probes, a grace above the drain, a disruption budget and a Service over its pods, and no secret
in its ConfigMap. ``tests/e2e/test_image.py`` runs the pod itself."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from _kubernetes import MANIFESTS, named, rendered
from mcp_sessions._gateway._file import servers_of

# What each of a stdio gateway's processes may take to end once the drain is over (stdin closed, SIGTERM 1 s later,
# SIGKILL 2 s after that, what is left killed): docs/deployment.md, "Rolling restarts".
PROCESSES_END = 6


def every_manifest() -> list[dict[str, Any]]:
    """The base's objects and its components' (their resources; a patch is no object)."""
    objects = rendered()
    for component in MANIFESTS.glob("components/*/kustomization.yaml"):
        for resource in yaml.safe_load(component.read_text())["resources"]:
            objects += yaml.safe_load_all((component.parent / resource).read_text())
    return objects


def test_no_pod_is_privileged_and_the_gateways_is_sealed_in_a_user_namespace() -> None:
    pods = [o["spec"]["template"]["spec"] for o in every_manifest() if o["kind"] == "Deployment"]
    assert len(pods) == 2  # the gateway's and the Redis component's
    for pod in pods:
        assert pod["hostUsers"] is False
        for container in pod["containers"]:
            assert not container["securityContext"].get("privileged", False)
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    [gateway] = named(rendered(), "Deployment")["spec"]["template"]["spec"]["containers"]
    context = gateway["securityContext"]
    assert context["capabilities"]["add"] == ["SETUID", "SETGID", "CHOWN", "SYS_ADMIN", "NET_ADMIN"]
    assert context["seccompProfile"] == {"type": "Localhost", "localhostProfile": "mcp-sessions/seccomp.json"}


def test_the_probes_and_a_grace_above_the_drain() -> None:
    objects = rendered()
    pod = named(objects, "Deployment")["spec"]["template"]["spec"]
    [gateway] = pod["containers"]
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    file = tomllib.loads(named(objects, "ConfigMap")["data"]["gateway.toml"])
    drain = file["gateway"].get("shutdown-timeout", 30)  # --stdio's default
    pre_stop = gateway["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain + PROCESSES_END


def test_a_disruption_budget_and_a_service_select_the_gateways_pods() -> None:
    objects = rendered()
    labels = named(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    budget = named(objects, "PodDisruptionBudget")["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] == 1
    assert named(objects, "Service")["spec"]["selector"].items() <= labels.items()


def test_the_configmap_is_a_file_the_gateway_reads_and_holds_no_secret(tmp_path: Path) -> None:
    objects = rendered()
    [text] = named(objects, "ConfigMap")["data"].values()
    file = tmp_path / "gateway.toml"
    file.write_text(text)
    assert [server.name for server in servers_of(str(file), ["--config", str(file)])] == ["memory"]

    def keys(table: object) -> list[str]:
        if not isinstance(table, dict):
            return []
        return [*table, *(key for value in table.values() for key in keys(value))]

    # A secret is a file of the mounted Secret (client-secret-file), never a value here; nor is a server's env.
    assert not [key for key in keys(tomllib.loads(text)) if "secret" in key and not key.endswith("-file")]
    assert "env" not in keys(tomllib.loads(text))
    [gateway] = named(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    for variable in gateway["env"]:  # the session keys and the store's URL (a password) come from the Secret
        assert variable["valueFrom"]["secretKeyRef"]["name"] == "mcp-sessions-gateway", variable
