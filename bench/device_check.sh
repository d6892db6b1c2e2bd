#!/usr/bin/env bash
# Accelerator check of the JAX backend, for a GPU (or TPU) host that has JAX for its accelerator but neither
# TensorFlow nor Keras: installs Keras and keras-hub from a local wheel folder when they are missing, runs
# bench/bench_mfu.py for `tiny` and `base` (bf16, seq 128, synthetic batches, no TensorFlow), and prints one
# JSON line: bench_mfu's report plus how long the check took. Finishes in under 5 minutes on a current GPU.
#
# Usage, from anywhere in a checkout:  bench/device_check.sh [WHEEL_DIR]       (default: bench/wheels)
# Environment: PYTHON (default python3), DEVICE_CHECK_STEPS (timed steps per preset, default 20),
# DEVICE_CHECK_LIMIT_S (the bench's time limit, default 270 s).
#
# The wheel folder holds bench/device_wheels.txt's pins (~11 MB, not in the repository). Fetch it on any machine
# with a package index, for the host's Python (here 3.12 on x86-64 Linux):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 --platform any -r bench/device_wheels.txt -d bench/wheels
# They are installed with --no-deps into bench/.device_site (never into the host's environment): keras-hub's
# tensorflow-text requirement would otherwise pull TensorFlow in.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="${1:-$REPO/bench/wheels}"
PY="${PYTHON:-python3}"
STEPS="${DEVICE_CHECK_STEPS:-20}"
SITE="$REPO/bench/.device_site"
LIMIT_S="${DEVICE_CHECK_LIMIT_S:-270}"  # the bench's own limit, inside the 5 minutes

started=$(date +%s)
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export KERAS_BACKEND=jax

installed=false
if ! "$PY" -c "import keras, keras_hub" 2>/dev/null; then
  if [ ! -d "$WHEELS" ]; then
    echo "device_check: Keras or keras-hub is missing and there is no wheel folder $WHEELS (see the download command at the top of $0)." >&2
    exit 2
  fi
  "$PY" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" --target "$SITE" \
    -r "$REPO/bench/device_wheels.txt" >&2
  installed=true
fi

"$PY" -c "import jax; print('device_check: jax', jax.__version__, jax.devices(), file=__import__('sys').stderr)"
out=$(timeout "$LIMIT_S" "$PY" "$REPO/bench/bench_mfu.py" --presets tiny base --steps "$STEPS" --precision mixed_bfloat16 --seq_len 128)
result=$(printf '%s\n' "$out" | sed -n 's/^RESULT //p' | tail -n 1)
"$PY" - "$result" "$installed" "$(( $(date +%s) - started ))" <<'PYEOF'
import json
import sys

report = json.loads(sys.argv[1])
report["check"] = "device_check"
report["installed_from_wheels"] = sys.argv[2] == "true"
report["wall_s"] = int(sys.argv[3])
if report.get("tensorflow_imported"):
    raise SystemExit("device_check: the JAX step imported TensorFlow")
print(json.dumps(report, sort_keys=True))
PYEOF
