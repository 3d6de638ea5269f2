# The STT server on a GPU: Whisper large-v3-turbo through transformers (PyTorch, bf16, SDPA)
# behind the project's batching websocket server (infra/stt_server.py --backend transformers,
# docs/stt-backends.md), the weights baked into the image at build time.
#
#   docker build -f infra/docker/stt-gpu.Dockerfile -t collections-stt-gpu:0.1.0 .
#   docker run --rm --gpus all -p 8001:8001 collections-stt-gpu:0.1.0
#
# UNTESTED: no Docker engine and no GPU where this was written; the server and the backend are
# tested on the CPU (tests/test_stt_backends.py). The TensorRT-LLM backend (--backend trtllm)
# is not baked here: its engines are built for one GPU architecture and need that GPU while
# they build (infra/trtllm/build_whisper_engine.sh); build them on the serving node type and
# add them as a stage of this file once that has run.
# The torch wheel is PyPI's CUDA 13.0 build (driver 580 or newer). Base images are pinned by
# version tag; add @sha256 digests where your registry allows (not looked up here).
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

# The weights, downloaded once at build time (infra/docker/fetch_weights.py); pin the revision
# to a commit for a reproducible image.
FROM ${PYTHON_IMAGE} AS weights
ARG WHISPER_REPO=openai/whisper-large-v3-turbo
ARG WHISPER_REVISION=main
COPY infra/docker/requirements-weights.txt infra/docker/fetch_weights.py /build/
RUN pip install --no-cache-dir -r /build/requirements-weights.txt
RUN --mount=type=secret,id=hf_token,required=false \
    python /build/fetch_weights.py "$WHISPER_REPO" "$WHISPER_REVISION" /models/whisper-large-v3-turbo

# Ubuntu 24.04's Python 3.12 runs infra/ here (the project's own environment is 3.11; infra's
# servers use nothing newer). gcc and the headers: Triton builds its launcher with the host C
# compiler when torch.compile (--compile) runs.
FROM ${CUDA_IMAGE} AS python
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc \
 && rm -rf /var/lib/apt/lists/*

FROM python AS build
COPY infra/docker/requirements-stt-gpu.txt /build/
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir -r /build/requirements-stt-gpu.txt

FROM python
RUN groupadd --gid 10001 serve \
 && useradd --uid 10001 --gid 10001 --home-dir /home/serve --create-home \
        --shell /usr/sbin/nologin serve
COPY --from=build /opt/venv /opt/venv
COPY --from=weights /models /models
WORKDIR /app
COPY infra infra
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/serve \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
EXPOSE 8001
# The server answers /health only once the model is loaded and warmed up.
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8001/health', timeout=4)"]
CMD ["python", "-m", "infra.stt_server", "--host", "0.0.0.0", "--port", "8001", \
     "--backend", "transformers", "--model", "/models/whisper-large-v3-turbo", "--device", "cuda"]
