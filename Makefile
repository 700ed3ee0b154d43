# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CERTS  := certs/dev
PORT   ?= 9443
# The image's dependencies, pinned with their hashes (README: Building the image), for the
# image's Python: the Dockerfile's base is python:3.12-slim (Linux; x86_64 and arm64 resolve alike).
LOCK   := requirements/image.txt
UV     := uv==0.13.9

.PHONY: test test-real demo certs serve bench clean lock lock-upgrade release

# Helm's own engine for the chart's tests (tests/support/helm.py): Helm 4's Go library in a wheel. It declares
# Python >= 3.12, but it is a cffi wrapper that runs on 3.11 too, hence --ignore-requires-python
# (not expressible in pyproject.toml's test extra).
HELM_SDK := helm-sdkpy==0.1.32

# The runtime dependencies alone: what `make demo`, `make certs` and `make serve` need, no test tooling.
$(VENV)/.runtime: pyproject.toml Makefile
	@echo "make: a virtualenv in $(VENV) with kubevirt-colocate and its runtime dependencies (once; under a minute)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet -e .
	@touch $@

$(VENV)/.installed: pyproject.toml Makefile
	@echo "make: a virtualenv in $(VENV) with kubevirt-colocate and its test tooling (once; a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet --ignore-requires-python '$(HELM_SDK)'
	touch $(VENV)/.runtime $@

test: $(VENV)/.installed
	$(PY) -m pytest

# Only the tests on the real control plane (docs/development.md). Where KUBEBUILDER_ASSETS names no
# etcd, kube-apiserver and kube-scheduler it fails with one line: skipped, nothing would have run.
test-real: $(VENV)/.installed
	@$(PY) -c 'import sys; from kubefake.envtest import assets; found = assets(); \
		isinstance(found, str) and sys.exit(f"make test-real: {found}")'
	$(PY) -m pytest -m real

# Refresh the lock after a change to the dependencies in pyproject.toml: pins that still fit are
# kept. `make lock-upgrade` moves every pin to the newest version allowed.
lock: $(VENV)/.installed
	$(PY) -m pip install --quiet '$(UV)'
	$(VENV)/bin/uv pip compile pyproject.toml --quiet --no-python-downloads --generate-hashes \
		--python-version 3.12 --python-platform linux $(LOCK_FLAGS) -o $(LOCK)

lock-upgrade:
	$(MAKE) lock LOCK_FLAGS=--upgrade

$(CERTS)/tls.crt: $(VENV)/.runtime
	$(PY) -m webhook certs --service kubevirt-colocate --namespace kubevirt-colocate \
		--extra-san localhost --extra-san 127.0.0.1 --out $(CERTS) --days 30

certs: $(CERTS)/tls.crt

# Serve the bundled example cluster, send it the example VM pod, print what was decided.
demo: $(CERTS)/tls.crt
	@PY=$(PY) CERTS=$(CERTS) PORT=$(PORT) sh examples/demo.sh

# The admission path against a bare aiohttp server, and the store's memory; a drain storm (share-managers
# re-created at once beside VM starts) on 200 and 400 nodes, and through a real kube-apiserver; the keeper
# against a drained cluster, and its memory (docs/performance.md).
bench: $(VENV)/.installed
	$(PY) -m bench
	$(PY) -m bench.storm
	$(PY) -m bench.storm --nodes 400 --vms 10000
	$(PY) -m bench.beside
	@if [ -n "$$KUBEBUILDER_ASSETS" ]; then $(PY) -m bench.storm --apiserver real; \
	else echo "bench.storm --apiserver real skipped: KUBEBUILDER_ASSETS is not set (docs/development.md)"; fi
	$(PY) -m bench.keeper

serve: $(CERTS)/tls.crt
	$(PY) -m webhook serve --state examples/cluster.yaml --host 127.0.0.1 --port $(PORT) \
		--tls-cert-file $(CERTS)/tls.crt --tls-key-file $(CERTS)/tls.key

# Set VERSION everywhere it is written (webhook/__init__.py is the one source), build the wheel and the
# sdist, package the chart and the kubectl plugin's archive into dist/, print the image's build command.
# Pushes nothing.
release: $(VENV)/.installed
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z" >&2; exit 2; }
	$(PY) hack/release.py $(VERSION)

clean:
	rm -rf $(VENV) $(CERTS) .pytest_cache dist
