"""The YAML subset the conformance pack reads: what PyYAML reads the same, what it refuses, and in linear time."""

from __future__ import annotations

import time

import pytest

from mcp_sessions._conformance._yaml import MAX_YAML_BYTES, YamlError, loads

OFFICIAL_BASELINE = """\
# conformance-baseline.yml
server:
  - tools-call-with-progress
  - server-stateless:sep-2575-server-implements-discover # only this check may fail
client:
  - sse-retry
"""


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (
            OFFICIAL_BASELINE,
            {
                "server": ["tools-call-with-progress", "server-stateless:sep-2575-server-implements-discover"],
                "client": ["sse-retry"],
            },
        ),
        ("server:\n- a\n- b\n", {"server": ["a", "b"]}),
        ("server: []\n", {"server": []}),
        ("server: [a, b:c]\n", {"server": ["a", "b:c"]}),
        ("server:\n", {"server": None}),
        ("# only a comment\n", None),
        ("---\nserver:\n  - a\n", {"server": ["a"]}),
        ("k: 'it''s: quoted' # note\n", {"k": "it's: quoted"}),
        ('k: "tab\\there \\"q\\""\n', {"k": 'tab\there "q"'}),
        ("k: ~\nj: null\nl: 2025-11-25\n", {"k": None, "j": None, "l": "2025-11-25"}),
        (
            "rows:\n  - check: a\n    level: MUST\n  - text: b\n    excluded: c\n",
            {"rows": [{"check": "a", "level": "MUST"}, {"text": "b", "excluded": "c"}]},
        ),
        ("- - nested\n", [["nested"]]),
    ],
)
def test_reads_the_subset(text: str, value: object) -> None:
    assert loads(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "server:\n  - &anchor a\n",
        "server: |\n  block\n",
        "server: {a: b}\n",
        "k: 'unterminated\n",
        "k: v\nk: w\n",
        "server:\n\t- a\n",
        "a: b\n  c: d\n",
        "server: [a, [b]]\n",
        "just a scalar line\nk: v\n",
    ],
)
def test_refuses_what_is_outside_the_subset(text: str) -> None:
    with pytest.raises(YamlError, match="line"):
        loads(text)


def test_agrees_with_pyyaml_on_the_subset() -> None:
    yaml = pytest.importorskip("yaml")
    for text in (OFFICIAL_BASELINE, "server:\n- a\n", "k: 'it''s'\nl:\n  - x: '1'\n    y: z\n"):
        assert loads(text) == yaml.safe_load(text)


def test_bounded_and_linear() -> None:
    with pytest.raises(YamlError, match="bytes"):
        loads("k: v\n" * (MAX_YAML_BYTES // 4))
    escaped = 'k: "' + '\\"' * 200_000 + '"\n'
    deep = "".join(" " * depth + "- \n" for depth in range(40))
    started = time.perf_counter()
    assert loads(escaped) == {"k": '"' * 200_000}
    with pytest.raises(YamlError, match="deeper"):
        loads(deep + " " * 40 + "- x\n")
    assert time.perf_counter() - started < 2
