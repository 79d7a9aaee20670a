#!/usr/bin/env bash
# Everything a session with a GPU should run, in one call to the device tool, within about
# 9.5 minutes (the step timeouts add up to 570 s, under the tool's 600 s per call): the
# gpu-marked tests (PyTorch's CUDA sanitizer over multi-stream runs among them), the
# correctness + latency check (issue #5), the policy benchmark against torch (issue #8),
# the collectives benchmark on 2 ranks (issue #23) and the dynamic-shape partition,
# captured backbone vs eager (issue #19). Figures land in $OUT
# (default ./out).
#
#   run(command="bash benchmarks/gpu_session.sh", timeout_s=600)
#
# The GPU image has torch, torchvision, onnx and onnxruntime already; pyge runs from the
# source tree (no install needed).
# The device tool brings back at most 8 files from $OUT, so each step's files are packed
# as soon as it ends: session.txt (versions, and every step's whole output), gpu_check.{txt,json},
# gpu_bench.{txt,json}, bench_collectives.txt and gpu_bench_extra.tar.gz (plot, tuned policy
# files, the collectives' json and trace). A step stopped by its timeout leaves its
# *.partial.json instead of the final json.
# A dry run of the same steps on a CPU (about 30 s):
#   PATH=.venv/bin:$PATH PYGE_SESSION_ARGS="--device cpu --quick" OUT=/tmp/out bash benchmarks/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}
mkdir -p "$OUT/check" "$OUT/bench"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
LOG="$OUT/session.txt"
failed=""        # the steps that exited non-zero: the script's own status says whether all passed
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee "$LOG"
if python3 -c "import pytest" 2>/dev/null; then
  timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu tests/executors/test_cuda.py tests/profiling/test_cuda_profile.py \
    tests/kernels/test_quant.py tests/kernels/test_attention.py tests/distributed/test_collectives_gpu.py 2>&1 | tee -a "$LOG" | tail -30 || failed+=" tests"
else
  echo "pytest is not installed on this machine: gpu-marked tests not run" | tee -a "$LOG"
fi

# keep NAME.txt and NAME.json (or NAME.partial.json when the final one is missing) from DIR
keep() {
  local dir=$1 name=$2
  [ -f "$dir/$name.txt" ] && mv "$dir/$name.txt" "$OUT/"
  if [ -f "$dir/$name.json" ]; then mv "$dir/$name.json" "$OUT/"; rm -f "$dir/$name.partial.json"
  elif [ -f "$dir/$name.partial.json" ]; then mv "$dir/$name.partial.json" "$OUT/"; fi
}
timeout 130 python3 benchmarks/gpu_check.py --budget 100 --out "$OUT/check" ${PYGE_SESSION_ARGS:-} 2>&1 | tee -a "$LOG" | tail -40 || failed+=" gpu_check"
keep "$OUT/check" gpu_check
timeout 240 python3 benchmarks/gpu_bench.py --budget-s 210 --out "$OUT/bench" ${PYGE_SESSION_ARGS:-} 2>&1 | tee -a "$LOG" | tail -40 || failed+=" gpu_bench"
keep "$OUT/bench" gpu_bench
# collectives (issue 23): the tensor-parallel block on 2 ranks (torchrun), default plan vs single stream
timeout 70 python3 benchmarks/bench_collectives.py --rounds 10 --out "$OUT/bench" ${PYGE_SESSION_ARGS:-} 2>&1 | tee -a "$LOG" | tail -8 || failed+=" bench_collectives"
[ -f "$OUT/bench/bench_collectives.txt" ] && mv "$OUT/bench/bench_collectives.txt" "$OUT/"
# dynamic shapes (issue 19): a static backbone + NMS head, partitioned (backbone captured into a
# CUDA graph of its own) vs one eager plan; its txt/json go into gpu_bench_extra.tar.gz
timeout 20 python3 benchmarks/bench_partition.py --device cuda --one-process --rounds 3 --runs 30 --out "$OUT/bench" ${PYGE_SESSION_ARGS:-} 2>&1 | tee -a "$LOG" | tail -8 || failed+=" bench_partition"
if [ -n "$(ls -A "$OUT/bench" "$OUT/check" 2>/dev/null)" ]; then
  tar -czf "$OUT/gpu_bench_extra.tar.gz" -C "$OUT" bench check
fi
rm -rf "$OUT/bench" "$OUT/check"
ls -la "$OUT"
if [ -n "$failed" ]; then echo "failed:$failed" | tee -a "$LOG"; exit 1; fi
