"""``deploy/kubernetes/`` as ``kubectl apply -k`` reads it, and its gateway's pod as podman runs it.

:func:`rendered` reads the kustomization's resources and makes its ConfigMap, and applies the components it is given
(their resources, ConfigMaps, patches and replacements), as kustomize does for the keys the directory uses (and refuses
any other). :func:`pod_run` turns a Deployment's or a StatefulSet's pod into a ``podman run``'s options,
field by field, as a kubelet with user namespaces would set the container up: a field it does not translate fails
the test, so that what the manifests grant is exactly what the tests run (``tests/e2e/test_image.py``).
"""

from __future__ import annotations

import copy
import os
import re
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
_COMPONENT = {"apiVersion", "kind", "resources", "components", "configMapGenerator", "patches", "replacements"}
_WORKLOADS = ("Deployment", "StatefulSet")
# The key a list's items merge by in a strategic merge patch (Kubernetes' patchMergeKey), where it is not their name.
_MERGE_KEYS = {"volumeMounts": "mountPath"}
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}

Manifest = dict[str, Any]


def rendered(directory: Path = MANIFESTS, components: tuple[str, ...] = ()) -> list[Manifest]:
    """The objects ``kubectl apply -k`` applies of an overlay of ``directory`` naming ``components`` (in order, each
    under ``directory/components/``); a generated ConfigMap under its own name, without kustomize's hash of its
    content."""
    kustomization = _kustomization(directory, _KUSTOMIZATION)
    objects = _accumulated(directory, kustomization)
    images = {image["name"]: f"{image['newName']}:{image['newTag']}" for image in kustomization.get("images", ())}
    for container in (
        c for o in objects if o["kind"] in _WORKLOADS for c in o["spec"]["template"]["spec"]["containers"]
    ):
        container["image"] = images.get(container["image"], container["image"])
    for component in components:
        _component(directory / "components" / component, objects)
    return objects


def _kustomization(directory: Path, keys: set[str]) -> Manifest:
    kustomization: Manifest = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - keys
    assert not unknown, f"{directory}: {sorted(unknown)} not read here (tests/_kubernetes.py)"
    return kustomization


def _accumulated(directory: Path, kustomization: Manifest) -> list[Manifest]:
    """A kustomization's resources, and the ConfigMaps it generates."""
    objects = [
        document
        for resource in kustomization.get("resources", ())
        for document in yaml.safe_load_all((directory / resource).read_text())
    ]
    for generator in kustomization.get("configMapGenerator", ()):
        files = (name.rpartition("=") for name in generator["files"])  # KEY=FILE, else FILE under its own name
        data = {key or Path(path).name: (directory / path).read_text() for key, _, path in files}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    return objects


def _component(directory: Path, objects: list[Manifest]) -> None:
    """A component applied to ``objects`` in kustomize's order: its resources, its own components, then its
    patches (strategic merge), then its replacements."""
    component = _kustomization(directory, _COMPONENT)
    objects += _accumulated(directory, component)
    for nested in component.get("components", ()):
        _component(directory / nested, objects)
    for patch in component.get("patches", ()):
        text = (directory / patch["path"]).read_text() if "path" in patch else patch["patch"]
        change = yaml.safe_load(text)
        target = patch.get("target") or {"kind": change["kind"], "name": change["metadata"]["name"]}
        chosen = [o for o in objects if _selected(o, target)]
        assert chosen, f"{directory}: no object for the patch {target}"
        for found in chosen:
            _merge(
                found, {key: value for key, value in change.items() if key not in ("apiVersion", "kind", "metadata")}
            )
    for replacement in component.get("replacements", ()):
        [source] = [o for o in objects if _selected(o, replacement["source"])]
        value = _field(source, replacement["source"]["fieldPath"])
        for target in replacement["targets"]:
            for found in (o for o in objects if _selected(o, target["select"])):
                for path in target["fieldPaths"]:
                    *parents, last = path.split(".")
                    _field(found, ".".join(parents))[last] = copy.deepcopy(value)


def _selected(found: Manifest, selector: Mapping[str, str]) -> bool:
    """A patch's target or a replacement's selector: its kind and name as regular expressions, kustomize's."""
    unknown = set(selector) - {"kind", "name", "fieldPath"}
    assert not unknown, f"a selector's {sorted(unknown)} not read here (tests/_kubernetes.py)"
    name = found["metadata"]["name"]
    return bool(re.fullmatch(selector["kind"], found["kind"]) and re.fullmatch(selector["name"], name))


def _field(found: Manifest, path: str) -> Any:
    for key in path.split(".") if path else ():
        found = found[key]
    return found


def _merge(into: Manifest, patch: Mapping[str, Any]) -> None:
    """A strategic merge patch, as far as the components use one: a mapping merges key by key (``null`` deletes a
    key), a list of items with a merge key item by item (``$patch: delete`` deletes one), any other list is
    replaced."""
    for key, value in patch.items():
        merge_key = _MERGE_KEYS.get(key, "name")
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and value and all(isinstance(item, dict) and merge_key in item for item in value):
            items = {item[merge_key]: item for item in into.setdefault(key, [])}
            for item in value:
                if item.get("$patch") == "delete":
                    into[key].remove(items[item[merge_key]])
                elif item[merge_key] in items:
                    _merge(items[item[merge_key]], item)
                else:
                    into[key].append(copy.deepcopy(item))
        else:
            into[key] = copy.deepcopy(value)


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
    """The options of ``podman run`` for ``pod`` (a workload's ``spec.template.spec``) with one container: its
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
    if lifecycle := dict(fields.take("lifecycle", {})):  # a copy: a pod spec may run twice (a StatefulSet's)
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
    if profile["type"] == "Localhost":
        yield from ("--security-opt", f"seccomp={PROFILES[profile['localhostProfile']]}")
    else:  # the runtime's own profile, podman's by default as a kubelet's runtime's
        assert profile == {"type": "RuntimeDefault"}, profile
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
    if config := dict(source.take("configMap", {})):
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
