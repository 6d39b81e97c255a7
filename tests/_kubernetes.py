"""``deploy/kubernetes/`` as ``kubectl apply -k`` reads it, and its gateway's pod as podman runs it.

:func:`rendered` reads the kustomization's resources and makes its ConfigMap, as kustomize does for the keys the
directory uses (and refuses any other). :func:`pod_run` turns the Deployment's pod into a ``podman run``'s options,
field by field, as a kubelet with user namespaces would set the container up: a field it does not translate fails
the test, so that what the manifests grant is exactly what the tests run (``tests/e2e/test_image.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "deploy" / "kubernetes"
# Where a node's kubelet finds a Localhost seccomp profile (its --root-dir's seccomp/), and what the docs place there.
PROFILES = {"mcp-sessions/seccomp.json": ROOT / "deploy" / "seccomp.json"}
_KUSTOMIZATION = {"apiVersion", "kind", "resources", "configMapGenerator", "images"}
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}

Manifest = dict[str, Any]


def rendered(directory: Path = MANIFESTS) -> list[Manifest]:
    """The objects ``kubectl apply -k directory`` applies (the generated ConfigMap under its own name, without
    kustomize's hash of its content)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - _KUSTOMIZATION
    assert not unknown, f"kustomization.yaml: {sorted(unknown)} not read here (tests/_kubernetes.py)"
    objects = [
        document
        for resource in kustomization["resources"]
        for document in yaml.safe_load_all((directory / resource).read_text())
    ]
    for generator in kustomization.get("configMapGenerator", ()):
        data = {Path(name).name: (directory / name).read_text() for name in generator["files"]}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    images = {image["name"]: f"{image['newName']}:{image['newTag']}" for image in kustomization.get("images", ())}
    for container in (
        c for o in objects if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
    ):
        container["image"] = images.get(container["image"], container["image"])
    return objects


def named(objects: list[Manifest], kind: str, name: str = "mcp-sessions-gateway") -> Manifest:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


@dataclass
class PodRun:
    """A pod's container as podman runs it: its options, the environment they name (a Secret's values, never on a
    command line), its probes' paths by kind, its ports, and how it stops."""

    options: list[str] = field(default_factory=list)
    environ: dict[str, str] = field(default_factory=dict)
    probes: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    grace: int = 30
    pre_stop: int = 0


class _Fields:
    """A manifest's mapping whose every key must be read (:meth:`take`) by the time :meth:`done` is called."""

    def __init__(self, where: str, mapping: Mapping[str, Any]) -> None:
        self.where, self.left = where, dict(mapping)

    def take(self, key: str, default: Any = None) -> Any:
        return self.left.pop(key, default)

    def done(self) -> None:
        assert not self.left, f"{self.where}: {sorted(self.left)} not translated (tests/_kubernetes.py)"


def pod_run(pod: Manifest, objects: list[Manifest], secrets: Mapping[str, Mapping[str, str]], mounts: Path) -> PodRun:
    """The options of ``podman run`` for ``pod`` (a Deployment's ``spec.template.spec``) with one container: its
    ConfigMaps from ``objects``, its Secrets from ``secrets`` (made by the operator, never in the manifests), each
    volume's files written under ``mounts``."""
    spec = _Fields("spec.template.spec", pod)
    run = PodRun()
    if spec.take("hostUsers", True) is False:
        # A user namespace of the pod's own, 65536 uids as a kubelet maps a pod's, taken from the node's range for
        # them (podman: /etc/subuid's "containers"), its root none of the node's.
        run.options.append("--userns=auto:size=65536")
    assert spec.take("automountServiceAccountToken") is False, "a service account token: not emulated"
    assert spec.take("enableServiceLinks") is False, "the services' variables: not emulated"
    run.grace = spec.take("terminationGracePeriodSeconds", 30)
    volumes = {volume["name"]: volume for volume in spec.take("volumes", [])}
    [container] = spec.take("containers")
    spec.done()

    fields = _Fields("the container", container)
    fields.take("name")
    fields.take("image")  # the test's own build of it
    assert fields.take("imagePullPolicy") == "IfNotPresent"
    run.options.append("--pull=never")
    run.ports = {port["name"]: port["containerPort"] for port in fields.take("ports", [])}
    for variable in fields.take("env", []):
        run.options += ("--env", variable["name"])  # its value by name, from the environment podman is given
        if "value" in variable:
            run.environ[variable["name"]] = variable["value"]
            continue
        reference = variable["valueFrom"]["secretKeyRef"]
        run.environ[variable["name"]] = secrets[reference["name"]][reference["key"]]
    run.options += _security(_Fields("the container's securityContext", fields.take("securityContext", {})))
    run.options += _resources(_Fields("the container's resources", fields.take("resources", {})))
    for mount in fields.take("volumeMounts", []):
        run.options += _mount(mount, volumes.pop(mount["name"]), objects, secrets, mounts)
    assert not volumes, f"volumes not mounted: {sorted(volumes)}"
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if (probe := fields.take(kind)) is not None:
            run.probes[kind] = probe["httpGet"]["path"]
            assert run.ports[probe["httpGet"]["port"]]
    if (lifecycle := fields.take("lifecycle")) is not None:
        run.pre_stop = lifecycle.pop("preStop")["sleep"]["seconds"]
        assert not lifecycle, f"lifecycle: {sorted(lifecycle)} not translated"
    fields.done()
    return run


def _security(context: _Fields) -> Iterator[str]:
    assert context.take("privileged", False) is False
    capabilities = _Fields("capabilities", context.take("capabilities", {}))
    assert capabilities.take("drop") == ["ALL"]
    yield from ("--cap-drop", "all")
    for capability in capabilities.take("add", []):
        yield from ("--cap-add", capability)
    capabilities.done()
    profile = context.take("seccompProfile")
    assert profile["type"] == "Localhost"
    yield from ("--security-opt", f"seccomp={PROFILES[profile['localhostProfile']]}")
    if context.take("procMount", "Default") == "Unmasked":
        yield from ("--security-opt", "unmask=ALL")  # no path of /proc masked or read-only, as a kubelet's
    if context.take("readOnlyRootFilesystem", False):
        yield from ("--read-only", "--read-only-tmpfs=false")  # podman's own tmpfs on /tmp, /run: not a kubelet's
    context.done()


def _resources(resources: _Fields) -> Iterator[str]:
    resources.take("requests")  # the scheduler's: nothing on the node
    limits = _Fields("limits", resources.take("limits", {}))
    if (memory := limits.take("memory")) is not None:
        yield from ("--memory", str(quantity(memory)))
    if (cpu := limits.take("cpu")) is not None:
        yield from ("--cpus", str(int(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)))
    limits.done()
    resources.done()


def quantity(text: str) -> int:
    """Bytes of a Kubernetes quantity (``2Gi``)."""
    unit = text[-2:]
    return int(text[:-2]) * _UNITS[unit] if unit in _UNITS else int(text)


def _mount(
    mount: Manifest, volume: Manifest, objects: list[Manifest], secrets: Mapping[str, Mapping[str, str]], under: Path
) -> Iterator[str]:
    """A volume's mount: a ConfigMap's or a Secret's keys as files (read-only; podman's ``U`` gives them to the
    pod's root, as a kubelet's idmapped mount shows them), an emptyDir as a tmpfs of the pod's own."""
    point = _Fields(f"volumeMounts {mount['name']}", mount)
    point.take("name")
    target = point.take("mountPath")
    read_only = point.take("readOnly", False)
    point.done()
    source = _Fields(f"volume {volume['name']}", volume)
    source.take("name")
    if (empty := source.take("emptyDir")) is not None:
        empty = _Fields("emptyDir", empty)
        empty.take("medium")  # memory or the node's disk: a tmpfs here either way, the pod's own
        size = quantity(empty.take("sizeLimit"))
        empty.done()
        source.done()
        yield from ("--mount", f"type=tmpfs,destination={target},tmpfs-size={size},tmpfs-mode=0755")
        return
    files: Mapping[str, str]
    if (config := source.take("configMap")) is not None:
        files, mode = named(objects, "ConfigMap", config.pop("name"))["data"], config.pop("defaultMode", 0o644)
        assert not config, f"configMap: {sorted(config)} not translated"
    else:
        secret = dict(source.take("secret"))
        given = secrets.get(secret.pop("secretName"))
        assert given is not None or secret.pop("optional", False), "a Secret the pod needs is not given"
        files, mode = given or {}, secret.pop("defaultMode", 0o644)
        secret.pop("optional", None)
        assert not secret, f"secret: {sorted(secret)} not translated"
    source.done()
    assert read_only, f"{target}: a ConfigMap or a Secret, read-only"
    directory = under / volume["name"]
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text)
        os.chmod(directory / name, mode)
    yield from ("--volume", f"{directory}:{target}:ro,U")
