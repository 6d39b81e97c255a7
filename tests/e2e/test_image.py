"""The gateway's image (``deploy/Containerfile``) as ``scripts/image.sh`` builds it and podman runs it: the team's
file mounted at ``/etc/mcp-sessions/gateway.toml``, a stdio server (the tests' ``_plain_stdio.py``, mounted) behind
it, its port published on loopback, its health check, a tool called through it by the ``mcp`` SDK's client, and
``podman stop`` ending it cleanly.

The build is podman's: its layer cache makes a second build of the same checkout a few seconds' work (the wheels
are made again, the same bytes, and every step is cached); the base, Debian's packages under debootstrap, is made
once (as root) and kept in podman's store.

deploy/kubernetes/'s pod runs from the same image, with what its manifests declare (tests/_kubernetes.py), sealed,
and refused in one line without each thing it is given.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import ipaddress
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import mcp_sessions
from _kubernetes import Manifest, PodRun, named, pod_run, rendered
from _mcp import MODERN, create_session, sdk_meta, sdk_session_meta
from _redis import free_port, missing, only_skips
from _waits import until
from conftest import SECRET
from e2e._stdio import text_of

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
# The tests' servers, each mounted under /srv/mcp/ by its name here.
SERVERS = {
    Path(__file__).with_name("_plain_stdio.py"): "server.py",
    Path(__file__).with_name("_hostile_stdio.py"): "hostile.py",
}
# podman's default limits (1048576 open files; the host's process count) are above what some hosts let a container
# raise its own to ("error setting rlimit ...: operation not permitted"): this process's open files, and podman
# build's own default for processes.
_, FILES = resource.getrlimit(resource.RLIMIT_NOFILE)
LIMITS = ("--ulimit", f"nofile={FILES}:{FILES}", "--ulimit", "nproc=32768:32768")
CONFIG = """\
[gateway]
host = "0.0.0.0"
port = 8000
accept-root-processes = true

[servers.plain]
command = "python3"
args = ["/srv/mcp/server.py"]
"""


def podman(*arguments: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *arguments], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def image() -> str:
    """The image of this checkout, built (or found in podman's cache) by scripts/image.sh: its tag, this checkout's
    own, so that two clones on one host build theirs side by side."""
    __tracebackhide__ = only_skips
    if shutil.which("podman") is None:
        missing("podman is not installed: scripts/system-deps.sh --all installs it (with runc and debootstrap)")
    tag = "localhost/mcp-sessions:test-" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    environ = {**os.environ, "PYTHON": sys.executable}
    built = subprocess.run(
        [str(ROOT / "scripts" / "image.sh"), tag], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=1200
    )
    assert built.returncode == 0, f"scripts/image.sh failed ({built.returncode}):\n{built.stdout}\n{built.stderr}"
    return tag


@pytest.fixture(scope="module")
def redis_image(image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """components/redis's stand-in: its image is a registry's (docker.io/library/redis), which the tests do not
    reach, so Debian's redis-server on the gateway's image (a few seconds, once: podman's cache keeps it)."""
    tag = image.replace("localhost/mcp-sessions:", "localhost/mcp-sessions-redis:")
    context = tmp_path_factory.mktemp("redis")  # empty: the file is all it builds from
    containerfile = f"FROM {image}\nRUN apt-get update && apt-get install -y --no-install-recommends redis-server\n"
    built = subprocess.run(
        ["podman", "build", "--ulimit", LIMITS[1], "--network", "host", "--tag", tag, "--file", "-", str(context)],
        input=containerfile,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, f"{built.stdout}\n{built.stderr}"
    return tag


@contextlib.contextmanager
def running(image: str, directory: Path, config: str, *options: str) -> Iterator[tuple[str, int]]:
    """The image run with ``config`` and the tests' servers mounted, its port published on 127.0.0.1, given podman's
    ``options``: its name and port."""
    (directory / "gateway.toml").write_text(config)
    for server, mounted in SERVERS.items():
        shutil.copy(server, directory / mounted)
    mounts = [
        *("--volume", f"{directory / 'gateway.toml'}:/etc/mcp-sessions/gateway.toml:ro"),
        *(
            item
            for mounted in SERVERS.values()
            for item in ("--volume", f"{directory / mounted}:/srv/mcp/{mounted}:ro")
        ),
    ]
    secret = {"MCP_SESSIONS_SECRET": SECRET}
    with detached(image, [*options, "--env", "MCP_SESSIONS_SECRET", *mounts], secret) as (name, port):
        until(
            lambda: healthy(name, port), lambda: f"no /healthz:\n{logs(name)}", within=60, ignoring=(httpx.HTTPError,)
        )
        yield name, port


@contextlib.contextmanager
def detached(
    image: str, options: list[str], environ: dict[str, str], serves: int = 8000, command: Sequence[str] = ()
) -> Iterator[tuple[str, int]]:
    """The image run detached with podman's ``options`` (and ``command``), given ``environ`` by name (never on a
    command line), its port ``serves`` published on 127.0.0.1: its name and that port; removed at the end."""
    port = free_port()
    name = f"mcp-sessions-test-{os.getpid()}-{port}"
    run = subprocess.run(
        [
            *("podman", "run", "--detach", "--name", name, *LIMITS, *options),
            *("--publish", f"127.0.0.1:{port}:{serves}", image, *command),
        ],
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    try:
        yield name, port
    finally:
        podman("rm", "--force", "--time", "0", name)


def logs(name: str) -> str:
    said = podman("logs", name)
    return said.stdout + said.stderr


def healthy(name: str, port: int, path: str = "/healthz") -> bool:
    state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
    assert state == "running", f"the container is {state}:\n{logs(name)}"
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).status_code == 200


@pytest.mark.timeout(1500)  # a cold build: the base (debootstrap) and every layer, about 3 minutes here
async def test_the_image_serves_a_stdio_server_and_stops_cleanly(image: str, tmp_path: Path) -> None:
    with running(image, tmp_path, CONFIG) as (name, port):
        checked = podman("healthcheck", "run", name)
        assert checked.returncode == 0, f"the image's HEALTHCHECK: {checked.stdout}{checked.stderr}"

        async with Client(f"http://127.0.0.1:{port}/servers/plain/mcp") as client:
            assert client.server_info is not None
            assert client.server_info.name == "stdio-test-server"
            answer = json.loads(text_of(await client.call_tool("whoami", {})))
        assert answer["leaked"] == []  # the gateway had MCP_SESSIONS_SECRET; its server's process does not

        stopped = podman("stop", "--time", "30", name)
        assert stopped.returncode == 0, stopped.stderr
        assert podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0", logs(name)
        said = logs(name)
        assert "Application shutdown complete." in said
        assert "PID 1 without an init" not in said, said  # tini is PID 1, and reaps


def test_the_image_says_what_it_is(image: str) -> None:
    [inspected] = json.loads(podman("image", "inspect", image).stdout)
    labels = inspected["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == mcp_sessions.__version__
    assert labels["org.opencontainers.image.licenses"] == "MIT AND Apache-2.0"
    assert "http://127.0.0.1:8000/healthz" in " ".join(inspected["Healthcheck"]["Test"])
    entrypoint = inspected["Config"]["Entrypoint"]
    assert entrypoint[-4:] == ["mcp-sessions", "gateway", "--config", "/etc/mcp-sessions/gateway.toml"]
    # No build tools: pip left the environment, and no compiler came with the packages.
    unbuilt = podman("run", "--rm", *LIMITS, "--entrypoint", "sh", image, "-c", "command -v pip pip3 gcc cc make")
    assert unbuilt.stdout == "", unbuilt.stdout


# A pod with a user namespace of its own (Kubernetes' hostUsers: false; podman --userns=auto), as the kubelet maps
# one: its root is host uid 420000, its 65536 uids unprivileged host uids. The gateway gets only capabilities of that
# namespace, the ones it needs (docs/deployment.md), the project's seccomp profile (Docker's, with pivot_root under
# CAP_SYS_ADMIN), and /proc/sys as its network namespace's own sysctls, writable (each veth's forwarding).
SEALED = (
    *("--uidmap", "0:420000:65536", "--gidmap", "0:420000:65536"),
    *("--cap-drop", "all", "--cap-add", "SETUID,SETGID,CHOWN,SYS_ADMIN,NET_ADMIN"),
    *("--security-opt", f"seccomp={ROOT / 'deploy' / 'seccomp.json'}", "--security-opt", "unmask=/proc/sys"),
)
# The tests' servers, mounted in UNDER: one a process per conversation, one that tries where it should not.
SEALED_SERVERS = """
[servers.plain]
command = "python3"
args = ["UNDER/server.py"]
processes = "per-conversation"

[servers.hostile]
command = "python3"
args = ["UNDER/hostile.py"]
"""
SEALED_CONFIG = """\
[gateway]
host = "0.0.0.0"
port = 8000
process-uids = "61000-61999"
""" + SEALED_SERVERS.replace("UNDER", "/srv/mcp")


async def sealed(name: str, port: int) -> dict[int, int]:
    """The sealed gateway's processes, each its own uid from process-uids (two conversations' and the shared one), the
    pod's loopback and address refused to them: their uids in the container, each with its host uid."""
    said = logs(name)
    assert "plain: each process: containment bwrap (auto), a uid each" in said, said
    assert "a veth pair each" in said, said
    base = f"http://127.0.0.1:{port}/servers"
    async with Client(f"{base}/plain/mcp") as client:
        for session in (await create_session(client), await create_session(client)):
            await client.call_tool("whoami", {}, meta=sdk_session_meta(session))
        top = podman("top", name, "huser", "user", "comm").stdout.splitlines()
    # "?": a process podman listed and could not read then (one that ended meanwhile, a warm one replaced)
    servers = [line.split() for line in top if line.endswith("python3") and "?" not in line.split()]
    uids = {int(user): int(host) for host, user, _ in servers}
    assert len(uids) == len(servers) >= 2, top  # a uid each: the shared process's and each conversation's
    assert all(61000 <= uid <= 61999 for uid in uids), top

    pod = podman("inspect", "--format", "{{.NetworkSettings.IPAddress}}", name).stdout.strip()
    async with Client(f"{base}/hostile/mcp") as client:
        for host in ("127.0.0.1", pod):  # where the gateway listens: the pod's loopback, the pod's address
            answer = text_of(await client.call_tool("connect", {"host": host, "port": 8000}))
            assert answer != "connected", f"{host}: {answer}"
    return uids


def stopped_cleanly(name: str, seconds: int) -> None:
    stopped = podman("stop", "--time", str(seconds), name, timeout=seconds + 30)
    assert stopped.returncode == 0, stopped.stderr
    assert podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0", logs(name)


async def test_each_process_is_sealed_in_a_user_namespace_without_privilege(image: str, tmp_path: Path) -> None:
    with running(image, tmp_path, SEALED_CONFIG, *SEALED) as (name, port):
        uids = await sealed(name, port)
        assert all(host == 420000 + uid for uid, host in uids.items()), uids  # unprivileged uids of the host
        stopped_cleanly(name, 30)  # no CAP_KILL given: every process still ends


def test_the_gateways_seccomp_profile_is_dockers_with_pivot_root() -> None:
    """deploy/seccomp.json, as scripts/seccomp-profile.sh derives it: the contained processes' profile (Docker's),
    with pivot_root where CAP_SYS_ADMIN is granted, and nothing else."""
    dockers = json.loads((ROOT / "middleware/mcp_sessions/_gateway/sealed/seccomp.json").read_text())
    gateways = json.loads((ROOT / "deploy/seccomp.json").read_text())
    [admin] = [rule for rule in gateways["syscalls"] if "pivot_root" in rule["names"]]
    assert admin["includes"] == {"caps": ["CAP_SYS_ADMIN"]}
    admin["names"].remove("pivot_root")
    assert gateways == dockers


# deploy/kubernetes/'s gateway pod, run by podman with what its manifests declare and nothing else (tests/_kubernetes.py
# translates each field, and fails on one it does not): the team's file is the ConfigMap's, here with the tests'
# servers beside it, as an overlay's configMapGenerator would give them; the Secret is the operator's.
POD_SECRETS = {
    "mcp-sessions-gateway": {
        "MCP_SESSIONS_SECRET": SECRET,
        "MCP_SESSIONS_STORE": "sqlite:///var/lib/mcp-sessions/sessions.db",  # the pod's state volume: one replica
    }
}
# The first uid of /etc/subuid's "containers" range (scripts/system-deps.sh --all), whence --userns=auto maps pods.
CONTAINERS_RANGE = 1073741824


def with_the_tests_servers(objects: list[Manifest], **gateway: str) -> list[Manifest]:
    """``objects``, the ConfigMap's file given the tests' servers (and ``gateway``'s keys)."""
    data = named(objects, "ConfigMap")["data"]
    file = [
        line for line in data["gateway.toml"].split("\n[servers.")[0].splitlines() if line.split(" =")[0] not in gateway
    ]
    own = [f"{key} = {json.dumps(value)}" for key, value in gateway.items()]
    data["gateway.toml"] = "\n".join([*file, *own, SEALED_SERVERS.replace("UNDER", "/etc/mcp-sessions")])
    for server, mounted in SERVERS.items():
        data[mounted] = server.read_text()
    return objects


def the_pod(**gateway: str) -> dict[str, Any]:
    """deploy/kubernetes/'s objects, the ConfigMap's file given the tests' servers (and ``gateway``'s keys)."""
    objects = with_the_tests_servers(rendered(), **gateway)
    return {"objects": objects, "pod": named(objects, "Deployment")["spec"]["template"]["spec"]}


@contextlib.contextmanager
def pod_started(image: str, directory: Path, pod: dict[str, Any], *network: str) -> Iterator[tuple[str, int, PodRun]]:
    """The pod's container started as its manifests say (on podman's ``network`` options): its name, its published
    port and how it runs."""
    run = pod_run(pod["pod"], pod["objects"], POD_SECRETS, directory)
    with detached(image, [*run.options, *network], run.environ, run.ports["http"]) as (name, port):
        yield name, port, run


@pytest.mark.timeout(1500)
async def test_the_manifests_pod_runs_sealed_with_what_it_declares(image: str, tmp_path: Path) -> None:
    with pod_started(image, tmp_path, the_pod()) as (name, port, run):
        assert run.probes == {"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
        for path in run.probes.values():  # the startup probe's first: the others once it answers
            until(
                functools.partial(healthy, name, port, path),
                functools.partial(logs, name),
                within=60,
                ignoring=(httpx.HTTPError,),
            )
        # No control group of its own here (cgroup v1, read-only in a container): the pod's limit bounds them.
        limit = run.options[run.options.index("--memory") + 1]
        said = f"bounds the gateway's own cgroup's, together (memory {int(limit) >> 20} MiB; cpu 2; pids "
        assert said in logs(name), logs(name)
        uids = await sealed(name, port)
        [offset] = {host - uid for uid, host in uids.items()}
        assert offset >= CONTAINERS_RANGE, uids  # --userns=auto's: unprivileged uids of the host, none a user's
        stopped_cleanly(name, run.grace - run.pre_stop)  # the kubelet's: preStop, SIGTERM, SIGKILL at the grace


def without_mount(pod: dict[str, Any], volume: str) -> dict[str, Any]:
    spec = pod["pod"]
    [container] = spec["containers"]
    container["volumeMounts"] = [mount for mount in container["volumeMounts"] if mount["name"] != volume]
    spec["volumes"] = [each for each in spec["volumes"] if each["name"] != volume]
    return pod


def without_capability(pod: dict[str, Any], capability: str) -> dict[str, Any]:
    [container] = pod["pod"]["containers"]
    container["securityContext"]["capabilities"]["add"].remove(capability)
    return pod


# What the pod is given, taken away one at a time: the gateway refuses to start, in one line saying what to give.
REFUSALS = {
    **{
        capability: (
            functools.partial(without_capability, the_pod(), capability),
            f"lacks {capability}: give them (podman run --cap-add {capability}; Kubernetes: the container's "
            "securityContext.capabilities.add)",
        )
        for capability in ("SETUID", "SETGID", "CHOWN", "SYS_ADMIN", "NET_ADMIN")
    },
    "runtime directory": (
        functools.partial(without_mount, the_pod(), "runtime"),
        "the runtime directory /run/mcp-sessions: Read-only file system: give one the gateway's user (uid 0) may write",
    ),
    "uids unmapped": (
        functools.partial(the_pod, **{"process-uids": "70000-70999"}),
        "--process-uids 70000-70999: the gateway's user namespace maps the ids 0-65535 alone: give a range inside them",
    ),
}


@pytest.mark.parametrize("taken", REFUSALS)
def test_the_pod_without_what_it_declares_is_refused_in_one_line(image: str, tmp_path: Path, taken: str) -> None:
    pod, said = REFUSALS[taken]
    with pod_started(image, tmp_path, pod()) as (name, _, _):
        ended = podman("wait", name, timeout=120)
        assert ended.stdout.strip() == "2", logs(name)
        refused = [line for line in logs(name).splitlines() if line.startswith("mcp-sessions gateway: ")]
        assert len(refused) == 1 and said in refused[0], logs(name)
        assert "Traceback" not in logs(name)


# deploy/kubernetes/ with components/front: the replicas a StatefulSet, each named by its headless Service, the front
# the base's Deployment with one upstream per replica. Each pod runs as its manifests say, on one podman network in
# the pod network the replicas trust (podman's DNS gives each replica its Service's name, as a cluster's does).
def the_front() -> list[Manifest]:
    """The objects with components/redis and components/front: the replicas' file given the tests' servers, the
    front's its ``plain`` at the replicas' names its ``memory`` has."""
    objects = with_the_tests_servers(rendered(components=("redis", "front")))
    # The tests' conversations are one caller's (the client's address, as the front forwards it), whom a replica
    # allows 8 processes at once: fewer than a run may place on one replica, by chance, before the other has one.
    replicas = named(objects, "ConfigMap")["data"]
    replicas["gateway.toml"] = replicas["gateway.toml"].replace(
        "[servers.plain]\n", "[servers.plain]\nmax-processes-per-principal = 64\n"
    )
    data = named(objects, "ConfigMap", "mcp-sessions-front")["data"]
    urls = [
        url.replace("/memory/", "/plain/") for url in tomllib.loads(data["gateway.toml"])["servers"]["memory"]["url"]
    ]
    data["gateway.toml"] = (
        data["gateway.toml"].split("\n[servers.")[0] + f"\n[servers.plain]\nurl = {json.dumps(urls)}\n"
    )
    return objects


@contextlib.contextmanager
def pod_network(trusted: str) -> Iterator[str]:
    """A podman network whose addresses are a /24 of ``trusted`` (the replicas' FORWARDED_ALLOW_IPS) no other
    network of the host has: its name."""
    name = f"mcp-sessions-test-{os.getpid()}-pods"
    subnets = itertools.islice(ipaddress.ip_network(trusted).subnets(new_prefix=24), 64)
    made = next(
        (each for each in subnets if podman("network", "create", "--subnet", str(each), name).returncode == 0), None
    )
    assert made is not None, f"no /24 of {trusted} is free for a podman network"
    try:
        yield name
    finally:
        podman("network", "rm", "--force", name)


class RoundRobin(httpx2.AsyncBaseTransport):
    """A balancer with no affinity: each request to the next of ``ports`` (the replicas', on loopback)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = itertools.cycle(ports)
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(port=next(self.ports))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


# The conversations a front keeps on one replica: the SDK's 2026-07-28 client in a data-layer session, the same
# client naming a host's conversation in _meta (which the replicas believe from the front alone), and its 2025-11-25
# client in a transport session.
CONVERSATIONS = ("data-layer session", "host conversation", "transport session")
REFUSED = "refused:"


async def conversation(url: str, kind: str, http: httpx2.AsyncClient | None = None) -> list[str]:
    """One conversation of ``kind`` calling ``whoami`` three times (the SDK's client asks for the tools once, after
    the first call, so that a balancer that sends each request to the next replica sends the last two apart): the
    process that answered each call (its MCP_SESSION_ID), or the error that refused it."""
    mode = "legacy" if kind == "transport session" else MODERN
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        meta = None  # a transport session's calls name nothing: its Mcp-Session-Id does
        if kind == "data-layer session":
            meta = sdk_session_meta(await create_session(client))
        elif kind == "host conversation":
            meta = sdk_meta({"vscode.conversationId": f"chat-{uuid.uuid4().hex}"})
        answers: list[str] = []
        for _ in range(3):
            try:
                answers.append(json.loads(text_of(await client.call_tool("whoami", {}, meta=meta)))["session"])
            except MCPError as refused:
                answers.append(f"{REFUSED} {refused.error.code} {refused.error.message}")
        return answers


def kept(answers: list[str]) -> bool:
    """Each call of the conversation answered, by one process."""
    return len(set(answers)) == 1 and not answers[0].startswith(REFUSED)


@pytest.mark.timeout(1500)
async def test_the_front_keeps_each_conversation_on_its_replica(image: str, redis_image: str, tmp_path: Path) -> None:
    objects = the_front()
    replicas = named(objects, "StatefulSet", "mcp-sessions-replica")
    replica_pod = {"objects": objects, "pod": replicas["spec"]["template"]["spec"]}
    front_pod = {"objects": objects, "pod": named(objects, "Deployment")["spec"]["template"]["spec"]}
    [replica_container] = replica_pod["pod"]["containers"]
    trusted = {each["name"]: each.get("value") for each in replica_container["env"]}["FORWARDED_ALLOW_IPS"]
    with contextlib.ExitStack() as stack:
        network = stack.enter_context(pod_network(trusted))
        # The store the front and the replicas share, by its Service's name, with the component's arguments (and
        # the official image's protected-mode off: it answers other addresses than its loopback without a password).
        [redis] = named(objects, "Deployment", "mcp-sessions-redis")["spec"]["template"]["spec"]["containers"]
        service = named(objects, "Service", "mcp-sessions-redis")["metadata"]["name"]
        store = ["--network", network, "--network-alias", service, "--entrypoint", "redis-server"]
        serves = redis["ports"][0]["containerPort"]
        arguments = (*redis["args"], "--protected-mode", "no")
        redis_name, _ = stack.enter_context(detached(redis_image, store, {}, serves, arguments))
        until(
            lambda: podman("exec", redis_name, *redis["readinessProbe"]["exec"]["command"]).returncode == 0,
            functools.partial(logs, redis_name),
        )
        pods: dict[str, tuple[str, int, PodRun]] = {}
        for ordinal in range(replicas["spec"]["replicas"]):
            pod = f"{replicas['metadata']['name']}-{ordinal}"  # its name, and its Service's name for it
            (tmp_path / pod).mkdir()
            named_so = (
                "--network",
                network,
                "--hostname",
                pod,
                "--network-alias",
                f"{pod}.{replicas['spec']['serviceName']}",
            )
            pods[pod] = stack.enter_context(pod_started(image, tmp_path / pod, replica_pod, *named_so))
        (tmp_path / "front").mkdir()
        front, port, run = stack.enter_context(pod_started(image, tmp_path / "front", front_pod, "--network", network))
        for name, published, _ in (*pods.values(), (front, port, run)):
            until(
                functools.partial(healthy, name, published, "/readyz"),
                functools.partial(logs, name),
                within=60,
                ignoring=(httpx.HTTPError,),
            )
        for name, _, _ in (*pods.values(), (front, port, run)):  # one store, the Redis
            assert "their data and users' sign-ins kept in RedisStore(" in logs(name), logs(name)
        # The front starts with no capability at all: its every process's effective set is empty.
        assert "--cap-add" not in run.options, run.options
        top = podman("top", front, "capeff", "args").stdout.splitlines()[1:]
        assert top and all(line.split()[0] == "none" for line in top), top

        url = f"http://127.0.0.1:{port}/servers/plain/mcp"
        for kind in CONVERSATIONS:
            served: dict[str, list[str]] = {pod: [] for pod in pods}
            for _ in range(12):  # until both replicas serve one: each conversation placed by a hash of its id
                answers = await conversation(url, kind)
                assert kept(answers), f"{kind}: {answers}"
                [replica] = [pod for pod, (name, _, _) in pods.items() if f"process {answers[0]}: " in logs(name)]
                served[replica].append(answers[0])
                if all(served.values()):
                    break
            processes = [each for on_one in served.values() for each in on_one]
            assert all(served.values()), f"{kind}: {served}"
            assert len(set(processes)) == len(processes), f"{kind}: {served}"  # a process each, none shared

        # Without the front, behind a balancer with no affinity, no conversation keeps its process.
        async with httpx2.AsyncClient(transport=RoundRobin([published for _, published, _ in pods.values()])) as http:
            for kind in CONVERSATIONS:
                answers = await conversation(url, kind, http)
                assert not kept(answers), f"{kind}: {answers}"
