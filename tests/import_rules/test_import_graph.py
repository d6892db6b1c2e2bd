"""The import rules of scripts/import_graph.py: what the checker finds in small trees, and that the project keeps them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


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
            "lmshards/train/__init__.py": "",
            "lmshards/train/a.py": "from lmshards.train.b import f\n",
            "lmshards/train/b.py": "def f():\n    from lmshards.train import a\n    return a\n",
        },
    )
    report = graph.check(root)
    assert report.module_circles == [["lmshards.train.a", "lmshards.train.b"]]
    assert not report.ok


def test_a_sub_folder_importing_its_parent_that_imports_it_is_a_folder_circle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lmshards/train/__init__.py": "",
            "lmshards/train/config.py": "X = 1\n",
            "lmshards/train/loop.py": "from lmshards.train.backends.jax import B\n",
            "lmshards/train/backends/__init__.py": "",
            "lmshards/train/backends/jax.py": "from ..config import X\nB = X\n",
        },
    )
    report = graph.check(root)
    assert report.module_circles == []
    assert report.folder_circles == [["lmshards.train", "lmshards.train.backends"]]
    lines = graph.render(report)
    assert (
        "  lmshards.train.backends -> lmshards.train: lmshards/train/backends/jax.py:1 imports lmshards.train.config"
        in lines
    )


def test_a_layered_tree_passes_and_gets_its_floors(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lmshards/schemas/__init__.py": "",
            "lmshards/schemas/names.py": "N = 1\n",
            "lmshards/train/__init__.py": "",
            "lmshards/train/base/__init__.py": "",
            "lmshards/train/base/config.py": "from lmshards.schemas.names import N\n",
            "lmshards/train/backends/__init__.py": "",
            "lmshards/train/backends/jax.py": "import lmshards.train.base.config\n",
            "lmshards/train/loop.py": "from lmshards.train.backends import jax\nfrom lmshards.train.base import config\n",
        },
    )
    report = graph.check(root)
    assert report.ok, graph.render(report)
    assert graph.floors(graph._folder_graph(report)) == {
        "lmshards.schemas": 0,
        "lmshards.train": 3,
        "lmshards.train.backends": 2,
        "lmshards.train.base": 1,
    }


@pytest.mark.parametrize(
    ("importer", "imported"),
    [("preprocess", "train"), ("train", "preprocess"), ("plumbing", "schemas")],
)
def test_packages_that_must_never_meet(tmp_path, importer, imported):
    root = _tree(
        tmp_path,
        {
            "lmshards/__init__.py": "",
            f"lmshards/{importer}/__init__.py": "",
            f"lmshards/{importer}/user.py": f"import lmshards.{imported}.thing\n",
            f"lmshards/{imported}/__init__.py": "",
            f"lmshards/{imported}/thing.py": "",
        },
    )
    report = graph.check(root)
    assert [(e.source, e.target) for e in report.forbidden] == [
        (f"lmshards.{importer}.user", f"lmshards.{imported}.thing")
    ]


def test_a_packages_main_may_import_its_commands(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lmshards/train/__init__.py": "",
            "lmshards/train/__main__.py": "from lmshards.train.commands.cli import main\n",
            "lmshards/train/config.py": "",
            "lmshards/train/commands/__init__.py": "",
            "lmshards/train/commands/cli.py": "from lmshards.train import config\n",
        },
    )
    report = graph.check(root)
    assert report.ok, graph.render(report)


def test_the_project_keeps_the_rules():
    report = graph.check(REPO_ROOT)
    assert report.ok, "\n".join(graph.render(report))
