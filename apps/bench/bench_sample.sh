#!/usr/bin/env bash
# `gpt2 bench-sample` beside its PyTorch anchor (apps/bench/bench_sample.py), with the anchor's own
# Python: a virtual environment with torch and transformers from PyPI, made on the first run.
#
#   bash apps/bench/bench_sample.sh [bench_sample.py flags] [-- gpt2 bench-sample flags]
#   e.g. bash apps/bench/bench_sample.sh --device cpu --out runs/bench-sample -- --batch-sizes 1,8
#
# Environment: GPT2 (default build/cpu/apps/gpt2/gpt2, else build/cuda/...), VENV (default
# build/bench-venv), PYTHON (the Python that makes the environment, default python3).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${VENV:-$ROOT/build/bench-venv}
GPT2=${GPT2:-}
if [[ -z "$GPT2" ]]; then
  for b in "$ROOT/build/cpu/apps/gpt2/gpt2" "$ROOT/build/cuda/apps/gpt2/gpt2"; do
    [[ -x "$b" ]] && { GPT2=$b; break; }
  done
fi
[[ -x "$GPT2" ]] || { echo "bench_sample.sh: no gpt2 binary; build one (cmake --preset cpu && cmake --build --preset cpu --target gpt2) or set GPT2" >&2; exit 1; }
if ! "$VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "bench_sample.sh: installing torch and transformers into $VENV (once; a few GB)" >&2
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch transformers
fi
exec "$VENV/bin/python" "$ROOT/apps/bench/bench_sample.py" --gpt2 "$GPT2" "$@"
