#!/usr/bin/env bash
# Run infra/gpu_check.py on the lent GPU machine, which has torch and transformers but no network.
#
# Here, before the session's device call (the wheels are never committed):
#   pip download snac==1.2.1 einops==0.8.2 --no-deps -d wheels/
#   echo /wheels/ >> .git/info/exclude
# Then, with the device tool: run(command="bash infra/gpu_check.sh", carry=["wheels"],
# timeout_s=600). The JSON comes back as $OUT/gpu_check.json (stdout has it too); here,
# `python -m tools.gpu_profile gpu_check.json` writes it as the planner's profile.
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import snac" 2>/dev/null \
  || python -m pip install --no-index --no-deps wheels/*.whl
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
out="${OUT:-.}/gpu_check.json"
PYTHONUNBUFFERED=1 timeout 560 python -m infra.gpu_check --out "$out" 2> >(tee "${OUT:-.}/gpu_check.log" >&2)
