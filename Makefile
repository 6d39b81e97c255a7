# From a fresh clone: `make demo`, `make test` (the package's behaviour: what a contributor runs first) and
# `make test-all` (that, the interop matrix, lint and the docs build: what .ci/run runs).
# Each creates its own virtual environment in .venv (override with VENV=...).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The environments of servers on older mcp SDKs (tests/e2e/test_server_versions.py): one mcp per venv.
SERVER_VENVS := $(VENV)-mcp2-floor $(VENV)-mcp1-newest $(VENV)-mcp1-fastmcp2 $(VENV)-mcp1-floor
# Other people's servers that the conformance pack is run against (conformance/tests/test_conformance_thirdparty.py,
# docs/interop.md), each in an environment of its own, without this checkout: pyproject's groups of their names.
THIRDPARTY_VENVS := $(VENV)-fast-agent $(VENV)-ag2
# Stdio servers from the package index behind `mcp-sessions gateway --stdio` (tests/e2e/test_gateway_stdio.py),
# each in an environment of its own (they pin their own mcp): pyproject's group mcp-server-time.
STDIO_VENVS := $(VENV)-server-time
# The authorization server the gateway's token exchange is tested against (tests/e2e/test_gateway_exchange.py):
# idpyoidc, in an environment of its own: pyproject's group idpyoidc.
AUTH_VENVS := $(VENV)-idpyoidc
# fast-agent 0.5.3 needs Python 3.13.5: its venv holds what its example server imports (the group), and its sdist,
# whose examples/ the test runs, is downloaded beside it, unbuilt and uninstalled.
FAST_AGENT := fast-agent-mcp==0.5.3

.PHONY: demo test test-all system-deps system-deps-all lint docs dist bench bench-smoke clean

$(BIN)/pip:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/pip
	$(BIN)/pip install --quiet -e ".[demo]"
	touch $@

# The conformance pack (conformance/, a distribution of its own) installs beside the middleware: the tests
# run it as `mcp-sessions conformance` and as `mcp-sessions-conformance`. `make test`'s environment holds the
# pinned mcp SDK and what the package's own tests run (pyproject's test group); `make lint` adds the lint group
# (ruff and mypy: no test of `make test` runs them), and `make test-all`'s the lint group, the interop group (the
# viewers, other ASGI servers, the build tool, pipx and uv) and the docs group.
$(VENV)/.test-installed: pyproject.toml conformance/pyproject.toml | $(BIN)/pip
	$(BIN)/pip install --quiet -e ".[demo]" -e ./conformance --group test
	touch $@

$(VENV)/.lint-installed: $(VENV)/.test-installed
	$(BIN)/pip install --quiet --group lint
	touch $@

$(VENV)/.test-all-installed: $(VENV)/.lint-installed
	$(BIN)/pip install --quiet --group interop --group docs
	touch $@

$(VENV)-mcp%/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)-mcp$*
	$(VENV)-mcp$*/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	$(VENV)-mcp$*/bin/pip install --quiet -e . --group mcp$*
	touch $@

$(THIRDPARTY_VENVS:%=%/.installed): $(VENV)-%/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)-$*
	$(VENV)-$*/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	$(VENV)-$*/bin/pip install --quiet --group $*
	touch $@

$(VENV)-server-time/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)-server-time
	$(VENV)-server-time/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	$(VENV)-server-time/bin/pip install --quiet --group mcp-server-time
	touch $@

# No pip of its own: $(VENV)'s installs into it (pip --python), as it runs no pip itself (about 4 CPU-seconds fewer
# than a venv's own pip, upgraded).
$(VENV)-idpyoidc/.installed: pyproject.toml | $(BIN)/pip
	$(PYTHON) -m venv --without-pip $(VENV)-idpyoidc
	$(BIN)/pip --python $(VENV)-idpyoidc/bin/python install --quiet --group idpyoidc
	touch $@

$(VENV)-fast-agent/sdist/.downloaded: | $(VENV)-fast-agent/.installed
	$(VENV)-fast-agent/bin/pip download --quiet --no-deps --no-binary :all: --ignore-requires-python \
		--dest $(VENV)-fast-agent/sdist "$(FAST_AGENT)"
	touch $@

$(VENV)/.docs-installed: pyproject.toml | $(BIN)/pip
	$(BIN)/pip install --quiet --group docs
	touch $@

$(VENV)/.dist-installed: pyproject.toml | $(BIN)/pip
	$(BIN)/pip install --quiet --group dist
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/python examples/demo.py

# `make test`: every behaviour of the package, against the real parts that install in a minute or two (the
# pinned mcp SDK, redis-server, SQLite, the OpenTelemetry SDK, the node packages whose behaviour a test is
# about): the Python packages and the system ones install side by side, then pytest runs what pyproject's
# addopts select (not the interop matrix) with pytest-xdist, a file at a time per worker, slowest files first
# (tests/conftest.py), two workers a core: much of the suite waits on the processes and timers it tests, and the
# second worker of a core runs meanwhile. PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= $(shell echo $$((2 * $$(nproc))))
# The project's modules are compiled once, before the workers start: the workers and the few hundred gateways,
# servers and hosts the tests start import the same modules, and where PYTHONDONTWRITEBYTECODE is set each process
# compiled them afresh. So are the test modules as pytest rewrites their asserts: one collection, with
# PYTHONDONTWRITEBYTECODE unset so that pytest keeps what it rewrote, which the workers read (else each worker
# rewrites every test module, 5 CPU-seconds each).
COMPILE = $(BIN)/python -m compileall -q -j0 middleware conformance tests examples \
	&& PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q >/dev/null

test:
	$(MAKE) --no-print-directory -j2 --output-sync=target $(VENV)/.test-installed $(AUTH_VENVS:%=%/.installed) system-deps
	$(COMPILE)
	AUTH_SERVER_VENVS="$(abspath $(AUTH_VENVS))" $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --durations=20

LINT = $(BIN)/ruff check middleware conformance tests examples benchmarks scripts \
	&& $(BIN)/ruff format --check middleware conformance tests examples benchmarks scripts && $(BIN)/mypy \
	&& $(BIN)/ruff check --select C901,PLR0912,PLR0915 --exit-zero --output-format concise middleware conformance \
	&& $(BIN)/python scripts/count_lines.py
DOCS = NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# `make test-all` (.ci/run): `make test`'s suite and the interop matrix (tests/conftest.py's INTEROP: older mcp
# and fastmcp SDKs and third-party servers in environments of their own, other ASGI servers, Phoenix and MLflow,
# the official conformance suite, the benchmarks' smoke runs, the wheel and sdist builds), with the static
# checks (lint, docs; `make lint` and `make docs` run them alone) beside the tests, which leave a core idle much
# of the time; their output is kept until the tests end, and `make test-all` fails if either does.
# A worker a core here: the benchmarks' smoke runs and the viewers take a core each.
test-all: PYTEST_WORKERS = auto
test-all:
	$(MAKE) --no-print-directory -j2 --output-sync=target $(VENV)/.test-all-installed $(SERVER_VENVS:%=%/.installed) \
		$(THIRDPARTY_VENVS:%=%/.installed) $(STDIO_VENVS:%=%/.installed) $(VENV)-fast-agent/sdist/.downloaded \
		$(AUTH_VENVS:%=%/.installed) system-deps-all
	$(COMPILE)
	@echo "ruff, mypy and the docs build run beside the tests; their output follows the tests'"
	@($(LINT) && $(DOCS)) > $(VENV)/checks.log 2>&1 & checks=$$!; \
	MCP_SERVER_VENVS="$(abspath $(SERVER_VENVS))" THIRDPARTY_SERVER_VENVS="$(abspath $(THIRDPARTY_VENVS))" \
	STDIO_SERVER_VENVS="$(abspath $(STDIO_VENVS))" AUTH_SERVER_VENVS="$(abspath $(AUTH_VENVS))" \
	$(BIN)/python -m pytest -m "not soak" -n $(PYTEST_WORKERS) \
		--durations=20; tests=$$?; \
	wait $$checks; checked=$$?; \
	echo "--- lint and docs"; cat $(VENV)/checks.log; \
	[ $$checked -eq 0 ] || echo "lint and docs: failed"; \
	[ $$tests -eq 0 ] && [ $$checked -eq 0 ]

# redis-server, node, Node 22 (.cache/node22) and the node packages `make test`'s tests run; `--all` adds those of
# the interop matrix and the benchmarks (the conformance suite, supergateway).
system-deps:
	./scripts/system-deps.sh

system-deps-all:
	./scripts/system-deps.sh --all

# The site, into site/. --strict: a broken link, anchor or API reference fails the build.
docs: $(VENV)/.docs-installed
	$(DOCS)

# The wheel and the sdist, into dist/ (the wheel is built from the sdist).
dist: $(VENV)/.dist-installed
	rm -rf dist
	$(BIN)/python -m build --outdir dist

# Every benchmark, its results written to docs/performance.md. `make bench-smoke`: each one briefly, as
# `make test-all` runs them (the smoke runs, tests/e2e/test_benchmarks.py and test_gateway_benchmark.py).
bench: $(VENV)/.test-all-installed system-deps-all
	$(BIN)/python benchmarks/run_all.py --write docs/performance.md

bench-smoke: $(VENV)/.test-all-installed system-deps-all
	$(BIN)/python -m pytest -m interop tests/e2e/test_benchmarks.py tests/e2e/test_gateway_benchmark.py

lint: $(VENV)/.lint-installed
	$(LINT)

clean:
	rm -rf $(VENV) $(SERVER_VENVS) $(THIRDPARTY_VENVS) $(STDIO_VENVS) $(AUTH_VENVS) .pytest_cache .mypy_cache .ruff_cache .hypothesis site dist
