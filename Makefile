# Everything a fresh machine needs: `make demo` and `make test` create .venv and install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HASH := $(shell cat pyproject.toml | sha1sum | cut -c1-12)
# `make demo` installs what the demo needs (Java, incsync); `make test` adds the test extras, the JDBC
# drivers, Chromium and the MariaDB client (scripts/system-deps.sh).
DEMO_STAMP := $(VENV)/.installed-demo-$(HASH)
STAMP := $(VENV)/.installed-test-$(HASH)
PYTEST_ARGS ?=

.PHONY: demo test lint test-long test-faults bench system-deps venv clean dev ui

$(DEMO_STAMP): pyproject.toml
	@bash scripts/system-deps.sh demo
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	@rm -f $(VENV)/.installed-demo-*; touch $@

$(STAMP): pyproject.toml
	@bash scripts/system-deps.sh test
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,postgres]'
	@rm -f $(VENV)/.installed-test-*; touch $@ $(VENV)/.installed-demo-$(HASH)

venv: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/incsync demo --workdir demo

# Two workers, a test file each at a time (files share their module fixtures); `PYTEST_ARGS=-n0` runs serially.
# Every correctness test, end-to-end ones included; only what is marked `slow` waits for `make test-long` (among
# them the Iceberg and MariaDB rows of the end-to-end kind matrix: support.destinations.LONG_KINDS).
test: $(STAMP) lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow" --durations=25 $(PYTEST_ARGS)

# ruff (pyproject's [tool.ruff]: lint and import order) and mypy ([tool.mypy]: strict on core, transfer and the
# destination contract); `make test` runs both first.
lint: $(STAMP)
	$(BIN)/ruff check --no-cache .
	$(BIN)/mypy

# The `slow` tests: the state machine's long profile (9-14 min, docs/invariants.md) and the end-to-end
# runs that start servers (dagster dev, dagster-daemon on PostgreSQL, a Spark cluster, S3 through Connect,
# the quickstart in a clean copy with `make ui`, the asset page in Chromium), MariaDB repeats of source tests.
test-long: $(STAMP)
	INCSYNC_HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest -q -s -m slow $(PYTEST_ARGS)

# The SIGKILL soak: >= 200 transfers killed at random moments across Delta, PostgreSQL and object
# storage while a reader polls; prints the five counters (all must be 0). See docs/faults.md.
SOAK_ARGS ?= --kills 210
test-faults: $(STAMP)
	$(BIN)/python -m incsync_tests.faults.soak $(SOAK_ARGS)

# incsync as the README runs it (`incsync worker -c incsync.yaml` with local Spark, and the cold CLI, over a
# config of every recipient) against dlt on the same PostgreSQL data, A/B and C200 (200 tenants, 5M rows);
# S: 10,000 recipients, one scheduled cycle through dagster-daemon (benchmarks/scale_daemon.py). Both on
# a SQLite-backed and a PostgreSQL-backed Dagster instance (deploy/dagster.yaml's storage over a database
# each run creates and drops); see benchmarks/README.md "Instances: SQLite and PostgreSQL".
BENCH_ARGS ?= --workloads A,B,C --c-tenants 200 --c-rows 5000000 --instance sqlite,postgres
S_ARGS ?= --recipients 10000 --instance sqlite,postgres
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,postgres,bench]'
	$(BIN)/python benchmarks/compare_dlt.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/scale_daemon.py $(S_ARGS)

# The UI over the demo's instance (after `make demo`), or over INCSYNC_CONFIG / DAGSTER_HOME you set: the
# project's dagster.yaml (run monitoring, run limits) and the demo's PostgreSQL DSN (demo/ui.env), so a
# scheduled run launched from the UI reaches the same destinations. `make ui UI_PORT=3001` serves another port.
INCSYNC_CONFIG ?= demo/incsync.yaml
DAGSTER_HOME ?= demo/.dagster
UI_PORT ?= 3000
ui: $(DEMO_STAMP)
	@test -f "$(INCSYNC_CONFIG)" || { echo "no $(INCSYNC_CONFIG): run 'make demo' first or set INCSYNC_CONFIG"; exit 1; }
	@mkdir -p "$(DAGSTER_HOME)" && $(BIN)/incsync dagster-yaml -c "$(INCSYNC_CONFIG)" --base dagster.yaml -o "$(DAGSTER_HOME)/dagster.yaml"
	set -a; if [ -f "$(dir $(INCSYNC_CONFIG))ui.env" ]; then . "$(dir $(INCSYNC_CONFIG))ui.env"; fi; set +a; \
	INCSYNC_CONFIG="$(abspath $(INCSYNC_CONFIG))" DAGSTER_HOME="$(abspath $(DAGSTER_HOME))" \
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

dev: ui

clean:
	rm -rf $(VENV) demo .dagster .pytest_cache .hypothesis
