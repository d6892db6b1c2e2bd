"""The project's import graph: module circles, folder circles, forbidden edges and floors.

    python scripts/import_graph.py            # the rules' violations (exit 1 if any) and each folder's floor
    python scripts/import_graph.py --edges    # also every folder-to-folder edge with one example import

Every import counts, those inside functions and under `if TYPE_CHECKING:` included: an import hidden in a
function still ties the two modules together. A folder is a package (`train/`, `lmshards/train/backends/`); a
folder circle is two folders each importing the other, directly or through others (a package's
`__main__` counts as a folder of its own: an entry point nothing imports). The floor of a folder
is the length of the longest chain of folders below it (0 imports no project folder).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# The project's own top-level packages (tests are not part of the graph: they may import anything).
PACKAGES = ("bench", "dataflow_templates", "lmshards")
# The installed package whose sub-packages are the project's areas (`lmshards.train` is the area `train`).
INSTALLED = "lmshards"
# (importer, imported) areas that must never meet: Dataflow workers must not need the training stack, training
# never needs Beam, and the mechanisms know nothing of the contract.
FORBIDDEN = (
    ("preprocess", "train"),
    ("train", "preprocess"),
    ("plumbing", "schemas"),
    ("schemas", "preprocess"),
    ("schemas", "train"),
)


def area_of(module: str) -> str:
    """The area a module belongs to: `lmshards.train.loop` -> `train`, `bench.common` -> `bench`."""
    parts = module.split(".")
    return parts[1] if parts[0] == INSTALLED and len(parts) > 1 else parts[0]


@dataclasses.dataclass(frozen=True)
class Edge:
    """One import: `source` imports `target` at `line` of `path`."""

    source: str
    target: str
    path: str
    line: int


def module_files(root: Path) -> dict[str, Path]:
    """Every project module by its dotted name (a package by its own name, for its __init__.py)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from ... import` names, resolving leading dots against `module`."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _project_target(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest project module `name` starts with (`a.b.c` of module `a.b` is `a.b`), or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: Mapping[str, Path], root: Path) -> Iterator[Edge]:
    """The project modules `module` imports, anywhere in its file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    rel = str(path.relative_to(root))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            # `from pkg import mod` imports the module pkg.mod where there is one, else names of pkg.
            names = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
        for name in names:
            target = _project_target(name, modules)
            if target is not None and target != module:
                yield Edge(module, target, rel, node.lineno)


def all_edges(root: Path = REPO_ROOT) -> list[Edge]:
    """Every import between project modules."""
    modules = module_files(root)
    return [
        edge for name, path in modules.items() for edge in imports_of(name, path, modules, root)
    ]


def folder_of(module: str, root: Path = REPO_ROOT) -> str:
    """The package a module lives in (a package is its own folder).

    A `__main__` module is an entry point that nothing imports (`python -m lmshards.train`): it stands above
    every folder as a node of its own, so it may import its package's commands.
    """
    if (
        module.rsplit(".", 1)[-1] == "__main__"
        or (root / module.replace(".", "/") / "__init__.py").is_file()
    ):
        return module
    return module.rsplit(".", 1)[0]


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def floors(graph: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Each node's longest chain of nodes below it; nodes on a circle count the circle once."""
    memo: dict[str, int] = {}

    def floor(node: str, seen: frozenset[str]) -> int:
        if node in memo:
            return memo[node]
        below = [
            floor(n, seen | {node}) + 1 for n in graph.get(node, ()) if n not in seen and n != node
        ]
        memo[node] = max(below, default=0)
        return memo[node]

    return {node: floor(node, frozenset()) for node in sorted(graph)}


@dataclasses.dataclass(frozen=True)
class Report:
    """What the rules found: each list empty means the graph keeps them."""

    module_circles: list[list[str]]
    folder_circles: list[list[str]]
    forbidden: list[Edge]
    folder_edges: dict[tuple[str, str], Edge]

    @property
    def ok(self) -> bool:
        return not (self.module_circles or self.folder_circles or self.forbidden)


def check(root: Path = REPO_ROOT) -> Report:
    """Apply the rules to the tree at `root`."""
    edges = all_edges(root)
    modules: dict[str, set[str]] = defaultdict(set)
    folders: dict[str, set[str]] = defaultdict(set)
    folder_edges: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        modules[edge.source].add(edge.target)
        src, dst = folder_of(edge.source, root), folder_of(edge.target, root)
        folders.setdefault(dst, set())
        if src != dst:
            folders[src].add(dst)
            folder_edges.setdefault((src, dst), edge)
    forbidden = sorted(
        {edge for edge in edges if (area_of(edge.source), area_of(edge.target)) in FORBIDDEN},
        key=lambda edge: (edge.path, edge.line, edge.target),
    )
    return Report(circles(modules), circles(folders), forbidden, folder_edges)


def _folder_graph(report: Report) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in report.folder_edges:
        graph[src].add(dst)
        graph.setdefault(dst, set())
    return graph


def render(report: Report, *, with_edges: bool = False) -> list[str]:
    """The report as lines of text."""
    lines: list[str] = []
    for component in report.module_circles:
        lines.append(f"module circle: {' <-> '.join(component)}")
    for component in report.folder_circles:
        members = set(component)
        lines.append(f"folder circle: {' <-> '.join(component)}")
        for (src, dst), edge in sorted(report.folder_edges.items()):
            if src in members and dst in members:
                lines.append(f"  {src} -> {dst}: {edge.path}:{edge.line} imports {edge.target}")
    for edge in report.forbidden:
        lines.append(f"forbidden: {edge.path}:{edge.line} ({edge.source}) imports {edge.target}")
    graph = _folder_graph(report)
    for folder, floor in sorted(floors(graph).items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"floor {floor:2d}  {folder}")
    if with_edges:
        for (src, dst), edge in sorted(report.folder_edges.items()):
            lines.append(f"edge {src} -> {dst}: {edge.path}:{edge.line}")
    lines.append(
        "ok: no circles, no forbidden imports" if report.ok else "FAILED: see the lines above"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--edges", action="store_true", help="also list every folder-to-folder edge"
    )
    args = parser.parse_args(argv)
    report = check()
    print("\n".join(render(report, with_edges=args.edges)))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
