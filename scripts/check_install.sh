#!/usr/bin/env bash
# Installs each documented extra set from a freshly built wheel into its own new virtualenv (never the
# checkout's .venv), and runs `lmshards --help` plus one small real command with it, then prints each
# venv's size. What the README's install lines promise, checked the way a user installs.
#
#   bash scripts/check_install.sh [SET ...]     # sets: core data train jax stats dask (default: all of them)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$PWD"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
SETS=("$@")
[ ${#SETS[@]} -gt 0 ] || SETS=(core data train jax stats dask)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/lmshards-install-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TF_CPP_MIN_LOG_LEVEL=2 TOKENIZERS_PARALLELISM=false

"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$REPO" 2>/dev/null ||
  "$PYTHON" -m pip wheel -q --no-deps -w "$WORK/dist" "$REPO"
WHEEL="$(ls "$WORK"/dist/lmshards-*.whl)"
echo "built $(basename "$WHEEL")"

extras_of() {
  case "$1" in
    core) echo "" ;;
    data) echo "[data]" ;;
    train) echo "[train,export]" ;;
    jax) echo "[train,jax,export]" ;;
    stats) echo "[stats]" ;;
    dask) echo "[dask]" ;;
    *) echo "unknown set $1 (core data train jax stats dask)" >&2; exit 2 ;;
  esac
}

# A small real command per set, run from an empty directory so that nothing comes from the checkout.
small_command() {
  local set="$1" bin="$2" out="$3"
  local golden="$REPO/tests/data/golden"
  case "$set" in
    core | dask | stats)
      "$bin/lmshards" preprocess --input "$golden/docs.jsonl" --tokenizer "$golden/tokenizer.json" \
        --output "$out/shards" --seq_len 32 $([ "$set" = dask ] && echo "--runner DaskRunner")
      "$bin/lmshards" inspect "$out/shards" --verify >/dev/null
      if [ "$set" = stats ]; then "$bin/lmshards" stats "$out/shards" --output "$out/stats" >/dev/null; fi
      ;;
    data)
      "$bin/lmshards" tokenizer train --input "$REPO/data/sample/en" --output "$out/tok" --model bpe \
        --vocab_size 400 --max_bytes 1MB >/dev/null
      ;;
    train | jax)
      "$bin/lmshards" preprocess --input "$golden/docs.jsonl" --tokenizer "$golden/tokenizer.json" \
        --output "$out/shards" --seq_len 32
      "$bin/lmshards" train --backend "$([ "$set" = jax ] && echo jax || echo tensorflow)" \
        --shards "$out/shards" --output "$out/run" --model_preset tiny --steps 4 \
        --per_replica_batch 4 --strategy cpu >/dev/null
      "$bin/lmshards" export "$out/run" --output "$out/hf" >/dev/null
      ;;
  esac
}

for set in "${SETS[@]}"; do
  extras="$(extras_of "$set")"
  venv="$WORK/venv-$set"
  start=$SECONDS
  "$PYTHON" -m venv "$venv"
  log="$WORK/pip-$set.log"
  if ! { "$venv/bin/python" -m pip install -q --upgrade "pip>=24" &&
    "$venv/bin/python" -m pip install -q "${WHEEL}${extras}"; } >"$log" 2>&1; then
    cat "$log"
    echo "install check: pip could not install lmshards${extras}" >&2
    exit 1
  fi
  installed=$((SECONDS - start))
  run="$WORK/run-$set"
  mkdir -p "$run"
  (cd "$run" && "$venv/bin/lmshards" --help >/dev/null && small_command "$set" "$venv/bin" "$run")
  size="$(du -sh "$venv" | cut -f1)"
  echo "install check: lmshards${extras} installed in ${installed} s, venv ${size}; --help and a small command OK"
  rm -rf "$venv" "$run"
done
