# The two commands of the README: `make demo` and `make test`.
# torch is installed first and pinned: these machines carry a CPU wheel of torch==2.13.0, and an
# unpinned torch would pull gigabytes of CUDA packages.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
TORCH := torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test install install-test browser lint bench clean dashboard

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.torch: | $(PY)
	$(PIP) install -q $(TORCH)
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.torch
	$(PIP) install -q -e ".[test]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# Debian's chromium + chromium-driver for the dashboard's real-browser test.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing Debian chromium + chromium-driver"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

demo: install
	$(VENV)/bin/podracer demo

# Opens the newest run of ./podracer-home (after `make demo`).
dashboard: install
	$(VENV)/bin/podracer dashboard

# One pytest-xdist worker per core (at most 4), each test file on one worker (its module fixtures
# built once); TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))

test: install-test browser
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: install-test
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: install
	$(PY) benchmarks/env_throughput.py
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/backtest_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
