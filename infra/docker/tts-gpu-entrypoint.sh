#!/usr/bin/env bash
# The GPU TTS container (infra/docker/tts-gpu.Dockerfile): Orpheus 3B served by vLLM on
# localhost, and the project's TTS server (infra/tts_server.py --backend orpheus) that streams
# its SNAC codes as PCM, on one GPU. Orpheus is a 3B model: it shares the GPU with the SNAC
# decoder rather than taking one of its own.
#
# Either process ending ends the container (with its exit status), so that compose's restart
# policy or Kubernetes restarts both; SIGTERM stops both.
#
# Environment (defaults in brackets): PORT, the TTS server's port [8003]; ORPHEUS_MODEL_DIR
# [/models/orpheus-3b-0.1-ft]; ORPHEUS_PORT [8010]; ORPHEUS_GPU_MEMORY_UTILIZATION, vLLM's
# share of the GPU [0.6]; SNAC_DIR [/models/snac_24khz]; MAX_STREAMS, the SNAC batch [32];
# ORPHEUS_START_TIMEOUT_S [900].
set -euo pipefail

port=${PORT:-8003}
model_dir=${ORPHEUS_MODEL_DIR:-/models/orpheus-3b-0.1-ft}
orpheus_port=${ORPHEUS_PORT:-8010}
served_name="orpheus-3b-0.1-ft"
timeout_s=${ORPHEUS_START_TIMEOUT_S:-900}

vllm serve "$model_dir" \
    --host 127.0.0.1 --port "$orpheus_port" \
    --served-model-name "$served_name" \
    --gpu-memory-utilization "${ORPHEUS_GPU_MEMORY_UTILIZATION:-0.6}" \
    --max-model-len 4096 &
orpheus=$!
tts=
stop() {
    kill -TERM "$orpheus" ${tts:+"$tts"} 2>/dev/null || true
    wait || true
}
trap 'stop; exit 143' TERM INT

# The TTS server warms SNAC up against Orpheus as it starts: Orpheus must answer first. (In
# the background, so that SIGTERM is handled while it waits.)
python3 - "$orpheus_port" "$timeout_s" "$orpheus" <<'PY' &
import os, sys, time, urllib.request

port, deadline, pid = sys.argv[1], time.monotonic() + float(sys.argv[2]), int(sys.argv[3])
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("tts-gpu: vLLM exited before it was ready")
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(2)
sys.exit("tts-gpu: vLLM was not ready in time")
PY
if ! wait $!; then
    stop
    exit 1
fi

python3 -m infra.tts_server --host 0.0.0.0 --port "$port" \
    --backend orpheus \
    --orpheus-url "http://127.0.0.1:$orpheus_port/v1" --orpheus-model "$served_name" \
    --snac "${SNAC_DIR:-/models/snac_24khz}" --device cuda \
    --max-streams "${MAX_STREAMS:-32}" &
tts=$!

status=0
wait -n "$orpheus" "$tts" || status=$?
echo "tts-gpu: a server exited (status $status): stopping the other" >&2
stop
exit "$status"
