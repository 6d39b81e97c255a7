"""Run every benchmark and write ``docs/performance.md`` from their results.

Each script in :data:`BENCHMARKS` takes ``--json OUT`` (and ``--quick`` for a few requests) and writes
there what ``_harness.finish`` returns: its ``sections`` (a title, a paragraph, a table) and its
``verdicts`` (a target, what was measured, met or not), with the run's duration, load and machine. This
script runs them one after another and puts the verdicts in one table, the machine in another, and each
section as it came. A script listed but not in ``benchmarks/`` is skipped (the page says so), which is
how a benchmark added later (``bench_stdio.py``) joins: its entry is already here.

    python benchmarks/run_all.py --write docs/performance.md    # the full run (make bench)
    python benchmarks/run_all.py --quick                         # every benchmark in its quick mode, to stdout
    python benchmarks/run_all.py --from DIR --write PAGE         # render the JSON files kept in DIR (--keep DIR)
    python benchmarks/run_all.py --only stdio --write PAGE       # run one benchmark, its parts of PAGE replaced

``--only NAME`` keeps the rest of the page as it is: NAME's verdict rows (each ends with ``<!-- NAME -->``, or
names one of its targets), its line of the machine table and its sections (its titles, and those that begin with its
first one's) are replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# name -> the script and its arguments for the page's run, in the page's order.
BENCHMARKS: dict[str, list[str]] = {
    "asgi": ["bench_asgi.py"],
    "uvicorn": ["bench_uvicorn.py"],
    "sse": ["bench_sse.py"],
    "scale_out": ["bench_scale_out.py"],
    "gateway": ["bench_gateway.py"],
    "stdio": ["bench_stdio.py"],  # the stdio gateway against supergateway
    "egress": ["bench_egress.py"],  # the stdio gateway's --process-network egress against host (as root)
    "masks": ["bench_masks.py"],  # a masked credential's HTTPS request through the gateway's proxy (as root)
    "restart": ["restart_latency.py"],  # a lone gateway's restart: its clients' latency and errors
}
EDIT = "edit the scripts, not this page"
RUN_FILE = "run.json"  # when the whole run started, how long it took, and the load then


def run(directory: Path, quick: bool, only: str | None = None) -> None:
    """Every benchmark there is (or ``only``), one after another, each writing its JSON into ``directory``."""
    began, load_before = time.monotonic(), os.getloadavg()
    for name, (script, *arguments) in BENCHMARKS.items():
        if not (HERE / script).exists() or only not in (None, name):
            continue
        print(f"running {script}", file=sys.stderr)
        command = [sys.executable, str(HERE / script), *arguments, "--json", str(directory / f"{name}.json")]
        subprocess.run([*command, *(["--quick"] if quick else [])], check=True, stdout=subprocess.DEVNULL)
    finished = {"seconds": round(time.monotonic() - began), "load_before": load_before, "load_after": os.getloadavg()}
    (directory / RUN_FILE).write_text(json.dumps(finished))


def numeric(cell: str) -> bool:
    return cell == "n/a" or cell.lstrip("+-x").replace(",", "").replace(".", "", 1).isdigit()


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, its columns of numbers aligned right."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(header)
    align = ["---:" if column and all(numeric(cell) for cell in column) else "---" for column in columns]
    lines = [f"| {' | '.join(header)} |", f"| {' | '.join(align)} |"]
    return "\n".join(lines + [f"| {' | '.join(row)} |" for row in rows])


def load(values: list[float]) -> str:
    return " / ".join(f"{value:.2f}" for value in values)


def machine_table(results: dict[str, dict[str, Any]], whole: dict[str, Any] | None) -> str:
    machine = next(iter(results.values()))["machine"]
    labels = {"cpu": "CPU", "cores": "cores", "system": "system", "python": "Python", "libraries": "libraries"}
    rows = [[label, machine[key]] for key, label in (labels | {"code": "code measured", "date": "date"}).items()]
    if whole is not None:
        rows += [
            ["run", f"{whole['seconds']} s in all"],
            ["load average (1 / 5 / 15 min) at start", load(whole["load_before"])],
            ["load average at end", load(whole["load_after"])],
        ]
    for name, result in results.items():
        script = BENCHMARKS[name][0]
        before, after = load(result["load_before"]), load(result["load_after"])
        rows.append([f"`{script}`", f"{result['seconds']} s; load {before} before, {after} after"])
    missing = [BENCHMARKS[name][0] for name in BENCHMARKS if name not in results]
    if missing:
        rows.append(["not run", ", ".join(f"`{script}`" for script in missing)])
    return table(["", "this run"], rows)


INTRODUCTION = """\
What the middleware costs per request, called directly, through a real server, on a long SSE stream,
across replicas and as a gateway, each against what a user would run instead, measured side by side in
one run on one machine. The scripts are in the repository's `benchmarks/`."""

QUICK = """\
**Quick run**: every benchmark ran a few requests only, to show that the whole chain renders. The
numbers mean nothing."""

READING = """\
## Reading the numbers

- **The control.** "pass-through control" wraps the app in an ASGI layer that does nothing: its ratio
  should read 1.00. How far it strays is the noise of this run; a smaller difference elsewhere means
  nothing.
- **The base of each row** is named in its table: the session case is compared with the bare app sent
  the same session-bearing body (which it ignores: the SDK itself pays for parsing the larger `_meta`).
- **Side by side.** The cases of a table are called one request (or one slice) at a time in a shuffled
  order, so that whatever else the machine does falls on every case alike: read the ratios, not the
  absolute numbers, and rows of one page only.
- **Cache state.** The same code costs more when other code ran in between and evicted it from the CPU
  caches: a layer costs more among `MCPServer` calls than in front of the trivial app.
- **Two uvicorn processes** of the same app can differ in CPU per request by tens of µs: the
  pass-through control through uvicorn shows how far in this run, which is what "within noise" is
  judged against.
- **Throughput through uvicorn** is bounded by the client as much as by the server on two cores: read
  the server CPU per request for the server's cost."""

REPRODUCE = """\
## How to reproduce

```sh
pip install -e ".[demo]" --group test       # the mcp SDK, uvicorn, httpx, the OpenTelemetry SDK, otel-asgi
python benchmarks/run_all.py --write docs/performance.md
```

Each script also runs on its own and prints its tables and verdicts: `python benchmarks/bench_asgi.py`,
`bench_uvicorn.py`, `bench_sse.py`, `bench_scale_out.py`, `bench_gateway.py`, `bench_stdio.py`,
`bench_egress.py`, `bench_masks.py`, `restart_latency.py` (`--help` for their sizes, `--quick` for a few requests,
as the tests run them); `--only NAME` runs one and puts its parts on the page. `bench_gateway.py`,
`bench_stdio.py`, `bench_egress.py` and `restart_latency.py` start `mcp-sessions gateway` by its command
(`bench_stdio.py` needs `scripts/system-deps.sh --all` for supergateway; `bench_egress.py` runs as root). Run on a
quiet machine if you can;
on a busy one, the control rows tell how much to trust the rest."""


def verdict_rows(name: str, result: dict[str, Any]) -> list[list[str]]:
    """A benchmark's verdict rows, each marked with its name (``--only`` finds them by it)."""
    return [[v["target"], v["measured"], f"{v['verdict']} <!-- {name} -->"] for v in result["verdicts"]]


def splice(page: str, name: str, result: dict[str, Any]) -> str:
    """``page`` with benchmark ``name``'s parts replaced by ``result``'s (see the module), the rest as it was."""
    mark, script = f"<!-- {name} -->", BENCHMARKS[name][0]
    head, _, rest = page.partition("\n## The machine\n")
    lines = head.split("\n")
    # a row is NAME's by its mark, or by its target (a page from before the marks)
    targets = tuple(f"| {verdict['target']} |" for verdict in result["verdicts"])
    ours = [index for index, line in enumerate(lines) if line.endswith(f"{mark} |") or line.startswith(targets)]
    verdicts = [line for index, line in enumerate(lines) if index not in ours]
    at = ours[0] if ours else max(index for index, line in enumerate(verdicts) if line.startswith("| ")) + 1
    verdicts[at:at] = table(["target", "measured", "verdict"], verdict_rows(name, result)).split("\n")[2:]
    before, after = load(result["load_before"]), load(result["load_after"])
    alone = f"run on its own, {result['machine']['code']}, {result['machine']['date']}"
    line = f"| `{script}` | {result['seconds']} s; load {before} before, {after} after; {alone} |"
    rows = rest.split("\n")
    if not any(row.startswith(f"| `{script}` |") for row in rows):  # its first run: its line at the table's end
        rows.insert(rows.index("", 1), line)
    rest = "\n".join(line if row.startswith(f"| `{script}` |") else row for row in rows)
    titles = {part["title"] for part in result["sections"]}
    parts = rest.split("\n## ")
    # a section is NAME's by its whole title: "stdio servers" is the first of bench_stdio's, and begins others'
    ours = [index for index, part in enumerate(parts) if part.split("\n")[0] in titles]
    fresh = [
        f"{part['title']}\n\n{part['text']}\n\n{table(part['header'], part['rows'])}\n" for part in result["sections"]
    ]
    at = ours[0] if ours else len(parts) - 2  # before "Reading the numbers" and "How to reproduce"
    parts = [part for index, part in enumerate(parts) if index not in ours]
    parts[at:at] = fresh
    return "\n".join(verdicts) + "\n## The machine\n" + "\n## ".join(parts)


def render(results: dict[str, dict[str, Any]], whole: dict[str, Any] | None) -> str:
    quick = any(result["smoke"] for result in results.values())
    verdicts = [row for name, result in results.items() for row in verdict_rows(name, result)]
    parts = [
        "# Performance",
        f"<!-- Generated by `python benchmarks/run_all.py --write docs/performance.md`: {EDIT} -->",
        INTRODUCTION,
        *([QUICK] if quick else []),
        "## Verdict",
        table(["target", "measured", "verdict"], verdicts),
        "## The machine",
        machine_table(results, whole),
    ]
    for result in results.values():
        for part in result["sections"]:
            parts += [f"## {part['title']}", part["text"], table(part["header"], part["rows"])]
    return "\n\n".join([*parts, READING, REPRODUCE]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="PAGE", help="write the page here (default: standard output)")
    parser.add_argument("--quick", "--smoke", action="store_true", help="every benchmark in its quick mode")
    parser.add_argument("--from", dest="source", metavar="DIR", help="render the JSON files in DIR; run nothing")
    parser.add_argument("--keep", metavar="DIR", help="keep the benchmarks' JSON files in DIR")
    parser.add_argument("--only", choices=BENCHMARKS, help="this benchmark alone, spliced into the --write page")
    args = parser.parse_args()
    if args.only and not args.write:
        parser.error("--only replaces one benchmark's parts of the page --write names")
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(args.source or args.keep or scratch)
        if not args.source:
            directory.mkdir(parents=True, exist_ok=True)
            run(directory, args.quick, args.only)
        if args.only:
            fresh = json.loads((directory / f"{args.only}.json").read_text())
            Path(args.write).write_text(splice(Path(args.write).read_text(), args.only, fresh))
            return
        results = {
            name: json.loads((directory / f"{name}.json").read_text())
            for name in BENCHMARKS
            if (directory / f"{name}.json").exists()
        }
        whole = json.loads((directory / RUN_FILE).read_text()) if (directory / RUN_FILE).exists() else None
    page = render(results, whole)
    if args.write:
        Path(args.write).write_text(page)
    else:
        print(page)


if __name__ == "__main__":
    main()
