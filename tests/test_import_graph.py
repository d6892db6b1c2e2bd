"""The import rules of scripts/import_graph.py: what the checker finds in small trees, and that the project keeps them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _load_checker():
    spec = importlib.util.spec_from_file_location(
        "import_graph", REPO_ROOT / "scripts" / "import_graph.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


graph = _load_checker()


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_an_import_inside_a_function_closes_a_module_circle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "train/__init__.py": "",
            "train/a.py": "from train.b import f\n",
            "train/b.py": "def f():\n    from train import a\n    return a\n",
        },
    )
    report = graph.check(root)
    assert report.module_circles == [["train.a", "train.b"]]
    assert not report.ok


def test_a_sub_folder_importing_its_parent_that_imports_it_is_a_folder_circle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "train/__init__.py": "",
            "train/config.py": "X = 1\n",
            "train/loop.py": "from train.backends.jax import B\n",
            "train/backends/__init__.py": "",
            "train/backends/jax.py": "from ..config import X\nB = X\n",
        },
    )
    report = graph.check(root)
    assert report.module_circles == []
    assert report.folder_circles == [["train", "train.backends"]]
    lines = graph.render(report)
    assert "  train.backends -> train: train/backends/jax.py:1 imports train.config" in lines


def test_a_layered_tree_passes_and_gets_its_floors(tmp_path):
    root = _tree(
        tmp_path,
        {
            "schemas/__init__.py": "",
            "schemas/names.py": "N = 1\n",
            "train/__init__.py": "",
            "train/base/__init__.py": "",
            "train/base/config.py": "from schemas.names import N\n",
            "train/backends/__init__.py": "",
            "train/backends/jax.py": "import train.base.config\n",
            "train/loop.py": "from train.backends import jax\nfrom train.base import config\n",
        },
    )
    report = graph.check(root)
    assert report.ok, graph.render(report)
    assert graph.floors(graph._folder_graph(report)) == {
        "schemas": 0,
        "train": 3,
        "train.backends": 2,
        "train.base": 1,
    }


@pytest.mark.parametrize(
    ("importer", "imported"),
    [("preprocess", "train"), ("train", "preprocess"), ("plumbing", "schemas")],
)
def test_packages_that_must_never_meet(tmp_path, importer, imported):
    root = _tree(
        tmp_path,
        {
            f"{importer}/__init__.py": "",
            f"{importer}/user.py": f"import {imported}.thing\n",
            f"{imported}/__init__.py": "",
            f"{imported}/thing.py": "",
        },
    )
    report = graph.check(root)
    assert [(e.source, e.target) for e in report.forbidden] == [
        (f"{importer}.user", f"{imported}.thing")
    ]


def test_a_packages_main_may_import_its_commands(tmp_path):
    root = _tree(
        tmp_path,
        {
            "train/__init__.py": "",
            "train/__main__.py": "from train.commands.cli import main\n",
            "train/config.py": "",
            "train/commands/__init__.py": "",
            "train/commands/cli.py": "from train import config\n",
        },
    )
    report = graph.check(root)
    assert report.ok, graph.render(report)


def test_the_project_keeps_the_rules():
    report = graph.check(REPO_ROOT)
    assert report.ok, "\n".join(graph.render(report))
