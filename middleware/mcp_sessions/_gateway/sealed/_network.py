"""What of the network a stdio server process reaches (``--process-network``), by the kernel's own rules.

``host``: the host's network, as the gateway has it. ``none``: a network namespace of its own, with no interface but its
own loopback (``_sandbox``). ``egress`` (under a containment alone): a network namespace of its own too, connected to
the host by a veth pair whose packets the kernel forwards (:class:`Link`), so that nothing of this host's network
namespace is in it (abstract Unix sockets, ``/proc/net``, loopback ports); what the process sends reaches the world,
but not this host (every
address of its own: nftables' ``fib daddr type local``), its broadcasts, the link (link-local, multicast: the cloud's
metadata address, mDNS, DHCP), the private, transition and reserved ranges, nor port 53 but the host's own resolvers
(:func:`resolvers`: names resolve with no flag), unless ``--process-allow-net`` names a network or
``--process-allow-host`` a name and its port (resolved by the gateway, its addresses kept current in sets whose elements
time out, as dnsmasq's ``--nftset`` keeps them; an answer the rules would refuse by its number is not granted by its
name: :func:`refused_answer`): rules on the processes' interfaces (``iifname``), and on their uids (``meta skuid``)
for the sockets the credentials' proxy makes as them. The rules are a table of the
gateway's own, ``inet mcp_sessions_<random>``, made in one ``nft -f -`` transaction as it starts and deleted as it
stops; while it lives the gateway holds a lock (``flock``) on a file named for it under :data:`TABLE_LOCKS`, so that
another gateway deletes a table only on proof its owner is gone (it can take that lock) and once no host end of its
processes is there (:func:`_stale_tables`); meanwhile what a live gateway holds, a uid and a host end, leaves its sets
as it is taken (:meth:`EgressRules.disown`). The rules' text is built from parsed values alone (an ``ipaddress``
network or address, a port number, uids, a checked name), never from what the operator typed.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, get_args

import anyio

from ..._wire import printable
from ._kernel import HELPER_ENV, RUNTIME, SandboxError, locked, run_helper, running_uids, tool

Network = Literal["host", "none", "egress"]
NETWORKS: Final = get_args(Network)
TABLE_PREFIX: Final = "mcp_sessions_"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
REFUSED: Final = {
    # Azure's WireServer is a public address; the others are in the ranges below too, named first for who reads the
    # rules and the log (AWS's and Azure's IMDS, ECS's task metadata, Alibaba's, AWS's over IPv6).
    "the clouds' metadata and platform services": (
        *("168.63.129.16/32", "169.254.169.254/32", "169.254.170.2/32", "100.100.100.200/32"),
        "fd00:ec2::254/128",
    ),
    "link-local, multicast and broadcast (the cloud's metadata address, mDNS, DHCP)": (
        "169.254.0.0/16",
        "224.0.0.0/4",
        "255.255.255.255/32",
        "fe80::/10",
        "ff00::/8",
    ),
    # 0.0.0.0/8 is "this network": Linux sends a connection to 0.0.0.0 to this host.
    "private ranges": ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"),
    # NAT64 and 6to4 reach IPv4 addresses (the metadata address among them) through a translator; Teredo and
    # site-local, the link and a network of this host's by other names.
    "transition ranges (NAT64, 6to4, Teredo, site-local)": (
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "2001::/32",
        "2002::/16",
        "fec0::/10",
    ),
    "reserved and documentation ranges": (
        *("192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4"),
        "2001:db8::/32",
    ),
}
"""What an ``egress`` process may not reach besides this host, by why."""
ANSWERS_REFUSED: Final = {
    "loopback or unspecified": ("127.0.0.0/8", "::1/128", "::/128"),
    "an IPv4-mapped address (IPv4 by another name)": ("::ffff:0:0/96",),
    **REFUSED,
}
"""What a granted name's answer may not be (:meth:`EgressRules.refresh`), by why: what :data:`REFUSED` and this host's
own addresses are, and the forms that reach them by another name."""
PRIVATE_ANSWERS: Final = ("10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
"""What of :data:`ANSWERS_REFUSED` a name granted with its private answers (``--process-allow-private-host``) may
answer: the private networks, where a team's internal services are (RFC 1918's, RFC 6598's shared address space, IPv6's
unique local addresses). Never what is refused for another reason as well (:func:`refused_answer`): this host's own
addresses, loopback, link-local, the clouds' metadata addresses within these (Alibaba's ``100.100.100.200``, AWS's
``fd00:ec2::254``), ``0.0.0.0/8`` (this host, to Linux)."""
TABLE_LOCKS: Final = f"{RUNTIME}/tables"
"""Where each gateway holds a lock on a file named for its table, for its whole life, its uids in it."""
RESOLV_CONF: Final = "/etc/resolv.conf"
HOST_TTL: Final = 600
"""How long (seconds) an address a granted name resolved to stays granted once it no longer does: a connection
made to it goes on meanwhile."""
REFRESH: Final = 60.0
"""How often (seconds) the granted names are resolved again."""
GATEWAY: Final = "169.254.1.1"
"""An ``egress`` process's gateway, as its network namespace sees it: the host's end of its veth pair (no address of
the host's: a permanent neighbour entry in the namespace names its link-layer address, :data:`HOST_END`), where the
gateway's table sends a DNS query to the host's resolver (the namespace's ``/etc/resolv.conf`` names it:
:data:`RESOLV`) and any other connection to this host's loopback, where its rules refuse it but what
``--process-allow-net`` grants (``127.0.0.1:6379`` is reached at ``169.254.1.1:6379``)."""
RESOLV: Final = f"{RUNTIME}/resolv.conf"
"""Every ``egress`` namespace's ``/etc/resolv.conf`` (its gateway: the host's resolver to it), written at startup."""
NO_ROUTE: Final = (
    "this host has no IPv4 default route, which an egress process reaches the world through: each process starts with "
    "its own loopback alone (as under --process-network none) until the host has one"
)
"""What the startup line adds where :func:`routed` is false: said once, where each process would start unconnected."""
LINK_WITHIN: Final = 30.0
"""How long (seconds) a process's network namespace and its veth pair have to be ready (about 20 ms on an idle host)."""
PROCESSES: Final = ipaddress.IPv4Network("10.237.0.0/16")
"""Where each ``egress`` process's own address is (a ``/32`` of it, one per veth pair of the host, whichever gateway's;
masqueraded as it leaves): a private range, refused to every process by the rules, and checked at startup against this
host's addresses and routes (:meth:`EgressRules.install`)."""
HOST_END: Final = "ee:ee:ee:ee:ee:ee"
"""The link-layer address of each veth pair's host end (Calico's): the namespace's neighbour for :data:`GATEWAY`."""
INTERFACE: Final = "mcs"
"""The prefix of each veth pair's host end: ``mcs<N>``, its process's address :data:`PROCESSES`'s N-th."""
TUNNEL_MARK: Final = 0x6D637331
"""The mark (``SO_MARK``) of the sockets of the masked credentials' proxy's opaque tunnels (``_edge._socket_as``),
which the masked hosts' refusal (:meth:`EgressRules.credential_rules`) passes over: a ``CONNECT`` to a name no mask
names reaches that name whatever address it shares with a masked host (a CDN's), judged by the process's own grants,
as its own connections are. No process sets it: ``SO_MARK`` needs ``CAP_NET_ADMIN``, which none has, and a packet
that crosses its veth pair comes out with no mark (the kernel scrubs it between namespaces). Its bits, "mcs1", are
none the host's usual tools set (kube-proxy's 0x4000 and 0x8000, Docker's none); it routes as any other socket but
where the host has an ``ip rule fwmark`` for them."""
PROCESS_FLOWS: Final = 1024
"""How many of the host's conntrack entries one ``egress`` process's flows may hold at once (new flows from its host
end, counted by nftables' ``ct count`` per link); past it, a new one is refused. A server's API calls, a crawl and a
browser's page (a few hundred connections) fit it with room; the kernel keeps a closed TCP flow's entry 120 s and an
unanswered datagram's 30 s, so it is about 8 connections a second sustained. ``--max-processes 200`` of them hold
204,800 entries, within the 262,144 a host with 4 GiB or more has (Docker, Podman and Kubernetes bound none per
container)."""
ROUTED: Final = f"{TABLE_PREFIX}routed"
"""The table every gateway of the host shares, never deleted (as the forwarding it guards is never turned off): its set
``routed`` holds each interface a gateway turned IPv4 forwarding on, and its forward chain drops what arrives there
that is not a reply to a process's flow (:data:`ROUTED_RULES`): the host routes for its processes alone, not for its
link's neighbours. No lock file names it, so no gateway takes it for a stale one."""
ROUTED_RULES: Final = f"""\
add table inet {ROUTED}
add set inet {ROUTED} routed {{ type ifname; }}
add chain inet {ROUTED} forward {{ type filter hook forward priority 0; policy accept; }}
flush chain inet {ROUTED} forward
add rule inet {ROUTED} forward iifname @routed ct direction reply ct original ip saddr {PROCESSES} accept
add rule inet {ROUTED} forward meta nfproto ipv4 iifname @routed counter drop comment "routed for no process"
"""
"""The shared table, made or remade in one ``nft -f`` transaction (``add`` and ``flush``: what another gateway made is
made again, its set's elements kept): a reply to any gateway's process (its flow's original source is in
:data:`PROCESSES`: the range every gateway's links share) passes; the rest arriving on a routed interface is dropped."""
CONF: Final = "/proc/sys/net/ipv{version}/conf/{interface}/{name}"
HOST_END_CONF: Final = ((4, "forwarding", "1"), (4, "route_localnet", "1"), (6, "disable_ipv6", "1"))
"""Each host end's settings (:data:`CONF`), its own alone: IPv4 forwarding from it; ``127.0.0.1`` routed to from it
(where the table sends what the process sends to its gateway); no IPv6 (nothing of the host's on it)."""
# The namespaces' holder: it says they are made, then waits for its stdin to end (the gateway's close, or its end).
_HOLD: Final = "echo made; read -r _"
# The process's network namespace's own rules, which the gateway makes there (nft, as root: the process has no
# capability there): what arrives that is not a reply to what the process sent (from the world or this host's own
# processes) is dropped. Its conntrack is the process's alone, so that a refusal of its connection (an ICMP error, a
# reset) is related to it and reaches it.
NAMESPACE_RULES: Final = """\
table inet mcp_sessions {
  chain input {
    type filter hook input priority 0; policy accept;
    iif lo accept
    ct state established,related accept
    counter drop comment "not a reply to the process"
  }
}
"""
# No IPv6 in the process's namespace, loopback's ::1 and eth0's link-local neither (`all` sets each interface's and the
# default): what the process has is IPv4 alone, as the host end's. A kernel without IPv6 has nothing to turn off.
_NO_IPV6: Final = "[ ! -e /proc/sys/net/ipv6 ] || echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6"
# The namespace's interface, its address, its gateway (GATEWAY at HOST_END, on the link whatever its address), by
# `ip -batch -`, in the namespace ({address}: the process's own).
_NAMESPACE_LINK: Final = f"""\
link set lo up
address add {{address}}/32 dev eth0
link set eth0 up
neighbour replace {GATEWAY} lladdr {HOST_END} dev eth0 nud permanent
route add default via {GATEWAY} dev eth0 onlink
"""


CGROUPS_FIRST: Final = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
"""A helper's first step: its own pid into each control group named, until ``--``; then the command that follows."""
logger = logging.getLogger("mcp_sessions.gateway")
LOOPBACK: Final = tuple(ipaddress.ip_network(net) for net in ("127.0.0.0/8", "::1/128", "::ffff:127.0.0.0/104"))


TCP_BUFFERS: Final = ("4096 32768 6291456", "4096 16384 4194304")
"""A process's own network namespace's ``net.ipv4.tcp_rmem`` and ``tcp_wmem`` (least, first, most: bytes), written as
its loopback comes up: the kernel's defaults, but a socket's first receive buffer 32 KiB, where a new namespace copies
the host's (128 KiB by the kernel's default, more on a host tuned for throughput). The kernel charges each socket's
first buffer past any bound (``_cgroups._sockets_past``): 72 KiB a connection unread on loopback at 128 KiB, 24 at 32,
16 at 16. 32 KiB is the least whose window (about half of it) still takes a sender's whole first flight (10 segments,
some 14.5 KB): no round trip more for a reply; later buffers grow as the kernel's autotuning does, within the bound."""
# A new network namespace's loopback brought up ($0: ip) and its TCP buffers' sizes written ($1, $2: TCP_BUFFERS),
# then the command (bubblewrap, which runs in it).
_LOOPBACK: Final = (
    '"$0" link set lo up && echo "$1" > /proc/sys/net/ipv4/tcp_rmem && echo "$2" > /proc/sys/net/ipv4/tcp_wmem '
    '|| exit 125; shift 2; exec "$@"'
)


@dataclass(frozen=True)
class ProcessNetwork:
    """One contained process's network, as the command line that starts it makes it (``_sandbox``'s namespace puts
    each part in its place): under ``host`` nothing; under ``none`` a network namespace of its own, made by the
    containment's ``unshare`` (:meth:`unshared`); under ``egress`` the one its :class:`Link` made, entered
    (:meth:`entered`), and its resolver (:data:`RESOLV`); under both, its loopback up (:meth:`loopback`). What
    ``_sandbox`` hides of ``/run`` is ``hidden``: a host resolver configuration linked there (systemd-resolved's) is
    bound where the link leads (:meth:`resolver`). Every program is found by :func:`tool`."""

    kind: Network
    link: Link | None = None
    hidden: str = "/run"
    resolv: str = RESOLV  # under egress, its /etc/resolv.conf (linkable's, in --runtime-directory)

    @property
    def isolated(self) -> bool:
        """Whether it has a network namespace of its own."""
        return self.kind in ("none", "egress")

    def helpers(self) -> list[str]:
        """The programs that make it (:func:`tool` finds each at startup)."""
        helpers = ["unshare", "ip"] if self.isolated else []
        return [*helpers, "nsenter", "nft"] if self.kind == "egress" else helpers

    def entered(self) -> list[str]:
        """The command line's first part under ``egress``: into the network namespace its :class:`Link` made."""
        return [] if self.link is None else [tool("nsenter"), f"--net={self.link.namespace}", "--"]

    def unshared(self) -> list[str]:
        """``unshare``'s option for a network namespace of its own, where no :class:`Link` made one."""
        return ["--net"] if self.isolated and self.link is None else []

    def loopback(self) -> list[str]:
        """Before bubblewrap, in its network namespace: its loopback up and its TCP buffers (:data:`_LOOPBACK`)."""
        return ["/bin/sh", "-c", _LOOPBACK, tool("ip"), *TCP_BUFFERS] if self.isolated else []

    def unshare_mounts(self) -> list[str]:
        """Its part of ``unshare``'s mounts (``_sandbox._UNSHARE_MOUNTS``), named: its loopback up and its TCP
        buffers (:data:`TCP_BUFFERS`), its resolver."""
        resolver, at = self.resolver()
        return [
            *(["--loopback", tool("ip"), *TCP_BUFFERS] if self.isolated else []),
            *(["--resolver", resolver, at] if resolver else []),
        ]

    def bound(self) -> list[str]:
        """Its part of bubblewrap's mounts, after ``hidden``'s tmpfs: its resolver, where it leads under ``hidden``
        made as the host has it (bubblewrap makes a directory 0700)."""
        resolver, at = self.resolver()
        if not resolver:
            return []
        line = []
        for directory in map(str, reversed(Path(at).parents)):
            line += ["--perms", "0755", "--dir", directory] if directory.startswith(f"{self.hidden}/") else []
        return [*line, "--ro-bind", resolver, at]

    def resolver(self) -> tuple[str, str]:
        """The resolver configuration it reads, and where, both ``""`` where the host's stays in place: under egress its
        namespace's (:data:`RESOLV`); else the host's own where ``/etc/resolv.conf`` links under ``hidden``
        (systemd-resolved's ``stub-resolv.conf``). Where: that link's target, so that the link leads to it."""
        target = os.path.realpath(RESOLV_CONF)
        at = target if target.startswith(f"{self.hidden}/") else RESOLV_CONF
        if self.link is not None:
            return self.resolv, at
        return (target, target) if at != RESOLV_CONF else ("", "")


def egress_rules(
    network: str,
    uids: int | tuple[int, int] | None,
    allow: Sequence[str],
    trusted: Sequence[str],
    port: int,
    hosts: Sequence[str] = (),
    private_hosts: Sequence[str] = (),
) -> EgressPolicy | None:
    """The policy for processes of ``uids`` (a range, or one) under ``egress``, with the exceptions ``allow``
    (``--process-allow-net``), ``hosts`` (``--process-allow-host``) and ``private_hosts``
    (``--process-allow-private-host``); None for ``host`` and ``none``. Whatever
    the network, no process may pass for a proxy the gateway ``trusted`` (``--forwarded-allow-ips``) and that
    listens on ``port``: under ``host``, a trusted address it could connect from is refused (``ValueError``);
    under ``egress``, an exception that reaches the gateway's port from one (a name's address that does is never
    granted)."""
    allowed = [Allowed.parsed(given) for given in allow]
    granted = tuple(AllowedHost.parsed(given) for given in hosts)
    granted += tuple(AllowedHost.parsed(given, private=True) for given in private_hosts)
    if (allowed or granted) and network != "egress":
        flag = "--process-allow-net" if allowed else granted[0].flag
        raise ValueError(f"{flag} makes exceptions to --process-network egress, not to {network}")
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
    held = () if isinstance(uids, tuple) else (uids,)  # --process-uids' are held as they are taken
    return EgressPolicy(first, last, tuple(allowed), held, resolvers(), granted)


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
        text = given.strip()
        port = None
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

    def rule(self) -> str:
        family = "ip" if self.network.version == 4 else "ip6"
        port = "" if self.port is None else f" meta l4proto {{ tcp, udp }} th dport {self.port}"
        return f'{family} daddr {self.network}{port} accept comment "--process-allow-net"'

    def grants(self, address: IPAddress, port: int) -> bool:
        """Whether it lets a process reach ``address`` on ``port``."""
        return address in self.network and self.port in (None, port)

    def reaches(self, addresses: Iterable[IPNetwork], port: int) -> bool:
        """Whether it lets a process reach ``port`` on one of ``addresses``."""
        return (self.port is None or self.port == port) and _overlap([self.network], addresses)


@dataclass(frozen=True)
class AllowedHost:
    """One ``--process-allow-host NAME:PORT``: a host name, and the one port (tcp and udp) it is granted for; with
    ``private`` (``--process-allow-private-host``), its private answers too (:data:`PRIVATE_ANSWERS`)."""

    name: str
    port: int
    private: bool = False

    @classmethod
    def parsed(cls, given: str, private: bool = False) -> AllowedHost:
        """``api.github.com:443``, ``db.internal:5432``; ``ValueError``, in one line, else."""
        flag = cls("", 0, private).flag
        text, colon, port = given.strip().partition(":")
        labels = text.lower().removesuffix(".").split(".")
        if len(text) > 253 or not all(_label(label) for label in labels):
            raise ValueError(f"{flag} takes NAME:PORT (api.github.com:443, db.internal:5432): {given!r}")
        if not colon:
            raise ValueError(f"{flag} {given}: a name is granted for one port: give it ({given}:443, say)")
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{flag}: {given!r}: a port is a number from 1 to 65535")
        return cls(".".join(labels), int(port), private)

    @property
    def flag(self) -> str:
        """The flag that grants it, as what is said of it names it."""
        return "--process-allow-private-host" if self.private else "--process-allow-host"

    def addresses(self) -> set[IPAddress]:
        """The addresses it resolves to now (none where it does not)."""
        try:
            found = socket.getaddrinfo(self.name, None, proto=socket.IPPROTO_TCP)
        except OSError:
            return set()
        return {ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found}


def refused_answer(address: IPAddress, local: Iterable[IPNetwork], private: bool = False) -> str | None:
    """Why a name's answer ``address`` is not granted (one of :data:`ANSWERS_REFUSED`, or this host's own: one of
    ``local``), or None: a name never opens what its number would not, but where it is granted with its ``private``
    answers, what of :data:`PRIVATE_ANSWERS` is refused for no other reason."""
    if _overlap([ipaddress.ip_network(address)], local):
        return "this host's own"
    admitted = PRIVATE_ANSWERS if private else ()
    for why, refused in ANSWERS_REFUSED.items():
        if any(address in ipaddress.ip_network(net) for net in refused if net not in admitted):
            return why
    return None


def _label(label: str) -> bool:
    """Whether ``label`` is a host name's: 1 to 63 letters, digits and inner hyphens."""
    inner = 0 < len(label) <= 63 and not label.startswith("-") and not label.endswith("-")
    return inner and label.isascii() and label.replace("-", "").isalnum()


@dataclass(frozen=True)
class EgressPolicy:
    """What the processes of the uids ``first`` to ``last`` are granted under ``egress`` (:func:`egress_rules`, once,
    at startup): ``allowed`` first, then the host's ``resolvers`` on port 53, and the names ``hosts``; with masked
    credentials (``--process-env-mask``), the gateway's ``proxy`` and the hosts ``masked`` reached through it alone.
    The table that holds it, while the gateway runs, is :class:`EgressRules`."""

    first: int
    last: int
    allowed: tuple[Allowed, ...] = ()
    held: tuple[int, ...] = ()  # the uids under the rules from the start (--process-user's)
    resolvers: tuple[IPAddress, ...] = ()
    hosts: tuple[AllowedHost, ...] = ()
    proxy: int | None = None  # the port of the gateway's proxy for masked credentials (_edge), on 127.0.0.1
    masked: tuple[AllowedHost, ...] = ()  # the masked credentials' hosts, reached through that proxy alone


@dataclass
class EgressRules:
    """The ``egress`` table of one gateway, as it runs: ``policy`` for the uids it holds (:meth:`hold`); its name
    random, so that no other gateway's can be it; its lock, the thread that keeps the names' answers current, and
    the interfaces whose forwarding it turned on."""

    policy: EgressPolicy
    table: str = field(default_factory=lambda: f"{TABLE_PREFIX}{secrets.token_hex(6)}")
    locks: str = TABLE_LOCKS
    lock: int | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    unresolved: set[str] = field(default_factory=set)
    refused: set[tuple[str, IPAddress]] = field(default_factory=set)  # each name's answers said to be refused
    local: list[IPNetwork] = field(default_factory=lambda: list(LOOPBACK))  # this host's addresses, as last read
    turned_on: list[str] = field(default_factory=list)  # the interfaces whose forwarding the gateway turned on
    answers: set[IPAddress] = field(default_factory=set)  # the granted names' answers, as last added to their sets
    dropping: list[str] = field(default_factory=list)  # the host's chains that drop by policy what they do not accept

    def text(self) -> str:
        """The table, as ``nft -f`` reads it: its rules (the chain ``egress``) hold for the packets of each interface
        in its set ``links`` (a process's host end, while the process lives: :class:`Link`), forwarded or to this
        host, and for the sockets of the uids in its set ``uids`` (the masked credentials' proxy connects as a
        process's uid), this gateway's own (the ``--process-user``'s from the start; each of ``--process-uids`` while a
        process of this gateway's holds it: :meth:`hold`), never the whole range, which another gateway's may
        overlap. What a process sends to its gateway is sent on first (``prerouting``): DNS to the host's first IPv4
        resolver, the rest to this host's ``127.0.0.1``, where the rules judge it as they would a connection of the
        process's uid there; what leaves the host from a process is masqueraded. A process's new flows hold at most
        :data:`PROCESS_FLOWS` of the host's conntrack entries (the set ``flows``: a count per link), a packet of its
        link from another's address is dropped before conntrack sees it (``links``), and each refusal goes through one
        chain (``refuse``): TCP by a reset."""
        policy = self.policy
        held = f" elements = {{ {', '.join(map(str, policy.held))} }};" if policy.held else ""
        sets = [
            f"set uids {{ type uid;{held} }}",
            "set links { type ifname; }",
            "set flows { type ifname; flags dynamic; }",
        ]
        # What a process may reach, first; then what it may not (the kernel's first verdict holds). A rule that sends a
        # process's connections through a proxy of the gateway's (issue 95's credentials) goes first of all, and its
        # refusal of their hosts' direct connections before the grants below.
        masked_sets, rules = self.credential_rules()
        sets += masked_sets
        rules += [allowed.rule() for allowed in policy.allowed]
        if policy.hosts:  # each name's addresses and port, kept current by refresh
            for version, family, kind in ((4, "ip", "ipv4_addr"), (6, "ip6", "ipv6_addr")):
                sets.append(f"set hostports{version} {{ type {kind} . inet_service; flags timeout; }}")
                rules.append(
                    f"meta l4proto {{ tcp, udp }} {family} daddr . th dport @hostports{version} accept "
                    'comment "--process-allow-host"'
                )
        dns = "meta l4proto { tcp, udp } th dport 53"
        for family, version in (("ip", 4), ("ip6", 6)):
            if found := [str(address) for address in policy.resolvers if address.version == version]:
                listed = ", ".join(found)
                rules.append(f'{family} daddr {{ {listed} }} {dns} accept comment "the host\'s resolvers"')
        rules.append(f'{dns} goto refuse comment "DNS but to the host\'s resolvers"')
        rules.append('fib daddr type local goto refuse comment "this host"')
        rules.append('fib daddr type broadcast goto refuse comment "a broadcast"')
        for why, refused in REFUSED.items():
            for family, version in (("ip", 4), ("ip6", 6)):
                if nets := [str(net) for net in map(ipaddress.ip_network, refused) if net.version == version]:
                    rules.append(f'{family} daddr {{ {", ".join(nets)} }} goto refuse comment "{why}"')
        to_gateway = f"iifname @links ip daddr {GATEWAY} meta l4proto {{ tcp, udp }}"
        resolver = next((address for address in policy.resolvers if address.version == 4), None)
        sent_on = [f'{to_gateway} th dport 53 dnat ip to {resolver} comment "the host\'s resolver"'] if resolver else []
        sent_on.append(f'{to_gateway} dnat ip to 127.0.0.1 comment "this host\'s loopback"')
        flows = (
            f"iifname @links ct state new add @flows {{ iifname ct count over {PROCESS_FLOWS} }} counter goto refuse "
            'comment "a process\'s flows past its bound"'
        )
        chains = {
            "egress": rules,
            # TCP refused by a reset, which no rate limit holds back (the kernel's ICMP errors wait, past a burst of 6
            # a second, and a connect with them); the rest by what a closed port says.
            "refuse": ["meta l4proto tcp reject with tcp reset", "reject"],
            # Before conntrack sees it: a packet from a host end whose source is not its process's own address (the
            # route to that address leaves by another interface) is dropped, whatever the host's rp_filter (the kernel
            # takes the greater of the interface's and all's: systemd's 2, loose, would make the interface's 1 loose).
            "links": [
                "type filter hook prerouting priority raw; policy accept;",
                'iifname @links fib saddr . iif oif missing counter drop comment "not the process\'s own address"',
            ],
            "output": ["type filter hook output priority 0; policy accept;", "meta skuid @uids jump egress"],
            "forward": ["type filter hook forward priority 0; policy accept;", flows, "iifname @links jump egress"],
            "input": ["type filter hook input priority 0; policy accept;", flows, "iifname @links jump egress"],
            "prerouting": ["type nat hook prerouting priority dstnat; policy accept;", *sent_on],
            "postrouting": ["type nat hook postrouting priority srcnat; policy accept;", "iifname @links masquerade"],
        }
        lines = [f"table inet {self.table} {{", *(f"  {each}" for each in sets)]
        for name, chain in chains.items():
            lines += [f"  chain {name} {{", *(f"    {rule}" for rule in chain), "  }"]
        return "\n".join([*lines, "}"]) + "\n"

    def credential_rules(self) -> tuple[list[str], list[str]]:
        """The sets and the first rules for masked credentials (``--process-env-mask``): the gateway's proxy
        reached (what the process sends to its gateway goes to this host's loopback), and the masked hosts'
        addresses (:meth:`refresh` keeps them current) refused on their ports, whatever grants them below, but to the
        proxy's opaque tunnels (:data:`TUNNEL_MARK`): a name no mask names, which the rules below judge."""
        if (proxy := self.policy.proxy) is None:
            return [], []
        sets = []
        rules = [f'ip daddr 127.0.0.1 tcp dport {proxy} accept comment "the credentials\' proxy"']
        for version, family, kind in ((4, "ip", "ipv4_addr"), (6, "ip6", "ipv6_addr")):
            sets.append(f"set maskedports{version} {{ type {kind} . inet_service; flags timeout; }}")
            rules.append(
                f"meta mark != {TUNNEL_MARK:#x} meta l4proto tcp {family} daddr . th dport @maskedports{version} "
                'reject with tcp reset comment "a masked credential\'s host: through the proxy alone"'
            )
        return sets, rules

    def install(self) -> None:
        """This gateway's table made, its lock held; then the tables of gateways that are gone deleted, each once
        no host end of its processes is there (until then, its rules hold for the processes a killed gateway left,
        never for this gateway's: :meth:`disown`). The host's chains that drop (:func:`_dropping`, for the startup
        line: ``nft`` lists every chain, a third of the install's time, whose answer no step of it needs) listed
        beside."""
        with ThreadPoolExecutor(1, thread_name_prefix="mcp-sessions chains") as listing:
            dropping = listing.submit(_dropping)
            self._install()
            self.dropping = dropping.result()

    def _install(self) -> None:
        if shutil.which("nft") is None:  # found once (tool), where _nft runs it
            raise NetworkError("--process-network egress: nft is not installed (Debian: apt-get install nftables)")
        if shutil.which("conntrack") is None:  # found once (tool), where a link is closed
            raise NetworkError(
                "--process-network egress: conntrack is not installed, which deletes a process's flows from the "
                "host's connection tracking table as it ends (Debian: apt-get install conntrack)"
            )
        tool("conntrack")  # found once, at startup
        if (overlap := _overlapping()) is not None:
            raise NetworkError(
                f"--process-network egress: the processes' addresses, {PROCESSES}, overlap this host's {overlap}, "
                "which they would shadow: remove it, or --process-network none"
            )
        self.forward()
        os.makedirs(self.locks, mode=0o700, exist_ok=True)
        self.lock = locked(os.path.join(self.locks, self.table))
        if self.lock is None:
            raise NetworkError(f"--process-network egress: the lock of table {self.table} is another's")
        os.write(self.lock, f"{self.policy.first}-{self.policy.last}\n".encode())
        done = _nft(["-f", "-"], self.text())
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
            raise NetworkError(f"--process-network egress: nft refused the gateway's table: {said[:200]}")
        for stale, lock in _stale_tables(self.locks):
            _nft(["delete", "table", "inet", stale])
            with suppress(OSError):
                os.unlink(os.path.join(self.locks, stale))
            os.close(lock)
        self.disown()  # the uids from the start (--process-user's), which a killed gateway's table may hold
        if self.policy.hosts or self.policy.masked:
            self.refresh()
            threading.Thread(target=self._keep_current, name="mcp-sessions allow-host", daemon=True).start()

    def refresh(self) -> None:
        """Each granted name resolved again, its addresses (re)added to its set for :data:`HOST_TTL` seconds, in one
        transaction; a name that resolves to nothing is said once, until it resolves again. An answer a process could
        not reach by its number (:func:`refused_answer`: a rebinding answer, say) is not added, and said once, unless
        ``--process-allow-net`` grants it (its rule does, before the sets)."""
        elements = []
        answers = set()
        with suppress(ValueError):  # ip is missing or said nothing readable: the addresses read last
            self.local = local_addresses()
        for host in self.policy.hosts:
            found = host.addresses()
            if not found and host.name not in self.unresolved:
                logger.warning(
                    "--process-allow-host %s resolves to no address: tried again every %g s", host.name, REFRESH
                )
                self.unresolved.add(host.name)
            elif found:
                self.unresolved.discard(host.name)
            for address in sorted(found, key=lambda each: (each.version, each)):
                if (why := refused_answer(address, self.local, host.private)) is not None:
                    granted = any(each.grants(address, host.port) for each in self.policy.allowed)
                    if not granted and (host.name, address) not in self.refused:
                        logger.warning(
                            "%s %s: its answer %s is not granted (%s): --process-allow-net grants it by number",
                            host.flag,
                            host.name,
                            address,
                            why,
                        )
                        self.refused.add((host.name, address))
                    continue
                element = f"{address} . {host.port} timeout {HOST_TTL}s"
                elements.append(f"add element inet {self.table} hostports{address.version} {{ {element} }}")
                answers.add(address)
        for host in self.policy.masked:  # every answer refused, whatever it is
            for address in host.addresses():
                element = f"{address} . {host.port} timeout {HOST_TTL}s"
                elements.append(f"add element inet {self.table} maskedports{address.version} {{ {element} }}")
        if elements and (done := _nft(["-f", "-"], "\n".join(elements) + "\n")).returncode != 0:
            logger.warning("--process-allow-host: nft refused the names' addresses: %s", done.stderr.strip()[:200])
        self.answers = answers
        self.forward()

    @property
    def granted(self) -> list[IPNetwork]:
        """What the grants reach past the refusals, IPv4's (a process has no IPv6): ``--process-allow-net``'s
        networks and the granted names' answers (a VPN's interface, a private link's)."""
        granted: list[IPNetwork] = [allowed.network for allowed in self.policy.allowed]
        granted += map(ipaddress.ip_network, self.answers)
        return [net for net in granted if net.version == 4]

    def forward(self) -> None:
        """IPv4 forwarding on each interface a process's packets may leave by (:func:`uplinks`), with what the grants
        reach; each one turned on, in the shared table's set (:func:`routed_for_processes`)."""
        turned_on = _forwarded(self.granted)
        self.turned_on += [each for each in turned_on if each not in self.turned_on]
        if turned_on:
            routed_for_processes(turned_on)

    def hold(self, uid: int) -> None:
        """``uid`` under the rules (added to the set ``uids``), before a process of it starts: one ``nft`` call (and
        under no gone gateway's as its link is made: :meth:`disown`). ``NetworkError`` if nft refuses: no process
        starts that the rules would not hold."""
        done = _nft(["add", "element", "inet", self.table, "uids", f"{{ {uid} }}"])
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
            raise NetworkError(f"--process-network egress: nft did not put uid {uid} under the rules: {said[:200]}")

    def disown(self, interface: str = "") -> None:
        """The tables of gateways that are gone (:func:`_orphans`: a killed one's stays while a host end of its
        processes is there, :func:`_stale_tables`) made to judge nothing of this gateway's, at startup and as each
        process's link is made (every process under ``egress`` has one, made after its uid is held): their sets
        ``uids`` emptied (what their rules judge by uid is the sockets their own gateway's credentials proxy made, gone
        with it; a uid in it is a live gateway's by now) and ``interface``, a process's host end this gateway has just
        made (so no process of theirs has it: the kernel makes one interface of a name, and it is named for its uid),
        out of their sets ``links``, before it is up. One ``nft -f`` transaction each, under its lock;
        ``NetworkError`` if nft refuses one that is there: no process starts under a dead gateway's rules."""
        for name, lock in _orphans(self.locks):
            given = f"flush set inet {name} uids\n"
            if interface:  # added first, so that its deletion holds whether it was there or not
                element = f'links {{ "{interface}" }}'
                given += f"add element inet {name} {element}\ndelete element inet {name} {element}\n"
            try:
                done = _nft(["-f", "-"], given)
            finally:
                os.close(lock)
            if done.returncode != 0 and name in {table.get("name") for table in _listed("table", "inet")}:
                said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
                raise NetworkError(f"--process-network egress: nft left table {name} judging a process: {said[:200]}")

    def let_go(self, uid: int) -> None:
        """``uid`` out of the set, as it is given back, so that another gateway's process may have it with its own
        rules alone: one ``nft`` call, once no process of it runs (what a process left, ending, is still held by the
        rules: its uid stays in the set, the others' grants refused to it, until this gateway lets it go again)."""
        if uid not in running_uids():
            _nft(["delete", "element", "inet", self.table, "uids", f"{{ {uid} }}"])

    def link(self, interface: str) -> None:
        """A process's host end, ``interface``, under the rules (added to the set ``links``) once made, before it is
        up (:meth:`Link._paired`)."""
        done = _nft(["add", "element", "inet", self.table, "links", f'{{ "{interface}" }}'])
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
            raise NetworkError(f"--process-network egress: nft did not put {interface} under the rules: {said[:200]}")

    def unlink(self, interface: str) -> None:
        """``interface`` out of the set ``links``, once it is deleted, and out of ``flows`` (its first new flow put it
        there): the next process of that name counts its own flows from none."""
        _nft(["delete", "element", "inet", self.table, "links", f'{{ "{interface}" }}'])
        _nft(["delete", "element", "inet", self.table, "flows", f'{{ "{interface}" }}'])

    def _keep_current(self) -> None:
        while not self.stopped.wait(REFRESH):
            self.refresh()

    def remove(self) -> None:
        """The table deleted, then its lock let go (a gateway's stop calls this twice)."""
        self.stopped.set()
        _nft(["delete", "table", "inet", self.table])
        if self.lock is not None:
            with suppress(OSError):
                os.unlink(os.path.join(self.locks, self.table))
            os.close(self.lock)
            self.lock = None

    @property
    def said(self) -> str:
        """How the startup line says it: its table, and what the gateway changed of the host's (IPv4 forwarding, on
        each process's interface and where its packets leave; never turned off again: another program may rely on
        it by then), and the names granted with their private answers (an exception to a rule the docs state)."""
        uplinks_said = ", ".join(each + " (turned on)" * (each in self.turned_on) for each in uplinks(self.granted))
        said = (
            f"network egress (nft table inet {self.table}), a veth pair each ({PROCESSES}, IPv4 alone), forwarding "
            f"on each pair's host end and on {uplinks_said or 'no interface: no default route'}"
        )
        if private := [f"{host.name}:{host.port}" for host in self.policy.hosts if host.private]:
            said += (
                f"; the private answers of {', '.join(private)} granted too (--process-allow-private-host), never "
                "loopback, link-local, a metadata address or this host's own"
            )
        if self.dropping:  # another table's drop is final, whatever this one accepts
            said += (
                f"; the host's chains {', '.join(self.dropping)} drop by policy what they do not accept: a process "
                f'reaches nothing through them until they accept iifname "{INTERFACE}*" (docs/security.md)'
            )
        return said


def _orphans(locks: str) -> list[tuple[str, int]]:
    """The tables of gateways that are gone, by their lock files, each with its lock, now held (no other gateway
    deletes it meanwhile): a table whose lock file another holds (its gateway lives), or has none (not proven: an older
    gateway's, another program's), is not one; nor is one whose file is empty, which its gateway has made and not yet
    written (it writes its uids once it holds the lock, then makes its table). No ``nft`` call: a gateway asks before
    each process starts (:meth:`EgressRules.disown`)."""
    try:
        names = sorted(os.listdir(locks))
    except OSError:  # none made yet
        return []
    found = []
    for name in names:
        path = os.path.join(locks, name)
        ours = name.isascii() and name.replace("_", "").isalnum() and name.startswith(TABLE_PREFIX)  # the rules' text
        try:
            written = ours and os.path.isfile(path) and os.path.getsize(path) > 0
            lock = locked(path) if written else None
        except OSError:
            continue
        if lock is not None:
            found.append((name, lock))
    return found


def _stale_tables(locks: str) -> list[tuple[str, int]]:
    """The tables of gateways that are gone (:func:`_orphans`), each with its lock, now held, once no host end in its
    set ``links`` is there: a process of a killed gateway's that outlived it would still have its own, which its
    rules seal (one a live gateway has made since is out of the set: :meth:`EgressRules.disown`). Not a process of its
    uids: its rules judge a uid's sockets on this host's network alone, its own gateway's proxy's, and on a host
    whose gateways share a range one of its uids always runs, so that such a table never went."""
    stale = []
    for name, lock in _orphans(locks):
        links = _links(name)
        if links is None or any(_there(interface) for interface in links):
            os.close(lock)
        else:
            stale.append((name, lock))
    return stale


def _links(table: str) -> list[str] | None:
    """The host ends in the set ``links`` of ``table``: none where the table is gone (its lock file left), None
    where nft says nothing readable of one that is there."""
    done = _nft(["-j", "list", "set", "inet", table, "links"])
    if done.returncode != 0 and table not in {each.get("name") for each in _listed("table", "inet")}:
        return []
    try:
        listed = json.loads(done.stdout)["nftables"]
        found = [entry["set"].get("elem", []) for entry in listed if isinstance(entry, dict) and "set" in entry]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return [each for elements in found for each in elements if isinstance(each, str)]


def _there(interface: str) -> bool:
    """Whether this host's network namespace has an interface ``interface``."""
    try:
        socket.if_nametoindex(interface)
    except OSError:
        return False
    return True


def _dropping() -> list[str]:
    """The host's nftables chains of a forward or input hook whose policy is drop (ufw's, firewalld's, Docker's
    ``FORWARD`` through iptables-nft; the gateway's own accept), each as ``FAMILY TABLE CHAIN``: what a process sends
    to the world or to its gateway passes them only where they accept it."""
    return [
        printable(f"{chain.get('family')} {chain.get('table')} {chain.get('name')}")[:200]
        for chain in _listed("chain")
        if chain.get("hook") in ("forward", "input") and chain.get("policy") == "drop"
    ]


def _listed(kind: str, *family: str) -> list[dict[str, Any]]:
    """The host's nftables objects of ``kind`` (``table``, ``chain``), of ``family`` where named, as ``nft -j list``
    gives them; none where it says nothing readable."""
    done = _nft(["-j", "list", f"{kind}s", *family])
    try:
        listed = json.loads(done.stdout)["nftables"]
    except (ValueError, KeyError, TypeError):
        return []
    found = [entry.get(kind) for entry in listed if isinstance(entry, dict)]
    return [each for each in found if isinstance(each, dict)]


def resolvers(path: str = RESOLV_CONF) -> tuple[IPAddress, ...]:
    """The host's resolvers (``nameserver`` lines): port 53 is theirs alone."""
    found: list[IPAddress] = []
    with suppress(OSError):
        for line in Path(path).read_text().splitlines()[:1000]:
            words = line.split()
            if len(words) >= 2 and words[0] == "nameserver":
                with suppress(ValueError):
                    found.append(ipaddress.ip_address(words[1].partition("%")[0]))
    return tuple(found)


def _nft(arguments: Sequence[str], given: str = "") -> subprocess.CompletedProcess[str]:
    # nft (tool), with arguments of our own.
    return run_helper([tool("nft"), *arguments], given)


def local_addresses() -> list[IPNetwork]:
    """This host's own addresses, and its loopback networks: where its processes may connect from."""
    if shutil.which("ip") is None:  # found once (tool), and run by that path
        raise ValueError("this host's addresses are read with ip (iproute2), which is not installed")
    done = run_helper([tool("ip"), "-j", "address", "show"])
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


class Link:
    """The ``egress`` network of one process: a network namespace of its own, made by util-linux's ``unshare`` (as root)
    in a user namespace of its own that maps no uid, and connected to the host by a veth pair (``ip``, as root): its
    end in the namespace, ``eth0``, has the process's own address (:data:`PROCESSES`) and its gateway
    (:data:`GATEWAY`); the host's end, ``mcs<N>``, no address, a route to the process's, and forwarding on. The kernel
    forwards what the process sends, as the gateway's table allows it (:class:`EgressRules`: the interface is in its
    set ``links`` before it is up, out of it last); nothing of userspace reads it, holds a capability for it, binds a
    port of the host's for it, or is charged to the conversation for it. ``N`` is the first free from the process's uid
    on: the kernel makes one interface of a name (another gateway's ``ip link add`` of it fails), so that no two
    processes of the host have one address. The namespaces are held by a shell of their own (:attr:`holder`) until
    :meth:`close`; the pair goes with the namespace, or with :meth:`close`, whichever is first."""

    def __init__(self, uid: int, rules: EgressRules) -> None:
        self.uid = uid
        self.rules = rules
        self.holder: anyio.abc.Process | None = None
        self.interface = ""  # its host end, once made
        self.address: ipaddress.IPv4Address | None = None  # the process's, once its pair is made

    @property
    def namespace(self) -> str:
        """The process's network namespace, as the root helper that starts it enters it (``nsenter --net``)."""
        assert self.holder is not None
        return f"/proc/{self.holder.pid}/ns/net"

    async def open(self) -> None:
        """The namespaces made and connected, within :data:`LINK_WITHIN` seconds; ``NetworkError`` if they could not
        be, then closed (:meth:`close`). Its helpers run in root's fixed environment (:data:`HELPER_ENV`)."""
        try:
            with anyio.fail_after(LINK_WITHIN):
                await self._open()
        except TimeoutError:
            raise NetworkError(f"--process-network egress: its network was not made within {LINK_WITHIN:g} s") from None

    async def _open(self) -> None:
        try:
            try:
                self.holder = holder = await anyio.open_process(
                    [tool("unshare"), "--user", "--net", "--", "/bin/sh", "-c", _HOLD],
                    env=HELPER_ENV,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                assert holder.stdout is not None
                await holder.stdout.receive()  # "made": they are
            except (OSError, anyio.EndOfStream):
                raise NetworkError("--process-network egress: the process's network namespace was not made") from None
            await anyio.to_thread.run_sync(self._connect, holder.pid)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.close()
            raise

    def _connect(self, holder: int) -> None:
        """The pair made, from the namespace of ``holder`` (its child still: its pid is not another's) to the host,
        each end's address and routes set, and the namespace's own rules."""
        number = self._paired(holder)
        inside = [tool("nsenter"), f"--net=/proc/{holder}/ns/net", "--"]
        self.address = address = PROCESSES[number]
        _run([*inside, "/bin/sh", "-c", _NO_IPV6])
        _run([*inside, tool("ip"), "-batch", "-"], _NAMESPACE_LINK.format(address=address))
        _run([*inside, tool("nft"), "-f", "-"], NAMESPACE_RULES)
        host_end = f"link set {self.interface} up\nroute add {address}/32 dev {self.interface}\n"
        _run([tool("ip"), "-batch", "-"], host_end)

    def _paired(self, holder: int) -> int:
        """The veth pair made (both ends down, as the kernel makes them), then its host end ``mcs<N>`` in the
        gateway's set ``links`` and out of a gone gateway's, before either end is up (the rules hold for it from its
        first packet), and its settings made: N, the first free from the uid's on. A name goes in the set only once
        this gateway made it: put there first, another gateway's process's of that name was under this gateway's
        rules too until ``ip`` refused it, and for good if this gateway was killed meanwhile."""
        slots = PROCESSES.num_addresses - 2
        for step in range(slots):
            number = (self.uid + step) % slots + 1
            interface = f"{INTERFACE}{number}"
            pair = ["link", "add", interface, "address", HOST_END, "type", "veth", "peer", "name", "eth0"]
            done = run_helper([tool("ip"), *pair, "netns", str(holder)])
            if done.returncode == 0:
                self.interface = interface  # deleted by close, whatever fails next
                self.rules.link(interface)
                self.rules.disown(interface)  # no rules of a gone gateway's judge it, whose process had its name
                for version, name, value in HOST_END_CONF:
                    Path(CONF.format(version=version, interface=interface, name=name)).write_text(value)
                self.rules.forward()
                return number
            if "File exists" not in done.stderr:
                said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
                raise NetworkError(f"--process-network egress: ip did not make the process's veth pair: {said[:200]}")
        raise NetworkError(f"--process-network egress: every address of {PROCESSES} is another process's")

    async def close(self) -> None:
        """The pair deleted (one end goes with the other, whatever runs in the namespace still), and the host's
        conntrack entries of the process's flows with it (:meth:`_forget`), its host end out of the sets, then the
        namespaces' holder ended (they go with the process)."""
        if self.interface:
            interface, self.interface = self.interface, ""
            await anyio.to_thread.run_sync(self._forget, interface)
            await anyio.to_thread.run_sync(self.rules.unlink, interface)
        if self.holder is not None:
            with suppress(ProcessLookupError):
                self.holder.kill()
            await self.holder.wait()
            await self.holder.aclose()
            self.holder = None

    def _forget(self, interface: str) -> None:
        """The host end ``interface`` down (nothing of the process's passes it any more), the host's conntrack entries
        whose original source is the process's address deleted (conntrack-tools' ``conntrack -D``: they would outlive
        it for their timeouts, an established connection's whose peer stays silent 5 days, and a user ending
        conversation after conversation would add :data:`PROCESS_FLOWS` entries each), then the pair deleted: the
        address stays this link's, no other process's flows among those deleted, until the name is free again."""
        _run([tool("ip"), "link", "set", interface, "down"], check=False)
        if self.address is not None:
            _run([tool("conntrack"), "-D", "--orig-src", str(self.address)], check=False)
        _run([tool("ip"), "link", "delete", interface], check=False)


def _run(line: Sequence[str], given: str = "", check: bool = True) -> None:
    """``line`` (a helper found by :func:`tool`, with arguments of the gateway's own) run (:func:`run_helper`), given
    ``given``; ``NetworkError`` in one line if it fails and ``check``."""
    done = run_helper(line, given)
    if check and done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        name = os.path.basename(line[3] if line[0].endswith("nsenter") else line[0])
        raise NetworkError(f"--process-network egress: {name} refused the process's network: {said[:200]}")


def _routes() -> list[tuple[str, ipaddress.IPv4Network]]:
    """This host's IPv4 routes (the kernel's main routing table, as ``/proc/net/route`` lists it): each one's interface
    and destination, but the processes' own (``mcs<N>``'s, whichever gateway's)."""
    found = []
    with suppress(OSError, ValueError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 7 and not fields[0].removeprefix(INTERFACE).isdigit():
                address, mask = (int.from_bytes(bytes.fromhex(each), "little") for each in (fields[1], fields[7]))
                found.append((fields[0], ipaddress.IPv4Network((address, bin(mask).count("1")), strict=False)))
    return found


def uplinks(granted: Sequence[IPNetwork] = ()) -> list[str]:
    """The interfaces a process's packets may leave by, where their replies arrive: those of a route to where the rules
    do not refuse all (a default route's, a public network's; not a private bridge's), or to what ``granted`` (the
    grants' networks and answers) reaches past the refusals (a private network's, a VPN's)."""
    refused = [net for nets in REFUSED.values() for net in map(ipaddress.ip_network, nets) if net.version == 4]
    found: list[str] = []
    for interface, destination in _routes():
        reached = not any(destination.subnet_of(net) for net in refused) or _overlap([destination], granted)
        if interface not in found and reached:
            found.append(interface)
    return found


def _forwarded(granted: Sequence[IPNetwork]) -> list[str]:
    """IPv4 forwarding on each interface a process's packets may leave by (:func:`uplinks`), where their replies arrive
    (the kernel forwards what arrives on an interface whose ``forwarding`` is on), never turned off (another program
    may rely on it by then): those it was turned on for, each said once (a route that moved to another interface)."""
    turned_on = []
    for interface in uplinks(granted):
        path = Path(CONF.format(version=4, interface=interface, name="forwarding"))
        with suppress(OSError):
            if path.read_text().strip() == "0":
                path.write_text("1")
                logger.info("mcp-sessions gateway: net.ipv4.conf.%s.forwarding turned on (egress)", interface)
                turned_on.append(interface)
    return turned_on


def routed_for_processes(interfaces: Sequence[str]) -> None:
    """The shared table made (:data:`ROUTED_RULES`), ``interfaces`` (whose forwarding a gateway turned on) in its set
    ``routed``, in one transaction: said, where nft refuses it (the forwarding stays on: the processes' replies need
    it). A name nft could not read quoted (the kernel allows a quote in one) is said, not put in."""
    quotable = [each for each in interfaces if each.isascii() and all(c.isalnum() or c in "._-" for c in each)]
    for each in set(interfaces) - set(quotable):
        logger.warning(
            "mcp-sessions gateway: %s is routed for more than the processes: no rule names it", printable(each)
        )
    elements = ", ".join(f'"{each}"' for each in quotable)
    given = ROUTED_RULES + (f"add element inet {ROUTED} routed {{ {elements} }}\n" * bool(quotable))
    if (done := _nft(["-f", "-"], given)).returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        logger.warning("mcp-sessions gateway: nft refused the table %s: %s", ROUTED, said[:200])


def _overlapping() -> str | None:
    """What of this host's routes (its own addresses among them: the local table's) overlaps :data:`PROCESSES`, but
    a process's own (``mcs<N>``'s, whichever gateway's), if any."""
    done = run_helper([tool("ip"), "-j", "-4", "route", "show", "table", "all"])
    try:
        routes = json.loads(done.stdout or "[]")
        for route in routes:
            destination = route.get("dst", "default")
            interface = str(route.get("dev", ""))
            if destination == "default" or interface.removeprefix(INTERFACE).isdigit():
                continue
            if ipaddress.ip_network(destination, strict=False).overlaps(PROCESSES):
                return f"route to {destination} (dev {interface})"
    except (ValueError, TypeError, AttributeError):
        raise NetworkError("--process-network egress: this host's routes could not be read (ip -j route)") from None
    return None


def linkable(unshare: str, resolv: str = RESOLV) -> None:
    """Whether this host lets root make a process's user and network namespaces (``unshare``: util-linux's, by its
    absolute path); and the namespaces' resolver, ``resolv`` (in ``--runtime-directory``), written, unless it
    already holds what it must: a file replaced while another gateway's bubblewrap binds it fails that process's
    start."""
    try:
        made = run_helper([unshare, "--user", "--net", "--", "/bin/true"])
    except SandboxError as exc:
        raise NetworkError(f"--process-network egress: a process's network namespace: {exc}") from None
    if made.returncode != 0:
        said = (made.stderr.strip().splitlines() or [f"exit status {made.returncode}"])[-1]
        raise NetworkError(
            f"--process-network egress: each process's network is made in a user namespace of its own, which this "
            f"host refuses ({said[:200]}): allow one (sysctl user.max_user_namespaces), or --process-network none"
        )
    try:
        os.makedirs(os.path.dirname(resolv), mode=0o755, exist_ok=True)
        wanted = f"nameserver {GATEWAY}\n"
        with suppress(FileNotFoundError):
            readable = os.stat(resolv).st_mode & 0o777 == 0o644
            if readable and Path(resolv).read_text() == wanted:
                return
        written = f"{resolv}.{os.getpid()}"
        Path(written).write_text(wanted)
        os.chmod(written, 0o644)
        os.replace(written, resolv)
    except OSError as exc:
        raise NetworkError(f"--process-network egress: {resolv}: {exc.strerror or exc}") from None


def routed() -> bool:
    """Whether this host has an IPv4 default route, which a process reaches the world through (:data:`NO_ROUTE`)."""
    return any(destination.prefixlen == 0 for _, destination in _routes())
