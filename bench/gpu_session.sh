#!/usr/bin/env bash
# One prepared run on a machine with an NVIDIA GPU, a few minutes long: the checks that
# need real hardware, each bounded, each writing its figures whatever the others do.
#   1. the agent on the GPU (bench/agent/agent_gpu.py: NVML capture, benchmarks, issue 8);
#   2. the estimate's peak, reserved and nvidia-smi measures against real training steps
#      (bench/accuracy/reserve_cuda.py, issue 18);
#   3. the tracer's runtime cuda against the same steps (bench/trace/trace_cuda_check.py).
# Usage: bash bench/gpu_session.sh [OUT]   (OUT: where the files go; bench/results)
set -u
out=${1:-${OUT:-bench/results}}
mkdir -p "$out"
export PYTHONPATH="$PWD/service:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  "$python" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
} 2>&1 | tee "$out/gpu_session.txt"
timeout "${AGENT_SECONDS:-150}" "$python" -m bench.agent.agent_gpu --timeout "$(( ${AGENT_SECONDS:-150} - 20 ))" \
  --out "$out/agent_gpu.json" 2>&1 | tee "$out/agent_gpu.log"
[ -f bench/results/nvml_capture.json ] && [ "$out" != bench/results ] && cp bench/results/nvml_capture.json "$out/"
timeout "$(( ${RESERVE_SECONDS:-170} + 40 ))" "$python" -m bench.accuracy.reserve_cuda \
  --budget-seconds "${RESERVE_SECONDS:-170}" --out "$out/reserve_cuda.json" 2>&1 | tee "$out/reserve_cuda.log"
timeout "${TRACE_SECONDS:-90}" "$python" -m bench.trace.trace_cuda_check 2>&1 | tee "$out/trace_cuda.log"
[ -f bench/results/trace_cuda.json ] && [ "$out" != bench/results ] && cp bench/results/trace_cuda.json "$out/"
echo "gpu_session done"
