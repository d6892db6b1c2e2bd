"""corpus_tools may use preprocess/ and schemas/, never the trainer side."""

from __future__ import annotations

import ast
from pathlib import Path

import lmshards.corpus_tools


def _imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports (absolute imports, lazy ones inside functions too)."""
    packages = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            packages.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            packages.add(node.module.split(".")[0])
    return packages


def test_corpus_tools_never_imports_train():
    root = Path(lmshards.corpus_tools.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if "train" in _imported_packages(path)
    ]
    assert offenders == []
