"""bench/device_check.sh keeps every preset that finished: printed at once, and named when the time limit stops it.

The interpreter it is given stands in for a host's: it has jax and keras, and its bench_mfu.py run measures
`tiny` at once and then takes too long for `base`; the report is assembled by this Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
[ "$1" = -c ] && exit 0  # the checks that keras and jax import: a host that has them
for arg in "$@"; do
  if [[ "$arg" == */bench_mfu.py ]]; then
    echo 'PRESET {"preset": "tiny", "mfu": 0.5}'
    [ "${FAKE_BASE_S:-0}" = 0 ] || sleep "$FAKE_BASE_S"
    echo 'PRESET {"preset": "base", "mfu": 0.45}'
    echo 'RESULT {"bench": "mfu", "results": [{"preset": "tiny", "mfu": 0.5}, {"preset": "base", "mfu": 0.45}]}'
    exit 0
  fi
done
exec "%s" "$@"
"""


def run_check(tmp_path: Path, *, base_s: int, limit_s: int) -> subprocess.CompletedProcess:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON % sys.executable)
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PYTHON": str(fake),
        "FAKE_BASE_S": str(base_s),
        "DEVICE_CHECK_LIMIT_S": str(limit_s),
    }
    return subprocess.run(
        ["bash", str(REPO / "bench" / "device_check.sh"), str(tmp_path / "no-wheels")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_each_preset_is_printed_and_a_time_limit_is_named(tmp_path):
    done = run_check(tmp_path, base_s=30, limit_s=3)
    assert done.returncode == 124, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0] == {"preset": "tiny", "mfu": 0.5}
    assert lines[-1]["complete"] is False and lines[-1]["results"] == [lines[0]]
    assert (
        "stopped by the time limit of 3 s (DEVICE_CHECK_LIMIT_S) after presets: tiny" in done.stderr
    )


def test_a_check_that_finishes_prints_both_presets_then_the_report(tmp_path):
    done = run_check(tmp_path, base_s=0, limit_s=60)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line.get("preset") for line in lines[:2]] == ["tiny", "base"]
    assert lines[2]["complete"] is True and lines[2]["check"] == "device_check"
    assert len(lines[2]["results"]) == 2
