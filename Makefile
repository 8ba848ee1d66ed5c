# gpu-node-guard — the two commands a newcomer needs are `make dry-run` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
GUARD := $(VENV)/bin/gpu-node-guard
PROM_URL ?=
ENVTEST_VERSION ?= v1.34.4
# The DRA tier's control plane (tests/dra): DeviceTaintRule is GA (resource.k8s.io/v1) from 1.37.
DRA_ENVTEST_VERSION ?= v1.37.2

.PHONY: help install system-deps dry-run test lint typecheck rules dashboard rules-test policies policies-check config-check pytest envtest envtest-dra node deploytest engines image bench bench-smoke render wheel-check clean

help:
	@echo "make dry-run   # the guard's plan on the bundled incident (or PROM_URL=http://… for a real Prometheus)"
	@echo "make test      # lint, types, rule and policy drift, the wheel check, and every test tier"
	@echo "make bench     # time-to-isolate and cost-of-one-cycle benchmarks"
	@echo "make image     # both images (docker, podman or buildah; else the guard's offline), tagged as manifests/base deploys them"

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Prometheus and promtool come from Debian's `prometheus` package, VictoriaMetrics from
# `victoria-metrics` (the engines tier); nsenter and lspci for the evidence tools; `chromium`
# renders the report's HTML page in its test.
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v victoria-metrics >/dev/null || { \
	  echo "installing the Debian packages prometheus (server and promtool) and victoria-metrics"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq prometheus victoria-metrics >/dev/null; }
	@command -v chromium >/dev/null || { \
	  echo "installing the Debian package chromium (renders the report's HTML page in its test)"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

dry-run: install system-deps
ifeq ($(strip $(PROM_URL)),)
	$(PY) -m guard.example
else
	$(GUARD) run --dry-run --prometheus-url "$(PROM_URL)"
endif

lint: install
	$(VENV)/bin/ruff check guard tests bench hack
	$(VENV)/bin/ruff format --check guard tests bench hack

typecheck: install
	$(VENV)/bin/mypy

# The plain rules file and the PrometheusRule are generated from guard/generate/alerts.py; CI fails when they drift.
rules: install
	$(PY) -m guard.generate.alerts write

# The Grafana dashboard ConfigMap (manifests/components/grafana-dashboard).
dashboard: install
	$(PY) -m guard.generate.dashboard

# The rule tests themselves (promtool test rules tests/rules/*.test.yaml) run in the unit tier
# (Prometheus 2's promtool, tests/unit/test_alerts.py) and the prometheus tier (Prometheus 3's).
rules-test: install system-deps
	$(PY) -m guard.generate.alerts check
	promtool check rules manifests/prometheus/gpu-node-guard.rules.yaml

# The admission policies in policies/ (and its kustomization.yaml) are generated from
# guard/generate/policies and the settings; CI fails when they drift (docs/security.md).
policies: install
	$(PY) -m guard.generate.policies write

policies-check: install
	$(PY) -m guard.generate.policies check

# Both overlays rendered with kustomize (make deploytest) and proved coherent: the CronJob, the
# admission policies (their params) and the alert rules see the same settings (docs/deploy.md).
config-check: install deploytest
	$(GUARD) config check manifests/overlays/example
	$(GUARD) config check tests/overlays/every-setting

envtest:
	@ENVTEST_VERSION=$(ENVTEST_VERSION) hack/envtest/build.sh --kubectl --controller-manager

# kube-apiserver, kube-scheduler and kube-controller-manager of DRA_ENVTEST_VERSION for tests/dra
# (their own cache directory; KUBEBUILDER_ASSETS names the apiserver tier's binaries only).
envtest-dra:
	@env -u KUBEBUILDER_ASSETS ENVTEST_VERSION=$(DRA_ENVTEST_VERSION) hack/envtest/build.sh --controller-manager --scheduler

# The node tier (tests/node): the kubelet and kube-scheduler of ENVTEST_VERSION beside the
# envtest binaries, and the pause and guard images and the load-test image's CPU stand-in built
# offline (hack/node/build.sh: root, mmdebstrap, the Debian mirror and PyPI; rebuilt only when
# their inputs change). Debian: containerd runc containernetworking-plugins iptables mmdebstrap.
node: install
	@ENVTEST_VERSION=$(ENVTEST_VERSION) hack/envtest/build.sh --kubectl --controller-manager --scheduler --kubelet
	@PY=$(PY) hack/node/build.sh

# kustomize (for `kustomize edit set image`, as ArgoCD runs it) and the prometheus-operator CRDs,
# for tests/apiserver/test_deploy.py.
deploytest:
	@hack/deploytest/build.sh

# Prometheus 3 and Thanos for the engines tier, built once from the Go module proxy and cached.
engines:
	@hack/engines/build.sh

# Both images, with whichever OCI builder answers (docker, podman, buildah); without one, the
# guard's image offline as an OCI archive in dist/images (root, mmdebstrap; the load-test image's
# CUDA torch needs the registry), else one line and a skip. IMAGE=… LOADTEST_IMAGE=… choose other
# tags (default: manifests/base/images.yaml).
image: install
	@PY=$(PY) hack/build-images.sh

pytest: install system-deps
	$(PY) -m pytest

# The wheel alone in a fresh venv, run from outside the checkout: every --help, render, the example.
wheel-check: install system-deps
	hack/wheel-check.sh $(PY)

# The tiers but the node tier run in TEST_WORKERS pytest-xdist workers, a test file to a worker
# (`--dist loadfile`: a file's tests share module fixtures and run in order). Each worker starts
# its own servers (control planes, Prometheus, Alertmanager) on free loopback ports under its own
# temporary directory; most of their time is spent waiting on those servers, so 3 workers beat
# 2 even on 2 cores (docs/benchmarks.md, "CI time"). The node tier changes the host (root,
# mounts, sysctls) and runs alone, after the others.
TEST_WORKERS ?= 3
TEST_ASSETS = KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$$(ENVTEST_VERSION=$(ENVTEST_VERSION) hack/envtest/build.sh --print-path)}" \
	  DRA_ASSETS="$${DRA_ASSETS:-$$(env -u KUBEBUILDER_ASSETS ENVTEST_VERSION=$(DRA_ENVTEST_VERSION) hack/envtest/build.sh --print-path)}"

test: install system-deps envtest envtest-dra node deploytest engines lint typecheck rules-test policies-check config-check wheel-check bench-smoke
	$(TEST_ASSETS) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --ignore=tests/node
	$(TEST_ASSETS) $(PY) -m pytest tests/node

bench: install system-deps envtest engines
	$(PY) -m bench

# Every benchmark once (the cycle at 100 nodes, the return bench every 60 s of the slot; ~2 min),
# so the published tables can be re-run at every revision (docs/benchmarks.md).
bench-smoke: install system-deps envtest engines
	KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$$(ENVTEST_VERSION=$(ENVTEST_VERSION) hack/envtest/build.sh --print-path)}" $(PY) -m bench --quick > /dev/null

render: install
	$(GUARD) render --help

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
