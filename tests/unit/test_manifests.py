"""``deploy/kubernetes/``'s invariants, read from the manifests as ``kubectl apply -k`` applies them: the pod sealed
without privilege, its probes, a grace above the drain, a disruption budget and a Service over its pods, and no secret
in its ConfigMap; with components/front, the front's upstreams naming each replica, the front with no capability,
the replicas' pod the base's, one store for all, and each set of pods its own Service and budget.
``tests/e2e/test_image.py`` runs the pods themselves."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from typing import Any

import pytest

from _kubernetes import MANIFESTS, named, rendered
from mcp_sessions._gateway._config import ServerFlags
from mcp_sessions._gateway._file import servers_of

# What each of a stdio gateway's processes may take to end once the drain is over (stdin closed, SIGTERM 1 s later,
# SIGKILL 2 s after that, what is left killed): docs/deployment.md, "Rolling restarts".
PROCESSES_END = 6


COMPONENTS = ("redis", "ingress-nginx", "front")
REPLICAS = {"app.kubernetes.io/name": "mcp-sessions-gateway", "app.kubernetes.io/component": "replica"}


def every_manifest() -> list[dict[str, Any]]:
    """The base's objects with every component."""
    assert {path.parent.name for path in MANIFESTS.glob("components/*/kustomization.yaml")} == set(COMPONENTS)
    return rendered(components=COMPONENTS)


def pod_of(objects: list[dict[str, Any]], kind: str, name: str = "mcp-sessions-gateway") -> dict[str, Any]:
    pod: dict[str, Any] = named(objects, kind, name)["spec"]["template"]
    return pod


def environment(pod: dict[str, Any]) -> dict[str, Any]:
    [container] = pod["spec"]["containers"]
    return {variable["name"]: variable.get("value", variable.get("valueFrom")) for variable in container["env"]}


def test_no_pod_is_privileged_and_the_gateways_is_sealed_in_a_user_namespace() -> None:
    pods = [o["spec"]["template"]["spec"] for o in every_manifest() if o["kind"] in ("Deployment", "StatefulSet")]
    assert len(pods) == 3  # the gateway's (the front, with components/front), the Redis component's, the replicas'
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


# components/front: the replicas a StatefulSet behind a headless Service, the base's Deployment their front.
def test_the_fronts_upstreams_name_each_replica_the_statefulset_has(tmp_path: Path) -> None:
    objects = rendered(components=("front",))
    replicas = named(objects, "StatefulSet", "mcp-sessions-replica")
    headless = named(objects, "Service", replicas["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == REPLICAS == replicas["spec"]["selector"]["matchLabels"]
    [port] = headless["spec"]["ports"]

    def servers(config_map: str) -> list[ServerFlags]:
        file = tmp_path / config_map
        file.write_text(named(objects, "ConfigMap", config_map)["data"]["gateway.toml"])
        return servers_of(str(file), ["--config", str(file)])

    replicas_servers = servers("mcp-sessions-gateway")
    front_servers = servers("mcp-sessions-front")
    assert [server.path for server in front_servers] == [server.path for server in replicas_servers]
    for replica, front in zip(replicas_servers, front_servers, strict=True):
        assert front.flags.stdio is None  # the front starts no process
        assert replica.flags.port == port["port"]
        assert front.flags.upstream == [
            f"http://{replicas['metadata']['name']}-{ordinal}.{headless['metadata']['name']}:{port['port']}{replica.path}"
            for ordinal in range(replicas["spec"]["replicas"])
        ]


def test_the_front_holds_no_capability_and_the_replicas_pod_is_the_bases() -> None:
    base = pod_of(rendered(), "Deployment")
    objects = rendered(components=("front",))
    front, replica = pod_of(objects, "Deployment"), pod_of(objects, "StatefulSet", "mcp-sessions-replica")
    assert front["spec"]["hostUsers"] is False
    [container] = front["spec"]["containers"]
    assert container["securityContext"] == {
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "readOnlyRootFilesystem": True,
    }
    # The base's pod, believing a conversation's id from the pod network alone (the front's pods' addresses: a
    # private range, which the replicas' processes under egress never reach), and their own labels.
    trusted = environment(replica).pop("FORWARDED_ALLOW_IPS")
    assert ipaddress.ip_network(trusted).is_private
    [replica_container] = replica["spec"]["containers"]
    replica_container["env"] = [
        variable
        for variable in replica_container["env"]
        if variable["name"] not in ("FORWARDED_ALLOW_IPS", "MCP_SESSIONS_CONVERSATION_DATA")
    ]
    assert replica["metadata"]["labels"] == REPLICAS
    assert replica["spec"] == base["spec"]


@pytest.mark.parametrize("components", [("front",), ("redis", "front"), ("front", "redis")])
def test_the_front_and_its_replicas_share_one_store_and_one_key(components: tuple[str, ...]) -> None:
    """The front needs a store its replicas share (components/redis, in either order, or the Secret's URL): each
    names the same, and the same session keys."""
    objects = rendered(components=components)
    front, replica = pod_of(objects, "Deployment"), pod_of(objects, "StatefulSet", "mcp-sessions-replica")
    for variable in ("MCP_SESSIONS_STORE", "MCP_SESSIONS_SECRET"):
        assert environment(front)[variable] == environment(replica)[variable]
    store = environment(replica)["MCP_SESSIONS_STORE"]
    in_cluster = "redis://mcp-sessions-redis:6379/0"
    assert store == in_cluster if "redis" in components else store["secretKeyRef"]["key"] == "MCP_SESSIONS_STORE"


def test_the_front_and_the_replicas_each_have_their_own_service_and_budget() -> None:
    objects = every_manifest()
    front = pod_of(objects, "Deployment")["metadata"]["labels"]
    replica = pod_of(objects, "StatefulSet", "mcp-sessions-replica")["metadata"]["labels"]

    def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
        return selector.items() <= labels.items()

    service = named(objects, "Service")["spec"]["selector"]  # the Ingress's backend
    assert named(objects, "Ingress")["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == (
        "mcp-sessions-gateway"
    )
    assert selects(service, front) and not selects(service, replica)
    for budget, own, other in (("mcp-sessions-gateway", front, replica), ("mcp-sessions-replica", replica, front)):
        spec = named(objects, "PodDisruptionBudget", budget)["spec"]
        assert spec["maxUnavailable"] == 1
        assert selects(spec["selector"]["matchLabels"], own) and not selects(spec["selector"]["matchLabels"], other)
    # Only the front's pods reach the replicas; the Redis every gateway's pod.
    policy = named(objects, "NetworkPolicy", "mcp-sessions-replica")["spec"]
    assert selects(policy["podSelector"]["matchLabels"], replica)
    [admitted] = policy["ingress"]
    [peer] = admitted["from"]
    assert selects(peer["podSelector"]["matchLabels"], front) and not selects(
        peer["podSelector"]["matchLabels"], replica
    )
    [redis] = named(objects, "NetworkPolicy", "mcp-sessions-redis")["spec"]["ingress"][0]["from"]
    assert selects(redis["podSelector"]["matchLabels"], front) and selects(redis["podSelector"]["matchLabels"], replica)
