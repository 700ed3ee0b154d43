# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CERTS  := certs/dev
PORT   ?= 9443

.PHONY: test demo certs serve bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest

$(CERTS)/tls.crt: $(VENV)/.installed
	$(PY) -m webhook certs --service kubevirt-colocate --namespace kubevirt-colocate \
		--extra-san localhost --extra-san 127.0.0.1 --out $(CERTS) --days 30

certs: $(CERTS)/tls.crt

# Serve the bundled example cluster, send it the example VM pod, print what was decided.
demo: $(CERTS)/tls.crt
	@PY=$(PY) CERTS=$(CERTS) PORT=$(PORT) sh examples/demo.sh

# The admission path against a bare aiohttp server, and the store's memory; the keeper against a
# drained cluster, and its memory (README: Performance).
bench: $(VENV)/.installed
	$(PY) -m bench
	$(PY) -m bench.keeper

serve: $(CERTS)/tls.crt
	$(PY) -m webhook serve --state examples/cluster.yaml --host 127.0.0.1 --port $(PORT) \
		--tls-cert-file $(CERTS)/tls.crt --tls-key-file $(CERTS)/tls.key

clean:
	rm -rf $(VENV) $(CERTS) .pytest_cache
