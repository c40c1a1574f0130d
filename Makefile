# Set-up installs torch 2.13.0 (the CPU wheel) first, then the project; the pin lives here,
# not in the package's dependency range.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
# The optional extras whose tests run in CI (each test skips with the reason where its
# extra is absent). .ci/constraints.txt keeps pip from replacing the CPU torch wheel.
TEST_EXTRAS := plot,wandb,mlflow,video,minari,ray,envpool

.PHONY: setup demo test lint bench clean

$(BIN)/.installed: pyproject.toml Makefile .ci/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -c .ci/constraints.txt -e ".[dev,$(TEST_EXTRAS)]"
	touch $@

setup: $(BIN)/.installed

demo: setup
	$(BIN)/python examples/demo_ppo_cartpole.py

test: setup
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist worksteal -q --durations=15 tests

lint: setup
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks
	$(BIN)/mypy --strict src tests/typing_checks.py

bench: setup
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python benchmarks/throughput.py
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python benchmarks/time_to_solve.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
