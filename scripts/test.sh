#!/usr/bin/env bash
# Sets up ./.venv if needed, then runs the whole test suite (unit, Beam pipelines, GCS emulator, training).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TF_CPP_MIN_LOG_LEVEL=2
exec .venv/bin/python -m pytest "$@"
