# glensidec: every target sets up what it needs in .venv first.
#   make demo   the main job: compile the bundled int8 CNN for the accelerator, run it,
#               co-simulate it on the RTL
#   make test   the whole test suite: lint, types, unit, integration and RTL tests
#   make quick  lint, types and the tests not marked `slow` (pytest -m 'not slow')
#   make sim    the RTL testbenches and whole-program co-simulations (cocotb + Verilator)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.deps-stamp
# pytest-xdist workers for the test suites: one per core by default; JOBS=1 runs serially.
JOBS   ?= auto

.PHONY: all demo test unit-tests rtl-tests quick sim lint lint-checks bench install clean

all: test

# Dependencies are installed once per change of pyproject.toml (with the `nas` extra:
# torch==2.13.0 resolves to its CPU wheel, so the NAS tests run here and in CI) ...
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet ".[dev,nas]"
	touch $@

# ... and the package itself is installed editable, so the venv always runs this tree.
# (tests/test_packaging.py builds the real wheel and runs compile and co-simulation from a
# plain, non-editable install of it.)
install: $(STAMP)
	$(BIN)/pip install --quiet --no-deps --editable .

# The main job: compile the bundled int8 CNN for the accelerator around a 16x16 array,
# show its layers and where the predicted cycles go, run the C program (its command
# runtime), and co-simulate it with every accelerator layer on the Verilog accelerator
# (ws_accel); all three must agree, and every layer take exactly its predicted cycles.
DEMO := out/small_cnn
demo: install
	$(BIN)/glensidec check examples/small_cnn.gs
	mkdir -p out
	$(BIN)/python examples/random_image.py out/image.npy
	$(BIN)/glensidec run examples/small_cnn.gs --input image=out/image.npy -o out/interpreter.npy
	$(BIN)/glensidec compile examples/small_cnn.gs --array 16x16 --verify -o $(DEMO)
	$(BIN)/python examples/show_layers.py $(DEMO)
	$(MAKE) -s -C $(DEMO)
	$(DEMO)/model image=out/image.npy -o out/c.npy
	$(MAKE) -C $(DEMO) sim PYTHON=$(abspath $(BIN))/python INPUTS="image=$(CURDIR)/out/image.npy" \
		OUTPUT=$(CURDIR)/out/sim.npy
	$(BIN)/python examples/compare.py out/interpreter.npy out/c.npy out/sim.npy

lint: install
	$(MAKE) --no-print-directory lint-checks

# (lint without the set-up: `make test` runs it beside the suites, after its own set-up.)
lint-checks:
	$(BIN)/ruff check glensidec tests $(wildcard sim bench)
	$(BIN)/mypy

# The unit tests and the RTL testbenches run side by side: alone, the RTL suite keeps two
# cores busy only part of the time (a worker waits for a build the other one makes, the
# last tests run alone), and so does the end of the unit tests. make -O prints each
# suite's output whole when it ends. (JOBS=1: lint, then one suite after the other, one
# test at a time.)
# --dist worksteal: an idle worker takes tests from the end of the other's queue (the
# default hands out tests in order, so a long co-simulation near the end ran alone);
# tests/conftest.py puts the co-simulating modules first.
# Lint runs beside them too: mypy from a fresh clone is about 30 CPU-s on one core, during
# which the other one sat idle when lint ran first. A lint failure still fails `make test`
# (once the suites have run).
ifeq ($(JOBS),1)
test: lint
	$(MAKE) --no-print-directory unit-tests rtl-tests
else
test: install
	$(MAKE) --no-print-directory -j3 -Otarget lint-checks unit-tests rtl-tests
endif

# (the two halves of `make test`, after its set-up and lint). Without this make's MAKEFLAGS:
# under -j2 they name a jobserver the tests' own `make` runs cannot reach, and each says
# so on stderr ("jobserver unavailable"), which tests of make's messages read.
unit-tests:
	env -u MAKEFLAGS -u MFLAGS $(BIN)/pytest -q -n $(JOBS) --dist worksteal tests

rtl-tests:
	env -u MAKEFLAGS -u MFLAGS $(MAKE) -C sim PYTHON=$(abspath $(BIN))/python JOBS=$(JOBS)

# The quick subset: no C builds, no simulation, no fuzzing (the tests marked `slow`).
quick: lint
	$(BIN)/pytest -q -n $(JOBS) --dist worksteal -m "not slow" tests

sim: install
	$(MAKE) -C sim PYTHON=$(abspath $(BIN))/python JOBS=$(JOBS)
	$(BIN)/pytest -q -n $(JOBS) tests/test_cosim.py

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) out build dist sim_build sim/sim_build .pytest_cache .mypy_cache .ruff_cache
