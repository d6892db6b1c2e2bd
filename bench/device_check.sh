#!/usr/bin/env bash
# Accelerator check of the JAX backend, for a GPU (or TPU) host that has JAX for its accelerator but neither
# TensorFlow nor Keras: installs Keras and keras-hub from a local wheel folder when they are missing, runs
# bench/bench_mfu.py for `tiny` and `base` (bf16, seq 128, synthetic batches, no TensorFlow), prints each
# preset's result as one JSON line as soon as it is measured, then one JSON line of the whole report plus how
# long the check took. Finishes in under 5 minutes on a current GPU. When the time limit stops it, the presets
# that finished are already printed, a line on stderr says so, the last JSON line has "complete": false, and
# it exits 124.
#
# Usage, from anywhere in a checkout:  bench/device_check.sh [WHEEL_DIR]       (default: bench/wheels)
# Environment: PYTHON (default python3), DEVICE_CHECK_STEPS (timed steps per preset, default 20),
# DEVICE_CHECK_LIMIT_S (the bench's time limit, default 270 s).
#
# The wheel folder holds bench/device_wheels.txt's pins (~11 MB, not in the repository). Build it on any machine
# with a package index, for the host's Python, with one command:
#   bench/fetch_device_wheels.sh [WHEEL_DIR] [PYTHON_VERSION]     (defaults: bench/wheels, 3.12)
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
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
timeout "$LIMIT_S" "$PY" -u "$REPO/bench/bench_mfu.py" --presets tiny base --steps "$STEPS" \
  --precision mixed_bfloat16 --seq_len 128 | tee "$log" | sed -un 's/^PRESET //p'
status=${PIPESTATUS[0]}
set -e
"$PY" - "$log" "$installed" "$(( $(date +%s) - started ))" "$status" "$LIMIT_S" <<'PYEOF'
import json
import sys

log, installed, wall_s, status, limit_s = sys.argv[1:]
lines = open(log, encoding="utf-8").read().splitlines()
results = [json.loads(line[len("PRESET "):]) for line in lines if line.startswith("PRESET ")]
final = [json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")]
report = final[-1] if final else {"bench": "mfu", "results": results}
report.update(check="device_check", installed_from_wheels=installed == "true", wall_s=int(wall_s))
report["complete"] = bool(final) and status == "0"
if status == "124":
    done = ", ".join(r["preset"] for r in results) or "none"
    print(
        f"device_check: stopped by the time limit of {limit_s} s (DEVICE_CHECK_LIMIT_S) after presets: {done}; "
        "the rest did not finish. Raise DEVICE_CHECK_LIMIT_S or lower DEVICE_CHECK_STEPS.",
        file=sys.stderr,
    )
elif status != "0":
    print(f"device_check: bench/bench_mfu.py failed (exit {status}); presets finished: {len(results)}", file=sys.stderr)
print(json.dumps(report, sort_keys=True))
if report.get("tensorflow_imported"):
    raise SystemExit("device_check: the JAX step imported TensorFlow")
PYEOF
exit "$status"
