"""What of the network a stdio server process reaches (``--process-network``), by the kernel's own rules.

``host``: the host's network, as the gateway has it. ``none``: a network namespace of its own, with no interface
but its own loopback (``_sandbox``). ``egress``: the world, but not this host (its loopback and every address of
its own: nftables' ``fib daddr type local``), not the link (link-local, multicast, broadcast: the cloud's metadata
address, mDNS, DHCP) and not the private ranges, unless ``--process-allow-net`` names them: rules on the
processes' uids (``meta skuid``) in a table of the gateway's own, ``inet mcp_sessions_<pid>``, made in one
``nft -f -`` transaction as it starts and deleted as it stops; the table of a gateway that was killed
(SIGKILL) is deleted by the next one to start. The rules' text is built from parsed values alone (an
``ipaddress`` network, a port number, uids), never from what the operator typed.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

NETWORKS: Final = ("host", "none", "egress")
TABLE_PREFIX: Final = "mcp_sessions_"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
REFUSED: Final = {
    "link-local, multicast and broadcast (the cloud's metadata address, mDNS, DHCP)": (
        "169.254.0.0/16",
        "224.0.0.0/4",
        "255.255.255.255/32",
        "fe80::/10",
        "ff00::/8",
    ),
    # 0.0.0.0/8 is "this network": Linux sends a connection to 0.0.0.0 to this host.
    "private ranges": ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"),
}
"""What an ``egress`` process may not reach besides this host, by why."""
LOOPBACK: Final = tuple(ipaddress.ip_network(net) for net in ("127.0.0.0/8", "::1/128", "::ffff:127.0.0.0/104"))


def add_network_arguments(gateway: argparse.ArgumentParser) -> None:
    """``gateway``'s ``--process-network`` and ``--process-allow-net`` (:func:`egress_rules` checks them)."""
    gateway.add_argument(
        "--process-network",
        choices=NETWORKS,
        help="with --stdio: 'host': the host's network, as the gateway has it; 'none': a network "
        "namespace of its own, nothing to reach; 'egress': the world, but not this host, its link "
        "or the private ranges (nftables rules on the processes' uids: --process-uids or "
        "--process-user). Default: egress with --process-uids, else host",
    )
    gateway.add_argument(
        "--process-allow-net",
        action="append",
        default=[],
        metavar="CIDR[:PORT]",
        help="with --process-network egress: a network (and a port, tcp and udp) the processes "
        "reach all the same, of this host (127.0.0.53:53, a resolver on loopback) or a private "
        "range ([::1]:PORT for IPv6); repeat",
    )


def egress_rules(
    network: str, uids: int | tuple[int, int] | None, allow: Sequence[str], trusted: Sequence[str], port: int
) -> EgressRules | None:
    """The rules for processes of ``uids`` (a range, or one) under ``egress``, with the exceptions ``allow``
    (``--process-allow-net``); None for ``host`` and ``none``. Whatever the network, no process may pass for a
    proxy the gateway ``trusted`` (``--forwarded-allow-ips``) and that listens on ``port``: under ``host``, a
    trusted address it could connect from is refused (``ValueError``); under ``egress``, an exception that
    reaches the gateway's port from one."""
    allowed = [Allowed.parsed(given) for given in allow]
    if allowed and network != "egress":
        raise ValueError(f"--process-allow-net makes exceptions to --process-network egress, not to {network}")
    local = local_addresses() if trusted and network != "none" else []
    front = trusts_a_local_peer(trusted, local)
    if network == "host" and front is not None:
        raise ValueError(
            f"--forwarded-allow-ips {front}: processes on the host's network (--process-network "
            "host) connect from that address and would pass for the proxy: give --process-uids "
            "(egress), or --process-network none"
        )
    if network != "egress":
        return None
    if uids is None or uids == os.geteuid():
        raise ValueError(
            "--process-network egress is the kernel's rules on the processes' own uid: give "
            "--process-uids FIRST-LAST, or a --process-user other than the gateway's"
        )
    for given, each in zip(allow, allowed, strict=True):
        if front is not None and each.reaches(local, port):
            raise ValueError(f"--process-allow-net {given}: the gateway's own port, from {front}, which it trusts")
    first, last = uids if isinstance(uids, tuple) else (uids, uids)
    return EgressRules(first, last, tuple(allowed))


class NetworkError(Exception):
    """A ``--process-network`` this host cannot give: the message says why, in one line."""


@dataclass(frozen=True)
class Allowed:
    """One ``--process-allow-net CIDR[:PORT]``: a network, and a port (tcp and udp) or every port and protocol."""

    network: IPNetwork
    port: int | None = None

    @classmethod
    def parsed(cls, given: str) -> Allowed:
        """``10.0.0.0/8``, ``10.1.2.3:5432``, ``fd00::/8``, ``[::1]:8080``; ``ValueError``, in one line, else."""
        text, port = given.strip(), None
        if text.startswith("["):
            text, bracket, rest = text[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                text = ""
            port = rest[1:] if rest else None
        elif text.count(":") == 1:
            text, _, port = text.partition(":")
        try:
            network = ipaddress.ip_network(text)
        except ValueError as exc:
            raise ValueError(
                f"--process-allow-net takes CIDR[:PORT] (10.0.0.0/8, 127.0.0.1:6379, [::1]:8080): {given!r}: {exc}"
            ) from None
        if port is None:
            return cls(network)
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"--process-allow-net: {given!r}: a port is a number from 1 to 65535")
        return cls(network, int(port))

    def rule(self, who: str) -> str:
        family = "ip" if self.network.version == 4 else "ip6"
        port = "" if self.port is None else f" meta l4proto {{ tcp, udp }} th dport {self.port}"
        return f'{who} {family} daddr {self.network}{port} accept comment "--process-allow-net"'

    def reaches(self, addresses: Iterable[IPNetwork], port: int) -> bool:
        """Whether it lets a process reach ``port`` on one of ``addresses``."""
        return (self.port is None or self.port == port) and _overlap([self.network], addresses)


@dataclass(frozen=True)
class EgressRules:
    """The ``egress`` table of the gateway whose pid is ``pid``: for uids ``first`` to ``last``, ``allowed`` first."""

    first: int
    last: int
    allowed: tuple[Allowed, ...] = ()
    pid: int = field(default_factory=os.getpid)

    @property
    def table(self) -> str:
        return f"{TABLE_PREFIX}{self.pid}"

    def text(self) -> str:
        """The table, as ``nft -f`` reads it."""
        who = f"meta skuid {self.first}" if self.first == self.last else f"meta skuid {self.first}-{self.last}"
        rules = [allowed.rule(who) for allowed in self.allowed]
        rules.append(f'{who} fib daddr type local reject comment "this host"')
        for why, listed in REFUSED.items():
            for family, version in (("ip", 4), ("ip6", 6)):
                nets = [str(net) for net in map(ipaddress.ip_network, listed) if net.version == version]
                rules.append(f'{who} {family} daddr {{ {", ".join(nets)} }} reject comment "{why}"')
        lines = [
            f"table inet {self.table} {{",
            "  chain output {",
            "    type filter hook output priority 0; policy accept;",
            *(f"    {rule}" for rule in rules),
            "  }",
            "}",
        ]
        return "\n".join(lines) + "\n"

    def install(self) -> None:
        """The tables of killed gateways deleted, then this one's made, in one transaction."""
        if shutil.which("nft") is None:
            raise NetworkError("--process-network egress: nft is not installed (Debian: apt-get install nftables)")
        for stale in _stale_tables():
            _nft(["delete", "table", "inet", stale])
        done = _nft(["-f", "-"], self.text())
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
            raise NetworkError(f"--process-network egress: nft refused the gateway's table: {said[:200]}")

    def remove(self) -> None:
        """The table deleted (if it still is there: a gateway's stop calls this twice)."""
        _nft(["delete", "table", "inet", self.table])

    @property
    def said(self) -> str:
        return f"network egress (nft table inet {self.table})"


def _stale_tables() -> list[str]:
    """The ``inet`` tables of gateways whose pid is gone (killed: they could not delete their own)."""
    done = _nft(["-j", "list", "tables", "inet"])
    try:
        listed = json.loads(done.stdout)["nftables"]
    except (ValueError, KeyError, TypeError):
        return []
    stale = []
    for entry in listed:
        name = entry.get("table", {}).get("name", "") if isinstance(entry, dict) else ""
        pid = name.removeprefix(TABLE_PREFIX)
        if name.startswith(TABLE_PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            stale.append(name)
    return stale


def _nft(arguments: Sequence[str], given: str | None = None) -> subprocess.CompletedProcess[str]:
    # nft, found on PATH, with arguments of our own.
    line = ["nft", *arguments]
    return subprocess.run(line, input=given, capture_output=True, text=True, check=False, timeout=30)  # noqa: S603


def local_addresses() -> list[IPNetwork]:
    """This host's own addresses, and its loopback networks: where its processes may connect from."""
    if shutil.which("ip") is None:
        raise ValueError("this host's addresses are read with ip (iproute2), which is not installed")
    done = subprocess.run(["ip", "-j", "address", "show"], capture_output=True, text=True, check=False, timeout=30)  # noqa: S607
    found: list[IPNetwork] = list(LOOPBACK)
    try:
        interfaces = json.loads(done.stdout or "[]")
        for interface in interfaces:
            for address in interface.get("addr_info", []):
                own = ipaddress.ip_address(address["local"])
                found.append(ipaddress.ip_network(own))
                if own.version == 4:  # as a dual-stack socket shows it
                    found.append(ipaddress.ip_network(f"::ffff:{own}"))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError("this host's addresses could not be read (ip -j address show)") from None
    return found


def trusts_a_local_peer(trusted: Sequence[str], local: Iterable[IPNetwork]) -> str | None:
    """The first of ``trusted`` (``--forwarded-allow-ips``'s entries) that a connection from this host may come
    from: ``*``, or a network that holds a loopback or local address; ``None`` if none."""
    local = list(local)
    for entry in trusted:
        if entry == "*" or _overlap([ipaddress.ip_network(entry, strict=False)], local):
            return entry
    return None


def _overlap(nets: Iterable[IPNetwork], others: Iterable[IPNetwork]) -> bool:
    others = list(others)
    return any(net.version == other.version and net.overlaps(other) for net in nets for other in others)
