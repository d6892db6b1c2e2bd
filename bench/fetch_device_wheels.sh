#!/usr/bin/env bash
# Builds the wheel folder bench/device_check.sh installs Keras and keras-hub from: bench/device_wheels.txt's pins
# for one Python on x86-64 Linux, without their requirements (~11 MB). Runs on any machine with a package index.
#
#   bench/fetch_device_wheels.sh [WHEEL_DIR] [PYTHON_VERSION]     (defaults: bench/wheels, 3.12)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="${1:-$REPO/bench/wheels}"
VERSION="${2:-3.12}"
if ! [[ "$VERSION" =~ ^3\.[0-9]+$ ]]; then
  echo "$0: error: PYTHON_VERSION must look like 3.12, got '$VERSION'" >&2
  exit 2
fi
ABI="cp${VERSION/./}"
"${PYTHON:-python3}" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$VERSION" \
  --implementation cp --abi "$ABI" --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -r "$REPO/bench/device_wheels.txt" -d "$WHEELS"
echo "Wrote $(ls "$WHEELS" | wc -l) wheels for Python $VERSION to $WHEELS"
