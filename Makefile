# ragmesh: the two commands are `make run` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test test-fast proto bench chromium prometheus redis clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch pinned first: pip takes the CPU build from this machine's disk
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

proto: $(STAMP)
	$(BIN)/python -m ragmesh.protogen

run: $(STAMP)
	$(BIN)/python -m deploy.run

# Chromium drives the web-page test; installed from Debian when missing.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Prometheus scrapes the four services in the metrics test; installed from Debian when missing.
prometheus:
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }

# redis-server backs the gateway replicas' shared state in the replica tests; installed from Debian when missing.
redis:
	@test -x /usr/bin/redis-server || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

test: $(STAMP) chromium prometheus redis
	$(BIN)/python -m pytest -q --durations=25

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m 'not slow'

# `make bench`: the parts that fit 30 minutes on 2 cores (`CPU_CLASS=avx2`: as the AVX2 class, bench/README.md). `make bench ONLY=access` (or any parts,
# space-separated) runs those parts only, in full; `make bench ALL=1` every part in full (bench/README.md).
bench: $(STAMP)
	$(BIN)/python -m bench $(if $(ONLY),--only $(ONLY)) $(if $(ALL),--all)

clean:
	rm -rf $(VENV) data .pytest_cache
