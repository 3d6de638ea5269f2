# The agent image: the agent on its embedded CPU default (Whisper tiny.en, Gemma 3 270M, the
# Piper voice), every model baked in at build time, so the container starts without any
# download (HF_HUB_OFFLINE=1 proves it: a download would fail). The same image is the
# production worker: with STT_URL, LLM_URL and TTS_URL set it calls the GPU model servers
# (infra/docker/*.Dockerfile) instead. docs/deploy.md has the whole picture.
#
#   docker build -t collections-agent:0.1.0 .
#   docker run --rm -p 8080:8080 collections-agent:0.1.0
#
# Base images are pinned by version tag; pin them by digest too where your registry allows
# (--build-arg PYTHON_IMAGE=python:3.11.15-slim-bookworm@sha256:...): the digests could not be
# looked up from the machine these files were written on.
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm
ARG NODE_IMAGE=node:22.23.2-bookworm-slim

# Chart.js for the console's dashboard: the Makefile's own `make vendor` recipe (npm pack, then
# its sha256 checked), so the image and `make test` vendor the same file the same way.
FROM ${NODE_IMAGE} AS vendor
RUN apt-get update \
 && apt-get install -y --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
RUN make vendor

FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
WORKDIR /app
# The dependencies first, installed against empty packages, so that a change to the code does
# not recompile llama.cpp. The install is `make run`'s (infra/docker/install-agent.sh): the
# runtime and the cpu-models extra, never the test or lint extras; the project in editable mode
# from /app, where the code then lands (agent/ with its package data: the planner's profiles in
# agent/profiles, which the console's dashboard reads).
COPY pyproject.toml ./
COPY infra/docker/install-agent.sh infra/docker/install-agent.sh
RUN mkdir -p agent telephony infra \
 && touch agent/__init__.py telephony/__init__.py infra/__init__.py \
 && sh infra/docker/install-agent.sh /opt/venv/bin/python cpu-models
COPY alembic.ini ./
COPY migrations migrations
COPY prompts prompts
COPY telephony telephony
COPY infra infra
COPY agent agent
COPY --from=vendor /src/agent/server/web/vendor agent/server/web/vendor
# Bake the models (the Gemma file is assembled into the agent user's cache), load each one once,
# and compile the bytecode now: the root file system is read-only when the image runs.
RUN HOME=/home/agent HF_HUB_OFFLINE=1 /opt/venv/bin/python infra/docker/bake_cpu_models.py --load \
 && /opt/venv/bin/python -m compileall -q agent telephony infra migrations

FROM ${PYTHON_IMAGE}
# libgomp1: llama.cpp's OpenMP runtime.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 agent \
 && useradd --uid 10001 --gid 10001 --home-dir /home/agent --create-home \
        --shell /usr/sbin/nologin agent
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    HOME=/home/agent \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    HOST=0.0.0.0 \
    PORT=8080
# Code and models belong to root and are read-only to the agent; only /app/data (the SQLite
# default, the embedded servers' logs) is its own, and a volume in compose and Kubernetes.
COPY --from=build /opt/venv /opt/venv
COPY --from=build /home/agent/.cache /home/agent/.cache
COPY --from=build /app /app
WORKDIR /app
RUN install -d -o 10001 -g 10001 /app/data
USER 10001:10001
# 8080: HTTP (call page, console, API, /metrics); 5060/udp: SIP when SIP_PORT=5060. RTP uses
# ephemeral UDP ports (32768-60999).
EXPOSE 8080 5060/udp
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PORT', '8080'), timeout=4)"]
CMD ["python", "-m", "agent", "serve"]
