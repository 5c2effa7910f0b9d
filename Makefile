# The README's two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Where tests read the real MNIST/Fashion-MNIST files; override with `make test TWINSGD_DATA=...`.
TWINSGD_DATA ?= $(abspath ../shared/datasets)
export TWINSGD_DATA
# One BLAS thread per process: that is how MPI ranks run.
export OPENBLAS_NUM_THREADS = 1
export OMP_NUM_THREADS = 1
export MKL_NUM_THREADS = 1

.PHONY: demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[analysis,dev]'
	touch $@

demo: $(BIN)/.installed
	env -u TWINSGD_DATA $(BIN)/python -m real.train --out runs/demo

test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(BIN)/.installed
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/python benchmarks/kernels.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
