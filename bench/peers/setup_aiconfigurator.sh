#!/bin/sh
# NVIDIA AIConfigurator's benchmark environment: a venv of its own (Python 3.11+), apart from
# gpuplan's and from the memory peers' (bench/peers/setup.sh). AIConfigurator is a peer the
# serving bench compares with (bench/peers/serving.py), never a dependency of gpuplan.
#
#   sh bench/peers/setup_aiconfigurator.sh [/tmp/bench-aic] [WHEEL_DIR]
#
# WHEEL_DIR, when given, holds aiconfigurator-0.12.0-py3-none-any.whl and
# aiconfigurator_core-0.12.0-*.whl (its measured tables, about 80 MB); without it both come
# from PyPI. Their other requirements come from PyPI either way.
set -eu
AIC=${1:-/tmp/bench-aic}
WHEELS=${2:-}
VERSION=0.12.0
python3 -m venv "$AIC"
if [ -n "$WHEELS" ]; then
  "$AIC/bin/pip" install --quiet "$WHEELS"/aiconfigurator-$VERSION-py3-none-any.whl \
    "$WHEELS"/aiconfigurator_core-$VERSION-*.whl
else
  "$AIC/bin/pip" install --quiet "aiconfigurator==$VERSION" "aiconfigurator-core==$VERSION"
fi
"$AIC/bin/python" -c 'from importlib.metadata import version; print("aiconfigurator", version("aiconfigurator"), "core", version("aiconfigurator-core"))'
