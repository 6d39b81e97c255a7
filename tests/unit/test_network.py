"""The parts of ``--process-network egress`` that need no root (``_network``): the table's words for what the e2e tests
of ``test_gateway_network.py`` show by traffic, and a name the shared table's rule could not hold."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest

from mcp_sessions._gateway.sealed import _network
from mcp_sessions._gateway.sealed._network import (
    PROCESS_FLOWS,
    PROCESSES,
    ROUTED,
    EgressPolicy,
    EgressRules,
    NetworkError,
)


def test_a_link_s_flows_are_counted_its_source_checked_and_tcp_refused_by_a_reset() -> None:
    text = EgressRules(EgressPolicy(1000, 1001)).text()
    counted = f"iifname @links ct state new add @flows {{ iifname ct count over {PROCESS_FLOWS} }} counter goto refuse"
    assert text.count(counted) == 2  # forwarded, and sent on to this host
    assert "type filter hook prerouting priority raw;" in text
    assert "iifname @links fib saddr . iif oif missing counter drop" in text
    assert "chain refuse {\n    meta l4proto tcp reject with tcp reset\n    reject\n  }" in text
    assert " reject " not in text.replace("reject with tcp reset", "")  # every refusal through the one chain


def test_the_shared_table_routes_for_the_processes_alone_and_holds_no_name_it_could_not_quote(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    given: list[str] = []

    def nft(arguments: list[str], text: str | None = None) -> subprocess.CompletedProcess[str]:
        given.append(text or "")
        return subprocess.CompletedProcess(arguments, 0, "", "")

    monkeypatch.setattr(_network, "_nft", nft)
    _network.routed_for_processes(["eth0", 'odd"name'])
    (text,) = given
    assert f"ct direction reply ct original ip saddr {PROCESSES} accept" in text
    assert text.endswith(f'add element inet {ROUTED} routed {{ "eth0" }}\n')
    assert 'odd"name is routed for more than the processes: no rule names it' in caplog.text


def test_a_host_without_conntrack_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "conntrack" else f"/usr/sbin/{name}")
    with pytest.raises(NetworkError) as refused:
        EgressRules(EgressPolicy(1000, 1001)).install()
    assert str(refused.value) == (
        "--process-network egress: conntrack is not installed, which deletes a process's flows from the host's "
        "connection tracking table as it ends (Debian: apt-get install conntrack)"
    )


def test_what_is_granted_is_decided_whole_before_the_table_that_runs_it() -> None:
    """Issue 102, item 3: the policy is a frozen value, made whole before its table (the masked credentials' proxy
    and hosts were written into the table once it was made); each table made of it runs apart (its own name, lock
    and refresh)."""
    policy = EgressPolicy(1000, 1001, proxy=4567)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.proxy = 1  # type: ignore[misc]
    one, other = EgressRules(policy), EgressRules(policy)
    assert one.policy is other.policy
    assert one.table != other.table
    assert one.stopped is not other.stopped
    assert "ip daddr 127.0.0.1 tcp dport 4567 accept" in one.text()
