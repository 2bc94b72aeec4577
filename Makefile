# glensidec: every target sets up what it needs in .venv first.
#   make demo   the main job on a bundled example
#   make test   the whole test suite (lint, types, unit and integration tests)
#   make sim    the RTL testbenches under cocotb + Verilator

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.deps-stamp

.PHONY: all demo test sim lint bench install clean

all: test

# Dependencies are installed once per change of pyproject.toml ...
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet ".[dev]"
	touch $@

# ... and the package itself is reinstalled (non-editable) every time, so tests always
# exercise the wheel a user would get, with grammar/, templates/ and rtl/ inside it.
install: $(STAMP)
	$(BIN)/pip install --quiet --no-deps --force-reinstall .

demo: install
	$(BIN)/glensidec check examples/small_cnn.gs
	$(BIN)/glensidec run examples/small_cnn.gs --random-inputs 0 -o $(VENV)/small_cnn_out.npy

lint: install
	$(BIN)/ruff check glensidec tests $(wildcard sim bench)
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

sim: install
	$(MAKE) -C sim PYTHON=$(abspath $(BIN))/python

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build dist sim_build sim/sim_build .pytest_cache .mypy_cache .ruff_cache
