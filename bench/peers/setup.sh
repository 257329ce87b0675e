#!/bin/sh
# The peers' benchmark environment: a separate venv that sees the shared venv's packages
# (torch, transformers, accelerate) through a .pth file and adds the peers that gpuplan
# never depends on. Nothing here is a runtime or dev dependency of gpuplan.
#
#   sh bench/peers/setup.sh [/tmp/bench-peers] [/path/to/base/venv]
set -eu
PEERS=${1:-/tmp/bench-peers}
BASE=${2:-$(cd "$(dirname "$0")/../.." && pwd)/.venv}
if [ ! -x "$BASE/bin/python" ]; then
  echo "no dev venv at $BASE; pass it: sh bench/peers/setup.sh /tmp/bench-peers /path/to/.venv" >&2
  exit 2
fi
python3 -m venv "$PEERS"
SITE=$("$BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
OWN=$("$PEERS/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$SITE" > "$OWN/base-venv.pth"
# llm-analysis pins transformers<5 and huggingface-hub 0.14 only to fetch configs from the
# hub; the benchmark hands it configs itself, so it goes in without them (the shared
# venv's newer transformers stays visible for accelerate).
"$PEERS/bin/pip" install --quiet --no-deps llm-analysis==0.2.2
"$PEERS/bin/pip" install --quiet 'fire>=0.5,<0.6'
# DeepSpeed builds no C++/CUDA ops at install (none are needed for the memory estimators).
DS_BUILD_OPS=0 DS_SKIP_CUDA_CHECK=1 "$PEERS/bin/pip" install --quiet deepspeed || true
"$PEERS/bin/python" -c 'import llm_analysis, accelerate; print("llm-analysis, accelerate ok")'
"$PEERS/bin/python" -c 'import deepspeed; print("deepspeed", deepspeed.__version__)' || echo "deepspeed: not installed"
