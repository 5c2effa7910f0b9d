# The README's two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Where tests read the real MNIST/Fashion-MNIST files; override with `make test TWINSGD_DATA=...`.
# Only where that folder exists: an empty TWINSGD_DATA is unset (the bundled subset, the tests
# that need real files skip), while one naming a missing folder is an error, as a user's should be.
TWINSGD_DATA ?= $(wildcard $(abspath ../shared/datasets))
export TWINSGD_DATA
# One BLAS thread per process: that is how MPI ranks run.
export OPENBLAS_NUM_THREADS = 1
export OMP_NUM_THREADS = 1
export MKL_NUM_THREADS = 1

.PHONY: demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[analysis,dev,mpich]'
	touch $@

# The main job, the twin, on the bundled data: measure a machine (network and the real program's
# step times), train on 2 MPI ranks, simulate the same run on the measured model, print them side
# by side. As root on an emulated cluster (2 hosts, 1 Gbit/s links), else on shared memory.
demo: $(BIN)/.installed
	BIN=$(BIN) bash scripts/demo.sh

test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Benchmarks print tables; PyTorch is installed for the kernel comparison only (never a dependency).
bench: $(BIN)/.installed
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/python benchmarks/kernels.py
	$(BIN)/python benchmarks/allreduce.py
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/compression.py
	$(BIN)/python benchmarks/speedup.py
	$(BIN)/python benchmarks/study.py
	$(BIN)/python benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
