# Quick start: `make demo` runs an example chain end to end; `make test` runs every check.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: setup test lint typecheck unit demo bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

lint: setup
	$(BIN)/ruff check chains codegen tests examples benchmarks
	$(BIN)/ruff format --check chains codegen

typecheck: setup
	$(BIN)/mypy --strict chains codegen

unit: setup
	$(BIN)/pytest

test: lint typecheck unit

# Push the streaming example as local processes, call it (the text streams in as it is
# generated), and stop it again, whatever happened in between.
DEMO_ARGS := '{"prompt": "chains streams every token as soon as it is made", "max_tokens": 9}'
demo: setup
	@trap '$(BIN)/chains stop streaming >/dev/null 2>&1' EXIT; \
	set -e; \
	echo '$$ chains push examples/streaming/chain.py'; \
	$(BIN)/chains push examples/streaming/chain.py; \
	echo; echo "$$ chains call streaming --json $(DEMO_ARGS)"; \
	$(BIN)/chains call streaming --json $(DEMO_ARGS); \
	echo; echo '$$ chains stop streaming'; \
	$(BIN)/chains stop streaming

clean:
	rm -rf $(VENV) .chains .mypy_cache .pytest_cache .ruff_cache
