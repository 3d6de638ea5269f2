#!/usr/bin/env bash
# vLLM OpenAI-compatible server for Gemma 3 27B instruction-tuned: FP8 weights (dynamic
# quantization at load) and FP8 KV cache, with automatic prefix caching so the shared system
# prompt is prefilled once and reused turn after turn. Verify with infra.cache_hit_check.
set -euo pipefail
exec vllm serve "${MODEL:-google/gemma-3-27b-it}" \
  --host "${HOST:-0.0.0.0}" --port "${PORT:-8002}" \
  --quantization fp8 \
  --kv-cache-dtype fp8 \
  --enable-prefix-caching \
  --max-model-len "${MAX_MODEL_LEN:-8192}" \
  --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.90}" \
  --served-model-name gemma-3-27b-it
