# The LLM server on a GPU: Gemma 3 27B instruction-tuned behind vLLM's OpenAI-compatible server,
# started by the project's own script (infra/llm/vllm-gemma3-27b.sh: FP8 weights and KV cache,
# prefix caching for the shared system prompt; docs/llm-serving.md), the weights baked in.
#
#   docker build -f infra/docker/llm-vllm.Dockerfile --secret id=hf_token,env=HF_TOKEN \
#       -t collections-llm-gpu:0.1.0 .
#   docker run --rm --gpus all --shm-size 16g -p 8002:8002 collections-llm-gpu:0.1.0
#
# Gemma's weights are gated: the build needs a Hugging Face token that has accepted its terms,
# passed as the BuildKit secret hf_token (never a build argument). The image holds ~55 GB of
# bf16 weights: pre-pull it on the GPU nodes (or use your registry's image streaming) so a new
# replica does not wait for the pull.
# UNTESTED: no Docker engine and no GPU where this was written. vLLM 0.30.0's image is CUDA 13
# (driver 580 or newer; its -cu129 variant for older drivers) with torch 2.13.0, pyproject's
# pin. Pinned by version tag; add the @sha256 digest where your registry allows.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.30.0
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

FROM ${PYTHON_IMAGE} AS weights
ARG GEMMA_REPO=google/gemma-3-27b-it
ARG GEMMA_REVISION=main
COPY infra/docker/requirements-weights.txt infra/docker/fetch_weights.py /build/
RUN pip install --no-cache-dir -r /build/requirements-weights.txt
RUN --mount=type=secret,id=hf_token,required=true \
    python /build/fetch_weights.py "$GEMMA_REPO" "$GEMMA_REVISION" /models/gemma-3-27b-it \
        --include '*.json' --include '*.safetensors' --include 'tokenizer*'

FROM ${VLLM_IMAGE}
RUN groupadd --gid 10001 serve \
 && useradd --uid 10001 --gid 10001 --home-dir /home/serve --create-home \
        --shell /usr/sbin/nologin serve
COPY --from=weights /models /models
COPY --chmod=755 infra/llm/vllm-gemma3-27b.sh /app/infra/llm/vllm-gemma3-27b.sh
# The script's settings (infra/llm/vllm-gemma3-27b.sh): the baked weights, the agent's port.
ENV MODEL=/models/gemma-3-27b-it \
    HOST=0.0.0.0 \
    PORT=8002 \
    HOME=/home/serve \
    HF_HUB_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1
USER 10001:10001
EXPOSE 8002
# vLLM answers /health once the model is loaded and its CUDA graphs are captured.
HEALTHCHECK --interval=15s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8002/health', timeout=4)"]
ENTRYPOINT ["/app/infra/llm/vllm-gemma3-27b.sh"]
CMD []
