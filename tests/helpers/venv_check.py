"""Building a TPU venv with scripts/setup_tpu_env.sh in a test, and running what loads libtpu in it isolated.

Everything that loads libtpu runs inside `unshare -n` (a network namespace with no route out) with
TPU_SKIP_MDS_QUERY=1, so libtpu cannot reach a metadata server.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.text_corpus import tree_bytes

REPO = Path(__file__).resolve().parents[2]


def network_namespace_reason() -> str | None:
    """Why `unshare -n` cannot isolate the test here, or None."""
    if os.geteuid() != 0:
        return "loading libtpu is only tested inside `unshare -n`, which needs root"
    if shutil.which("unshare") is None:
        return "no `unshare` command (util-linux)"
    done = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`unshare -n` fails here: {done.stderr.strip()}"
    return None


def isolated(cmd: list[str]) -> list[str]:
    """cmd inside a new network namespace (loopback only, down), with the metadata query off."""
    return ["unshare", "-n", "env", "TPU_SKIP_MDS_QUERY=1", *cmd]


def clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH, so the venv runs its own installed lmshards, without
    the switch that makes setup.py build the worker-only distribution (which has no console script), and
    without what earlier tests in this process may have set for Keras, JAX or XLA (e.g. KERAS_BACKEND=jax,
    which this venv has no JAX for)."""
    kept = (
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    )
    # Only what a shell on a fresh machine has, plus pip's own settings: nothing earlier tests set.
    return {k: v for k, v in os.environ.items() if k in kept or k.startswith("PIP_")}


def tracked_copy(dst: Path) -> Path:
    """The checkout's tracked files copied to dst, so building lmshards leaves nothing in the repository."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        return REPO
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dst / name)
    return dst


def python_at_least(minor: int) -> str | None:
    """An interpreter of Python 3.minor or later on this machine (PATH, pyenv, uv), or None."""
    candidates = [shutil.which(f"python3.{m}") for m in range(minor, 15)]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(
        glob.glob(os.path.join(pyenv_root, "versions", "3.1[2-9]*", "bin", "python3"))
    )
    uv = shutil.which("uv")
    if uv:
        found = subprocess.run([uv, "python", "find", f"3.{minor}"], capture_output=True, text=True)
        candidates.append(found.stdout.strip() if found.returncode == 0 else None)
    for python in filter(None, candidates):
        done = subprocess.run(
            [python, "-c", f"import sys; sys.exit(sys.version_info[:2] < (3, {minor}))"],
            capture_output=True,
        )
        if done.returncode == 0:
            return python
    return None


def check_torch_free_export(venv: Path, run: Path, out: Path) -> None:
    """`lmshards export` of run in venv, which has no torch, writes the same files, byte for byte, as this
    checkout's (whose torch loads the model back: it loads cleanly)."""
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "freeze"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    assert "\ntorch==" not in "\n" + installed, (
        "the venv holds torch: this checks an export without it"
    )
    venv_export, checkout_export = out / "venv", out / "checkout"
    done = subprocess.run(
        isolated(
            [str(venv / "bin" / "lmshards"), "export", str(run), "--output", str(venv_export)]
        ),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = subprocess.run(
        [sys.executable, "-m", "lmshards", "export", str(run), "--output", str(checkout_export)],
        cwd=REPO,
        env={**clean_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    exported = tree_bytes(venv_export)
    assert sorted(exported) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert exported == tree_bytes(checkout_export)
