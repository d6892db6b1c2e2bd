"""constraints/tpu.txt read as requirements: the TPU venv's pins (scripts/setup_tpu_env.sh installs them)."""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints" / "tpu.txt"
NO_DEPS_MARKER = "# no-deps"  # scripts/setup_tpu_env.sh's marker


def constraint_lines() -> list[tuple[Requirement, bool]]:
    """(requirement, installed with --no-deps) for each requirement line of constraints/tpu.txt."""
    lines = []
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        spec = line.split(" #")[0].strip()
        if spec and not spec.startswith("#"):
            lines.append((Requirement(spec), NO_DEPS_MARKER in line))
    return lines


def tpu_pins() -> dict[str, str]:
    return {canonicalize_name(req.name): str(req.specifier)[2:] for req, _ in constraint_lines()}
