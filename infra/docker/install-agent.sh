#!/bin/sh
# The agent's Python install: the commands `make` runs for .venv (Makefile, target
# $(VENV)/.installed) and the agent image runs at build time (Dockerfile, stage build).
#
#   sh infra/docker/install-agent.sh PYTHON EXTRAS
#
# PYTHON is the interpreter of the environment to install into (a venv's python); EXTRAS are
# pyproject.toml's extras, comma-separated: the image and `make run` take cpu-models, `make test`
# adds test. Run it from the repository root: the project is installed there, editable,
# exactly as make installs it. tests/test_deploy.py checks that these commands and the
# Makefile's stay the same.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 PYTHON EXTRAS" >&2
    exit 2
fi
python=$1
extras=$2
# llama-cpp-python compiles from source: a portable build, not one tuned to the build machine's
# CPU (the Makefile's default too).
CMAKE_ARGS=${CMAKE_ARGS:--DGGML_NATIVE=OFF}
export CMAKE_ARGS
"$python" -m pip install --quiet --upgrade pip
"$python" -m pip install --quiet -e ".[$extras]"
