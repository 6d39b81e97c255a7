"""The census at the end of a run: the CPU of the processes the tests started, and of the interpreters among them,
what importing the ``mcp`` SDK cost them. Every process's is the kernel's count, ``RUSAGE_CHILDREN`` of the pytest
processes: their descendants reaped along a chain of waiting parents (not orphans). The interpreters': a
``sitecustomize`` first on ``PYTHONPATH`` writes a line at each one's start, when ``import mcp`` has run (the CPU of
the package's ``__init__``, which imports most of the SDK) and at exit (not where a signal ends it, as uvicorn
re-raises SIGTERM). It misses what runs without that ``PYTHONPATH`` (an environment built from nothing, a gateway's
processes but for ``--pass-env``), ``python -I``/``-E``/``-S``, and processes in a read-only host (sealed ones).
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
from pathlib import Path

import pytest

HOOK = """\
import atexit, os, sys, time
from importlib.machinery import PathFinder
_directory, _import = os.path.dirname(os.path.abspath(__file__)), ""
def _write(cpu=""):
    try:
        with open(os.path.join(_directory, str(os.getpid())), "w") as out:
            out.write(f"{_import}\\t{cpu}\\t{' '.join(sys.orig_argv)}".replace("\\n", " "))
    except OSError:
        pass
class _Mcp:
    def find_spec(name, path=None, target=None):
        if name != "mcp" or (spec := PathFinder.find_spec(name, path)) is None:
            return None
        sys.meta_path.remove(_Mcp)
        run = spec.loader.exec_module
        def timed(module):
            global _import
            start = time.process_time()
            run(module)
            _import = round(time.process_time() - start, 3)
            _write()
        spec.loader.exec_module = timed
        return spec
_write()
sys.meta_path.insert(0, _Mcp)
atexit.register(lambda: _write(round(time.process_time(), 3)))
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def program(argv: str) -> str:
    """What an interpreter ran, in a few words: the module (``-m``) or the script, and its first argument."""
    words = [word for word in argv.split()[1:] if not word.startswith("-") or word in ("-m", "-c")]
    if words[:1] == ["-m"]:
        return " ".join(words[1:3])
    return "-c" if words[:1] == ["-c"] or not words else " ".join([Path(words[0]).name, *words[1:2]])


class Census:
    """The plugin: the controller (or a lone pytest) makes the hook's directory and prints the table; each worker
    reports its pid (its own records are not the tests') and its children's CPU."""

    def __init__(self, config: pytest.Config) -> None:
        self.children, self.pids, self.worker = 0.0, {os.getpid()}, hasattr(config, "workerinput")
        if not self.worker:  # any uid may write there, not in /tmp: a contained process has one of its own
            self.directory = Path(tempfile.mkdtemp(prefix="mcp-census-", dir="/var/lib" if os.geteuid() == 0 else None))
            self.directory.chmod(0o1777)
            (self.directory / "sitecustomize.py").write_text(HOOK)
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.directory), os.getenv("PYTHONPATH")]))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.worker:
            session.config.workeroutput["census"] = (os.getpid(), children_cpu())  # type: ignore[attr-defined]

    def pytest_testnodedown(self, node: object, error: object) -> None:
        pid, cpu = getattr(node, "workeroutput", {}).get("census", (0, 0.0))
        self.pids.add(pid)
        self.children += cpu

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.worker:
            return
        rows: dict[str, list[float]] = {}  # by program: interpreters, importers of mcp, its CPU, CPU at exit
        for record in (path for path in self.directory.glob("[0-9]*") if int(path.name) not in self.pids):
            imported, cpu, argv = record.read_text().split("\t", 2)
            row = rows.setdefault(program(argv), [0, 0, 0.0, 0.0])
            row[:] = row[0] + 1, row[1] + bool(imported), row[2] + float(imported or 0), row[3] + float(cpu or 0)
        write = terminalreporter.write_line
        terminalreporter.section("census: the processes the tests started")
        write(f"every process: {self.children or children_cpu():.0f} CPU-s (the kernel's RUSAGE_CHILDREN)")
        write("interpreters, those that imported mcp, CPU-s of that import, CPU-s at exit (if seen); by program:")
        every = [sum(row[i] for row in rows.values()) for i in range(4)]
        for name, (count, importers, importing, seconds) in [
            *sorted(rows.items(), key=lambda item: -item[1][2] - item[1][3])[:12],
            ("(every interpreter seen)", every),
        ]:
            write(f"{count:>6.0f} {importers:>6.0f} {importing:>7.1f} {seconds:>7.1f}  {name[:80]}")

    def pytest_unconfigure(self) -> None:
        if not self.worker:
            shutil.rmtree(self.directory, ignore_errors=True)
