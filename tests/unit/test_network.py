"""The parts of ``--process-network egress`` that need no root (``_network``): the table's words for what the e2e tests
of ``test_gateway_network.py`` show by traffic."""

from __future__ import annotations

from mcp_sessions._gateway.sealed._network import PROCESS_FLOWS, EgressRules


def test_a_link_s_flows_are_counted_its_source_checked_and_tcp_refused_by_a_reset() -> None:
    text = EgressRules(1000, 1001).text()
    counted = f"iifname @links ct state new add @flows {{ iifname ct count over {PROCESS_FLOWS} }} counter goto refuse"
    assert text.count(counted) == 2  # forwarded, and sent on to this host
    assert "type filter hook prerouting priority raw;" in text
    assert "iifname @links fib saddr . iif oif missing counter drop" in text
    assert "chain refuse {\n    meta l4proto tcp reject with tcp reset\n    reject\n  }" in text
    assert " reject " not in text.replace("reject with tcp reset", "")  # every refusal through the one chain
