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

# Two distributions, both editable: the product (capmaas, src/) and its development tools (capmaas-dev, tools/src/:
# simulator, dev cluster, demo, bench, CRD/release generators), which the image never installs.
$(VENV)/.installed: pyproject.toml tools/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,lint]' -e './tools[release]'
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create .venv with capmaas, its development tools (capmaas-dev) and its test/lint tools

.PHONY: controlplane
controlplane: ## Build (once, cached) etcd, kube-apiserver, kube-controller-manager, helm, CAPI core + clusterctl; CAPI CRDs
	bash hack/build-tools.sh etcd kube-apiserver kube-controller-manager helm capi-crds cluster-api clusterctl

# The one-node cluster and the daemonless image build need Debian packages; CI (root, fresh machine) gets them
# here. Only the missing ones are installed.
NODE_PACKAGES := containerd runc containernetworking-plugins buildah mmdebstrap iproute2 util-linux
# The documentation site's browser check (tests/release/test_docs_site.py) opens it in Debian's headless Chromium.
BROWSER_PACKAGES := chromium

# $(call apt_install,TARGET,PACKAGES): install those of PACKAGES that are missing (as root; else say which).
define apt_install
	@missing=$$(for p in $(2); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  [ "$$(id -u)" = 0 ] || { echo "$(1): missing $$missing; install them as root (apt-get install)"; exit 1; }; \
	  echo "installing $$missing"; apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -q --no-install-recommends $$missing; fi
endef

.PHONY: node-packages
node-packages:
	$(call apt_install,node-packages,$(NODE_PACKAGES))

.PHONY: browser-packages
browser-packages: ## Debian's Chromium, for the headless check of the documentation site (make test installs it)
	$(call apt_install,browser-packages,$(BROWSER_PACKAGES))

.PHONY: node
node: node-packages ## Build (once, cached) kubelet, kube-scheduler and the pause image for `capmaas dev-cluster up --node`
	bash hack/build-tools.sh kubelet kube-scheduler pause

.PHONY: image
image: venv node-packages ## Build the operator image without a daemon (buildah) into build/image/capmaas-dev.oci.tar
	bash hack/image.sh

.PHONY: generate
generate: venv ## Regenerate crds/ and the chart's CRDs from the pydantic models
	$(BIN)/capmaas crds --out crds --chart-dir deploy/charts/capmaas

.PHONY: verify
verify: venv ## Fail when generated files (CRDs) disagree with the models
	$(BIN)/capmaas crds --check --out crds --chart-dir deploy/charts/capmaas

.PHONY: lint
lint: venv ## ruff + mypy strict + import contracts
	$(BIN)/ruff check src tools/src tests
	$(BIN)/ruff format --check src tools/src tests
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: test
test: ## Everything CI runs: build tools and image, verify, lint, the whole test suite, the coverage gate; a time table
	bash hack/test.sh

.PHONY: coverage
coverage: ## make test with every test traced: the whole product's coverage report (slower: see CONTRIBUTING.md)
	CAPMAAS_COVERAGE=all bash hack/test.sh

.PHONY: check
check: venv ## The inner loop (about a minute): lint, types, import contracts, CRD drift, unit + fast integration tests
	bash hack/check.sh

.PHONY: bench-sim
bench-sim: venv ## Benchmark the MAAS simulator (requests/s for list/get/allocate at 1,000 and 5,000 machines)
	$(BIN)/python -m capmaas_dev.simulator.bench

.PHONY: docker-build
# The Dockerfile wants its base pinned by digest: PYTHON_DIGEST=sha256:... of $(DOCKER_PYTHON_IMAGE) (e.g. from
# `docker buildx imagetools inspect python:3.11-slim-bookworm`). Without it the tag is pulled and its digest used.
DOCKER_PYTHON_IMAGE ?= python:3.11-slim-bookworm
PYTHON_DIGEST ?=
.PHONY: docker-build
docker-build: venv ## Build the operator image with Docker, where an engine runs (`make image` needs none)
	@command -v docker >/dev/null && docker info >/dev/null 2>&1 \
	  || { echo "docker-build: no container engine here (use make image)"; exit 1; }
	rm -rf build/image/wheels && $(BIN)/pip wheel -q --wheel-dir build/image/wheels .  # the product only
	@digest='$(PYTHON_DIGEST)'; if [ -z "$$digest" ]; then docker pull -q $(DOCKER_PYTHON_IMAGE) >/dev/null; \
	  digest=$$(docker image inspect --format '{{index .RepoDigests 0}}' $(DOCKER_PYTHON_IMAGE) | cut -d@ -f2); fi; \
	  echo "base: $(DOCKER_PYTHON_IMAGE)@$$digest"; \
	  docker build --build-arg PYTHON_IMAGE=$(firstword $(subst :, ,$(DOCKER_PYTHON_IMAGE))) \
	    --build-arg PYTHON_DIGEST=$$digest -t capmaas:dev .

.PHONY: demo
demo: venv controlplane ## The whole system locally: control plane, MAAS simulator, operator, a sample cluster to Ready
	$(BIN)/capmaas demo

.PHONY: bench
bench: venv controlplane ## Operator benchmark (200 machines; ARGS="--machines 1000"); prints figures
	$(BIN)/python -m capmaas_dev.bench $(ARGS)

.PHONY: e2e
e2e: venv controlplane ## Only the end-to-end tests against the real CAPI core manager
	$(BIN)/pytest tests/e2e -m e2e -q --durations=20

.PHONY: release
release: venv node-packages ## Release artifacts into dist/: VERSION=X.Y.Z (= capmaas.__version__); see CHANGELOG.md
	@[ -n "$(VERSION)" ] || { echo "usage: make release VERSION=X.Y.Z"; exit 2; }
	bash hack/build-tools.sh helm
	$(BIN)/python -m capmaas_dev.release $(VERSION)

.PHONY: docs
docs: venv ## The documentation site from docs/ into build/site (mkdocs, strict); the generated reference pages checked first
	$(BIN)/python -m capmaas_dev.release.docref --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

.PHONY: clusterctl-repo
clusterctl-repo: venv ## Regenerate the clusterctl provider repository under deploy/clusterctl
	$(BIN)/python -m capmaas_dev.clusterctl_repo
