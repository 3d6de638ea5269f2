# The TTS server on a GPU: Orpheus 3B (vLLM, on localhost) speaking in SNAC codes, decoded to
# PCM by the project's TTS server (infra/tts_server.py --backend orpheus, infra/orpheus.py:
# leading silence trimmed, windows of all streams decoded in one batched SNAC call), both
# started by infra/docker/tts-gpu-entrypoint.sh on one GPU, the weights of both baked in.
#
#   docker build -f infra/docker/tts-gpu.Dockerfile --secret id=hf_token,env=HF_TOKEN \
#       -t collections-tts-gpu:0.1.0 .
#   docker run --rm --gpus all --shm-size 8g -p 8003:8003 collections-tts-gpu:0.1.0
#
# Orpheus's weights are gated (the Llama 3.2 licence): the build needs a Hugging Face token as
# the BuildKit secret hf_token. The base is vLLM's image (CUDA 13, torch 2.13.0: pyproject's
# pin), which also runs the TTS server, so torch is installed once.
# UNTESTED: no Docker engine and no GPU where this was written; the Orpheus code path is tested
# on the CPU (tests/test_orpheus.py). Pinned by version tag; add @sha256 digests where you can.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.30.0
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

FROM ${PYTHON_IMAGE} AS weights
ARG ORPHEUS_REPO=canopylabs/orpheus-3b-0.1-ft
ARG ORPHEUS_REVISION=main
ARG SNAC_REPO=hubertsiuzdak/snac_24khz
ARG SNAC_REVISION=main
COPY infra/docker/requirements-weights.txt infra/docker/fetch_weights.py /build/
RUN pip install --no-cache-dir -r /build/requirements-weights.txt
RUN --mount=type=secret,id=hf_token,required=true \
    python /build/fetch_weights.py "$ORPHEUS_REPO" "$ORPHEUS_REVISION" /models/orpheus-3b-0.1-ft \
        --include '*.json' --include '*.safetensors' --include 'tokenizer*'
RUN python /build/fetch_weights.py "$SNAC_REPO" "$SNAC_REVISION" /models/snac_24khz \
        --include config.json --include pytorch_model.bin

FROM ${VLLM_IMAGE}
COPY infra/docker/requirements-tts-gpu.txt /build/
RUN python3 -m pip install --no-cache-dir -r /build/requirements-tts-gpu.txt \
 && groupadd --gid 10001 serve \
 && useradd --uid 10001 --gid 10001 --home-dir /home/serve --create-home \
        --shell /usr/sbin/nologin serve
COPY --from=weights /models /models
WORKDIR /app
COPY infra infra
COPY --chmod=755 infra/docker/tts-gpu-entrypoint.sh /usr/local/bin/tts-gpu-entrypoint
ENV HOME=/home/serve \
    PORT=8003 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1
USER 10001:10001
EXPOSE 8003
# /health answers once Orpheus is up and SNAC is compiled and warmed for every batch size.
HEALTHCHECK --interval=15s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8003/health', timeout=4)"]
ENTRYPOINT ["/usr/local/bin/tts-gpu-entrypoint"]
CMD []
