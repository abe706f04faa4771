# Quick start: `make demo` runs an example chain end to end; `make test` runs every check.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: setup test lint typecheck unit demo bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "setting up $(VENV): chains and its dev tools, once (about 20 s with a warm pip cache)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@echo "$(VENV) is ready"
	touch $@

lint: setup
	$(BIN)/ruff check chains codegen tests examples benchmarks
	$(BIN)/ruff format --check chains codegen

typecheck: setup
	$(BIN)/mypy --strict chains codegen

# Two workers (pytest-xdist): most tests wait on processes they started, so two at a time
# take about two thirds of the time on a machine of two cores. conftest.py says what runs
# together on one worker. `make unit PYTEST_WORKERS=` runs them one at a time.
PYTEST_WORKERS ?= -n 2 --dist loadgroup

unit: setup
	$(BIN)/pytest $(PYTEST_WORKERS)

test: lint typecheck unit

# Push the streaming example as local processes, call it (the text streams in as it is
# generated), and stop it again.
demo: setup
	CHAINS=$(BIN)/chains examples/streaming/demo.sh
	@echo
	@echo "To use the chains command in this shell: source $(VENV)/bin/activate"

clean:
	rm -rf $(VENV) .chains .mypy_cache .pytest_cache .ruff_cache
