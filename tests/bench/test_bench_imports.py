"""The benchmarks share code through bench/common.py only: no bench script imports another one."""

from __future__ import annotations

import ast

from tests.conftest import REPO

BENCH = REPO / "bench"
SHARED = "bench.common"


def _bench_imports(path) -> set[str]:
    """The bench.* modules a file imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = (
                [node.module] if node.module != "bench" else [f"bench.{a.name}" for a in node.names]
            )
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n.startswith("bench."))
    return found


def test_bench_scripts_import_only_the_shared_module_and_their_references():
    scripts = sorted(BENCH.glob("bench_*.py"))
    assert len(scripts) >= 10
    for script in scripts:
        for module in _bench_imports(script):
            name = module.removeprefix("bench.")
            assert module == SHARED or name.startswith("reference_"), (
                f"{script.name} imports {module}: shared helpers belong in {SHARED}"
            )
    assert _bench_imports(BENCH / "common.py") == set()
