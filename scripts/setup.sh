#!/usr/bin/env bash
# One set-up for a fresh machine: a virtual environment in .venv with pyge and its test tools.
# Without a GPU, torch is pinned to the CPU build the package index serves (constraints-cpu.txt);
# with a CUDA torch already installed system-wide, the venv sees it and keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    "$PY" -m venv --system-site-packages .venv
  else
    "$PY" -m venv .venv
  fi
fi
CONSTRAINT=()
if ! .venv/bin/python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  CONSTRAINT=(-c constraints-cpu.txt)
fi
.venv/bin/python -m pip install -q --disable-pip-version-check "${CONSTRAINT[@]}" -e ".[dev]" 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import pyge, torch; print(f'pyge {pyge.__version__} ready (torch {torch.__version__})')"
