#!/usr/bin/env bash
# Creates the virtualenv VENV with lmshards' trainer on the TensorFlow TPU stack pinned in
# constraints/tpu.txt: tensorflow-tpu as the only TensorFlow distribution, the libtpu it loads, keras and
# keras-hub. Then checks it with `lmshards env --check --no_import` (distributions only: loading libtpu
# is left to `lmshards env --check` on the TPU VM).
#
#   scripts/setup_tpu_env.sh VENV [LMSHARDS]
#
# LMSHARDS is what to install lmshards from: this checkout (the default) or a wheel built from it.
# PYTHON names the interpreter (default python3.11); VENV must not exist yet.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 VENV [LMSHARDS]" >&2
  exit 2
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONSTRAINTS="$REPO/constraints/tpu.txt"
VENV="$1"
LMSHARDS="${2:-$REPO}"
PYTHON="${PYTHON:-python3.11}"
# The marker constraints/tpu.txt puts on the lines installed without their requirements.
NO_DEPS_MARKER="# no-deps"

if [ -e "$VENV" ]; then
  echo "$0: error: $VENV exists; remove it or name a new directory" >&2
  exit 2
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "$0: error: no $PYTHON on PATH; install Python 3.11 or set PYTHON to one" >&2
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
grep -F -- "$NO_DEPS_MARKER" "$CONSTRAINTS" | grep -v '^#' >"$lists/no-deps.txt"
"${pip[@]}" install -q -r "$lists/resolved.txt"
"${pip[@]}" install -q --no-deps -r "$lists/no-deps.txt"
# lmshards' own requirements are the worker's (Beam) and the extras': the trainer's are all above.
"${pip[@]}" install -q --no-deps "$LMSHARDS"

"$VENV/bin/lmshards" env --check --no_import
