# The LLM server on a GPU, the TensorRT-LLM alternative: Gemma 3 27B instruction-tuned behind
# trtllm-serve's PyTorch backend with the project's options (infra/llm/trtllm-gemma3-27b.yaml:
# FP8 KV cache, block reuse, padded CUDA graphs; docs/llm-serving.md), the weights baked in.
# The PyTorch backend serves the Hugging Face checkpoint directly: no engine to build.
#
#   docker build -f infra/docker/llm-trtllm.Dockerfile --secret id=hf_token,env=HF_TOKEN \
#       -t collections-llm-trtllm:0.1.0 .
#   docker run --rm --gpus all --shm-size 16g -p 8002:8002 collections-llm-trtllm:0.1.0
#
# Choose between this image and llm-vllm.Dockerfile by measurement (python -m
# infra.cache_hit_check, docs/llm-serving.md): block reuse with Gemma's sliding-window layers
# depends on the release. The served model name is the weights' path, so set the agent's
# LLM_MODEL=/models/gemma-3-27b-it with this image.
# UNTESTED: no Docker engine and no GPU where this was written. Pinned by version tag (NGC
# release 1.2.1, the tensorrt-llm version on PyPI); add the @sha256 digest where you can.
ARG TRTLLM_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.2.1
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

FROM ${PYTHON_IMAGE} AS weights
ARG GEMMA_REPO=google/gemma-3-27b-it
ARG GEMMA_REVISION=main
COPY infra/docker/requirements-weights.txt infra/docker/fetch_weights.py /build/
RUN pip install --no-cache-dir -r /build/requirements-weights.txt
RUN --mount=type=secret,id=hf_token,required=true \
    python /build/fetch_weights.py "$GEMMA_REPO" "$GEMMA_REVISION" /models/gemma-3-27b-it \
        --include '*.json' --include '*.safetensors' --include 'tokenizer*'

FROM ${TRTLLM_IMAGE}
RUN groupadd --gid 10001 serve \
 && useradd --uid 10001 --gid 10001 --home-dir /home/serve --create-home \
        --shell /usr/sbin/nologin serve
COPY --from=weights /models /models
COPY infra/llm/trtllm-gemma3-27b.yaml /app/infra/llm/trtllm-gemma3-27b.yaml
ENV HOME=/home/serve \
    HF_HUB_OFFLINE=1
USER 10001:10001
EXPOSE 8002
HEALTHCHECK --interval=15s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8002/health', timeout=4)"]
# The command of infra/llm/trtllm-gemma3-27b.yaml's header, on the baked weights.
CMD ["trtllm-serve", "/models/gemma-3-27b-it", "--backend", "pytorch", \
     "--host", "0.0.0.0", "--port", "8002", \
     "--max_batch_size", "64", "--max_num_tokens", "8192", \
     "--extra_llm_api_options", "/app/infra/llm/trtllm-gemma3-27b.yaml"]
