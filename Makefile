# dagster-ir: `make demo` runs the pipeline on the bundled sample, `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TRANSFORMERS_VERBOSITY ?= error
export HF_HUB_DISABLE_PROGRESS_BARS ?= 1
export DAGSTER_IR_DATA ?= $(CURDIR)/data
export DAGSTER_HOME ?= $(DAGSTER_IR_DATA)/dagster_home

.PHONY: demo test test-fast lint format ui bench learning-curves docs docs-serve install install-dev install-docs browser clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(BIN)/.installed-dev: $(BIN)/.installed
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# the docs extra alone (MkDocs, Material, mkdocstrings): the API reference is read from the sources,
# so building the site needs neither the project nor torch installed
$(BIN)/.installed-docs: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']))")
	touch $@

install: $(BIN)/.installed
install-dev: $(BIN)/.installed-dev
install-docs: $(BIN)/.installed-docs

## demo: install, then materialize every asset on the embedded default (only what is stale)
demo: install
	mkdir -p $(DAGSTER_HOME)
	$(BIN)/dagster-ir demo

## test: install with dev extras, then run every test (what CI runs); the 20 slowest are listed at the end
test: install-dev
	$(BIN)/python -m pytest -q --durations=20

## test-fast: the tests that are not slow by nature (markers `slow` and `processes`, see pyproject.toml), in
## TEST_WORKERS processes (a test file to a worker): the check before each commit, under 3 minutes on 2 cores
TEST_WORKERS ?= 2
test-fast: install-dev
	$(BIN)/python -m pytest -q -m "not slow and not processes" -n $(TEST_WORKERS) --dist loadfile --durations=10

## lint: the formatter's check, the linter, and the type check of dagster_ir/ (what CI runs before the tests)
lint: install-dev
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

## format: rewrite the tree as `make lint` wants it (the formatter, then the linter's safe fixes)
format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## browser: Debian's chromium and chromium-driver for the browser test (tests/assets/test_browser.py),
## installed when absent (as root, or through sudo); without them that test skips and says why
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  echo "chromium and chromedriver present"; \
	else \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium chromium-driver \
	    || echo "could not install chromium (no apt or no network): the browser test will skip"; \
	fi

## ui: the Dagster UI on http://127.0.0.1:3000 over the same data and instance as `make demo`
ui: install
	$(BIN)/python -m assets.cli.instance $(DAGSTER_HOME)
	$(BIN)/dagster dev -h 127.0.0.1 -p 3000 -w workspace.yaml

## bench: every speed and memory benchmark, one after the other; the ratios in benchmarks/out/summary.md
## and in docs/snippets/bench.md, the table of the documentation's Performance page
bench: install-dev
	$(BIN)/python benchmarks/summary.py --docs docs/snippets/bench.md

## learning-curves: validation nDCG@10 of the trained methods at x1, x4 and x16 their demo budget on Cranfield
## (../shared/data/cranfield), beside BM25's: a PNG per method and a table in benchmarks/out/learning_curves/;
## CURVES chooses what runs, e.g. CURVES="--methods knrm ghrm bert --folds 0 1 2 3 4 --seeds 0 1 2 --budgets 1 4"
CURVES ?=
learning-curves: install-dev
	$(BIN)/python benchmarks/learning_curves.py $(CURVES)

## docs: the documentation site (docs/, mkdocs.yml) into site/; broken links, missing pages or references fail it
docs: install-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## docs-serve: the site on http://127.0.0.1:8000, rebuilt on every edit
docs-serve: install-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a 127.0.0.1:8000

clean:
	rm -rf data
