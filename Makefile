# Everything a fresh machine needs: `make demo` and `make test` create .venv and install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: demo test test-long bench system-deps venv clean dev

$(STAMP): pyproject.toml
	@bash scripts/system-deps.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/incsync demo --workdir demo

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-long: $(STAMP)
	INCSYNC_HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest -q -s incsync_tests/test_invariants.py $(PYTEST_ARGS)

# incsync (cold and warm) against dlt on the same PostgreSQL data; see benchmarks/README.md.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python benchmarks/compare_dlt.py $(BENCH_ARGS)

# The UI over the demo's instance (after `make demo`), or over INCSYNC_CONFIG / DAGSTER_HOME you set.
INCSYNC_CONFIG ?= demo/incsync.yaml
DAGSTER_HOME ?= demo/.dagster
dev: $(STAMP)
	@test -f "$(INCSYNC_CONFIG)" || { echo "no $(INCSYNC_CONFIG): run 'make demo' first or set INCSYNC_CONFIG"; exit 1; }
	mkdir -p "$(DAGSTER_HOME)" && $(BIN)/incsync dagster-yaml -c "$(INCSYNC_CONFIG)" --base dagster.yaml -o "$(DAGSTER_HOME)/dagster.yaml"
	INCSYNC_CONFIG="$(abspath $(INCSYNC_CONFIG))" DAGSTER_HOME="$(abspath $(DAGSTER_HOME))" $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1

clean:
	rm -rf $(VENV) demo .dagster .pytest_cache .hypothesis
