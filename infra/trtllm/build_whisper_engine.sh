#!/usr/bin/env bash
# TensorRT-LLM engines (encoder/ and decoder/) for Whisper large-v3-turbo, for the STT
# server's trtllm backend (infra/whisper_trtllm.py, docs/stt-backends.md).
#
# UNTESTED: TensorRT-LLM cannot be installed or run on the development machines. The commands
# follow TensorRT-LLM's examples/models/core/whisper/README.md, with the C++ runtime's
# settings (paged KV cache, no input padding) and Whisper's whole 448-token decoder context.
set -euo pipefail

usage() {
    cat >&2 <<USAGE
usage: $0 ASSETS_DIR OUTPUT_DIR

  ASSETS_DIR  holds MODEL_NAME.pt, the OpenAI-format checkpoint; with openai-whisper:
              python -c "import whisper; whisper.load_model('large-v3-turbo', download_root='ASSETS_DIR')"
  OUTPUT_DIR  receives checkpoint/ (converted weights), encoder/ and decoder/ (the engines);
              serve it with: python -m infra.stt_server --backend trtllm --engine-dir OUTPUT_DIR
                             --model <the model's transformers directory, for its processor files>

environment (defaults in brackets):
  TRTLLM_WHISPER_EXAMPLE  TensorRT-LLM's examples/models/core/whisper (for convert_checkpoint.py)
                          of the installed tensorrt_llm version [required]
  MODEL_NAME              convert_checkpoint.py's --model_name [large-v3-turbo]
  MAX_BATCH_SIZE          the most finals in one model call; >= the server's --max-batch [16]
  INFERENCE_PRECISION     float16 or bfloat16 [float16]
  WEIGHT_ONLY_PRECISION   none, int8 or int4 [none]
  MAX_SEQ_LEN             decoder prompt + generated tokens, at most 448 [448]
USAGE
    exit 2
}

[[ $# -eq 2 ]] || usage
assets_dir=$1
output_dir=$2
example=${TRTLLM_WHISPER_EXAMPLE:-}
model_name=${MODEL_NAME:-large-v3-turbo}
max_batch_size=${MAX_BATCH_SIZE:-16}
precision=${INFERENCE_PRECISION:-float16}
weight_only=${WEIGHT_ONLY_PRECISION:-none}
max_seq_len=${MAX_SEQ_LEN:-448}

[[ -n $example ]] || { echo "$0: set TRTLLM_WHISPER_EXAMPLE" >&2; usage; }
[[ -f $example/convert_checkpoint.py ]] || {
    echo "$0: no convert_checkpoint.py in $example" >&2
    exit 1
}
[[ -f $assets_dir/$model_name.pt ]] || {
    echo "$0: no $model_name.pt in $assets_dir" >&2
    exit 1
}
command -v trtllm-build >/dev/null || {
    echo "$0: trtllm-build not found: install tensorrt_llm" >&2
    exit 1
}

quantization=()
case $weight_only in
    none) ;;
    int8 | int4) quantization=(--use_weight_only --weight_only_precision "$weight_only") ;;
    *)
        echo "$0: WEIGHT_ONLY_PRECISION must be none, int8 or int4, not $weight_only" >&2
        exit 2
        ;;
esac

checkpoint_dir=$output_dir/checkpoint
python3 "$example/convert_checkpoint.py" \
    --model_dir "$assets_dir" \
    --model_name "$model_name" \
    --dtype "$precision" \
    --output_dir "$checkpoint_dir" \
    "${quantization[@]}"

trtllm-build --checkpoint_dir "$checkpoint_dir/encoder" \
    --output_dir "$output_dir/encoder" \
    --moe_plugin disable \
    --max_batch_size "$max_batch_size" \
    --gemm_plugin disable \
    --bert_attention_plugin "$precision" \
    --max_input_len 3000 \
    --max_seq_len 3000

trtllm-build --checkpoint_dir "$checkpoint_dir/decoder" \
    --output_dir "$output_dir/decoder" \
    --moe_plugin disable \
    --max_beam_width 1 \
    --max_batch_size "$max_batch_size" \
    --max_seq_len "$max_seq_len" \
    --max_input_len 14 \
    --max_encoder_input_len 3000 \
    --gemm_plugin "$precision" \
    --bert_attention_plugin "$precision" \
    --gpt_attention_plugin "$precision" \
    --paged_kv_cache enable \
    --remove_input_padding enable

echo "engines in $output_dir/encoder and $output_dir/decoder" >&2
