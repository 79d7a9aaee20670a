#!/usr/bin/env bash
# Everything a session with a GPU should run, in one call to the device tool, within about
# 10 minutes: the gpu-marked tests (PyTorch's CUDA sanitizer over multi-stream runs among
# them), the correctness + latency check (issue #5) and the policy benchmark against torch
# (issue #8). Figures land in $OUT (default ./out).
#
#   run(command="bash benchmarks/gpu_session.sh", timeout_s=600)
#
# The GPU image has torch, torchvision, onnx and onnxruntime already; pyge runs from the
# source tree (no install needed).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee "$OUT/env.txt"
if python3 -c "import pytest" 2>/dev/null; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/executors/test_cuda.py tests/profiling/test_cuda_profile.py 2>&1 | tail -30 | tee "$OUT/gpu_tests.txt"
else
  echo "pytest is not installed on this machine: gpu-marked tests not run" | tee "$OUT/gpu_tests.txt"
fi
timeout 190 python3 benchmarks/gpu_check.py --budget 160 --out "$OUT" 2>&1 | tail -40
timeout 250 python3 benchmarks/gpu_bench.py --budget-s 220 --out "$OUT" 2>&1 | tail -40
ls -la "$OUT"
