# capmaas — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export CAPMAAS_CACHE ?= $(HOME)/.cache/capmaas
export GOTOOLCHAIN := local
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,lint]'
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create .venv with capmaas and its test/lint tools

.PHONY: controlplane
controlplane: ## Build (once, cached) etcd, kube-apiserver, kube-controller-manager, helm, CAPI core + clusterctl; CAPI CRDs
	bash hack/build-tools.sh etcd kube-apiserver kube-controller-manager helm capi-crds cluster-api clusterctl

.PHONY: generate
generate: venv ## Regenerate crds/ and the chart's CRDs from the pydantic models
	$(BIN)/capmaas crds --out crds --chart-dir deploy/charts/capmaas

.PHONY: verify
verify: venv ## Fail when generated files (CRDs) disagree with the models
	$(BIN)/capmaas crds --check --out crds --chart-dir deploy/charts/capmaas

.PHONY: lint
lint: venv ## ruff + mypy strict + import contracts
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: test
test: venv controlplane verify lint ## Everything CI runs: build tools, verify, lint, the whole test suite with coverage gates
	$(BIN)/pytest --cov --cov-report=term-missing:skip-covered -p no:cacheprovider
	$(BIN)/python hack/coverage_gate.py

.PHONY: bench-sim
bench-sim: venv ## Benchmark the MAAS simulator (requests/s for list/get/allocate at 1,000 and 5,000 machines)
	$(BIN)/python -m capmaas.simulator.bench

.PHONY: docker-build
docker-build: ## Build the operator image (needs a container engine; none runs on the project's CI machines)
	@command -v docker >/dev/null || { echo "docker-build: no container engine here (docker not found)"; exit 1; }
	docker build -t capmaas:dev .

.PHONY: demo
demo: venv controlplane ## The whole system locally: control plane, MAAS simulator, operator, a sample cluster to Ready
	$(BIN)/capmaas demo

.PHONY: bench
bench: venv controlplane ## Operator benchmark (200 machines; ARGS="--machines 1000"); prints figures
	$(BIN)/python -m capmaas.bench $(ARGS)

.PHONY: e2e
e2e: venv controlplane ## Only the end-to-end tests against the real CAPI core manager
	$(BIN)/pytest tests/e2e -m e2e -q --durations=20

.PHONY: clusterctl-repo
clusterctl-repo: venv ## Regenerate the clusterctl provider repository under deploy/clusterctl
	$(BIN)/python -m capmaas.clusterctl_repo
