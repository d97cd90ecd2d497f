# Set-up is automatic: every target creates .venv and installs the pinned
# requirements the first time (or when requirements.txt / pyproject.toml change).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-slow test-all lint bench clean

$(STAMP): requirements.txt pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/decentopt compare --out results/compare

test: $(STAMP)
	$(PY) -m pytest
	$(PY) -m ruff check src tests benchmarks examples

# multi-process jobs and whole studies (CI runs them after `make test`)
test-slow: $(STAMP)
	$(PY) -m pytest -m slow

test-all: test test-slow

bench: $(STAMP)
	$(PY) benchmarks/bench_peers.py
	$(PY) benchmarks/bench_simulator.py
	$(PY) benchmarks/bench_fig1.py
	$(PY) benchmarks/bench_neural.py
	$(PY) benchmarks/bench_comm.py
	$(PY) benchmarks/bench_topologies.py
	$(PY) benchmarks/bench_compression.py
	$(PY) benchmarks/bench_problems.py

clean:
	rm -rf $(VENV) results
