#!/usr/bin/env bash
# Creates ./.venv (Python 3.11) with lmshards and every extra installed from the exact pins in setup.py.
# Idempotent: re-running only installs what changed. Source it to get the venv activated.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade "pip>=24" "setuptools>=70" wheel
.venv/bin/python -m pip install -q -e ".[all,test]"
