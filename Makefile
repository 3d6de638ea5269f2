# Set-up and entry points; README.md names `make run` and `make test`.
# Everything a fresh machine needs is installed from here (apt and PyPI).

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# llama-cpp-python compiles from source (~8 min on 2 cores); a portable build,
# not one tuned to the build machine's CPU.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: run test lint system-test-deps

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[cpu-models,dev]'
	touch $@

# What the tests drive besides Python: a real browser, network namespaces, sox,
# sipp (a real SIP peer) and Kamailio (the SIP edge).
system-test-deps:
	@if ! command -v chromium >/dev/null || ! command -v ip >/dev/null || ! command -v sox >/dev/null || ! command -v sipp >/dev/null || ! test -x /usr/sbin/kamailio; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium iproute2 sox sip-tester kamailio >/dev/null; \
	fi

run: $(VENV)/.installed
	$(PY) -m agent serve

test: $(VENV)/.installed system-test-deps
	$(PY) -m pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy agent telephony infra
