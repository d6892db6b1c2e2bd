#!/usr/bin/env bash
# Creates the virtualenv VENV with lmshards' trainer on one backend's TPU stack, one venv per backend:
# - `--backend tensorflow` (the default): the TensorFlow TPU stack pinned in constraints/tpu.txt, tensorflow-tpu as
#   the only TensorFlow distribution, the libtpu it loads, keras and keras-hub;
# - `--backend jax`: the JAX TPU stack pinned in constraints/tpu-jax.txt, jax[tpu] with the libtpu it pins, plain
#   tensorflow for the host input pipeline, keras and keras-hub.
# Both hold what `lmshards export` writes with (transformers, safetensors, huggingface-hub; no torch).
# Then checks it with `lmshards env --check --no_import --backend BACKEND` (distributions only, which includes that
# the venv holds nothing of the other backend's TPU stack; loading libtpu is left to `lmshards env --check` on the
# TPU VM).
#
#   scripts/setup_tpu_env.sh [--backend tensorflow|jax] VENV [LMSHARDS]
#
# LMSHARDS is what to install lmshards from: this checkout (the default) or a wheel built from it.
# PYTHON names the interpreter (default python3.11 for tensorflow, python3.12 for jax: jax 0.11 and later need
# 3.12, the Python of Ubuntu 24.04 TPU VM images); VENV must not exist yet.
set -euo pipefail
BACKEND=tensorflow
if [ "${1:-}" = --backend ]; then
  BACKEND="${2:-}"
  shift 2 || true
fi
if [ "$BACKEND" != tensorflow ] && [ "$BACKEND" != jax ]; then
  echo "$0: error: --backend must be tensorflow or jax, got '$BACKEND'" >&2
  exit 2
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 [--backend tensorflow|jax] VENV [LMSHARDS]" >&2
  exit 2
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$BACKEND" = jax ]; then
  CONSTRAINTS="$REPO/constraints/tpu-jax.txt"
  PYTHON="${PYTHON:-python3.12}"
else
  CONSTRAINTS="$REPO/constraints/tpu.txt"
  PYTHON="${PYTHON:-python3.11}"
fi
VENV="$1"
LMSHARDS="${2:-$REPO}"
# The marker constraints/tpu.txt puts on the lines installed without their requirements.
NO_DEPS_MARKER="# no-deps"

if [ -e "$VENV" ]; then
  echo "$0: error: $VENV exists; remove it or name a new directory" >&2
  exit 2
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "$0: error: no $PYTHON on PATH; install it or set PYTHON to another interpreter" >&2
  exit 2
fi

"$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade "pip>=24"

# Pip resolves everything but the no-deps lines together, so the set is consistent without them; the
# no-deps lines come after, with nothing left for them to pull in.
lists="$(mktemp -d)"
trap 'rm -rf "$lists"' EXIT
grep -vF -- "$NO_DEPS_MARKER" "$CONSTRAINTS" >"$lists/resolved.txt"
{ grep -F -- "$NO_DEPS_MARKER" "$CONSTRAINTS" | grep -v '^#' || true; } >"$lists/no-deps.txt"
"${pip[@]}" install -q -r "$lists/resolved.txt"
if [ -s "$lists/no-deps.txt" ]; then
  "${pip[@]}" install -q --no-deps -r "$lists/no-deps.txt"
fi
# lmshards' own requirements are the worker's (Beam) and the extras': the trainer's are all above.
"${pip[@]}" install -q --no-deps "$LMSHARDS"

"$VENV/bin/lmshards" env --check --no_import --backend "$BACKEND"
