"""What Dataflow workers install: the worker distribution built from setup.py, and the worker image.

The distributions are built the way Beam's stager and a worker build them (`setup.py sdist`, then
pip building that sdist), in a clean copy of the repository's files.
"""

from __future__ import annotations

import ast
import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

WORKER_ENV = "LMSHARDS_WORKER_PACKAGE"
DOCKERFILE = REPO / "dataflow_templates" / "preprocess" / "Dockerfile"
DOCKERIGNORE = REPO / "dataflow_templates" / "preprocess" / "Dockerfile.dockerignore"
WORKER_PACKAGES = {"preprocess", "schemas"}
# Never on a worker: the trainer side, the corpus tools, the CLI package, tests, sample data, benchmarks.
NOT_ON_WORKERS = {"train", "corpus_tools", "lmshards", "tests", "data", "bench", "scripts", "dataflow_templates"}
FULL_PACKAGES = WORKER_PACKAGES | {"corpus_tools", "lmshards", "train"}
TRAINER_ONLY_REQUIREMENTS = {"keras", "keras-hub", "torch", "transformers", "datasets", "safetensors"}


def _setup_py_value(name: str) -> ast.expr:
    """The expression assigned to a module-level name of setup.py (which runs setup() on import)."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return node.value
    raise LookupError(f"setup.py assigns no {name}")


def setup_py_constant(name: str):
    """A literal module-level constant of setup.py, e.g. PINS."""
    return ast.literal_eval(_setup_py_value(name))


def _repo_files() -> list[str]:
    """Tracked and not-ignored files: what a fresh clone holds (no .venv, no egg-info, no caches)."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git checkout to know the repository's files")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, check=True, capture_output=True).stdout.decode()
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def _run(cmd: list[str], cwd: Path, *, worker: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != WORKER_ENV}
    if worker:
        env[WORKER_ENV] = "1"
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)


def _sdist(src: Path, dist_dir: Path, *, worker: bool) -> Path:
    """`setup.py sdist` as Beam's stager runs it (no `build` module installed); returns the tarball."""
    _run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist_dir)], src, worker=worker)
    (tarball,) = dist_dir.glob("*.tar.gz")
    return tarball


def top_level(names: list[str]) -> set[str]:
    """First path component under the sdist's root folder."""
    return {name.split("/")[1] for name in names if name.count("/") >= 1 and name.split("/")[1]}


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
    assert "train/" in sources and "corpus_tools/" in sources
    return root


@pytest.fixture(scope="module")
def worker_sdist(checkout, tmp_path_factory) -> Path:
    return _sdist(checkout, tmp_path_factory.mktemp("worker_dist"), worker=True)


def test_worker_sdist_holds_only_preprocess_and_schemas(worker_sdist):
    with tarfile.open(worker_sdist) as tar:
        names = tar.getnames()
    top = top_level(names)
    assert top & NOT_ON_WORKERS == set()
    assert {"preprocess", "schemas", "setup.py", "PKG-INFO"} <= top
    expected_modules = {p.relative_to(REPO).as_posix() for pkg in WORKER_PACKAGES for p in (REPO / pkg).rglob("*.py")}
    shipped = {name.split("/", 1)[1] for name in names if name.endswith(".py") and "/" in name}
    assert expected_modules <= shipped
    assert {module.split("/")[0] for module in shipped if "/" in module} == WORKER_PACKAGES
    assert not any(name.endswith((".txt", ".tfrecord", ".json")) and "/data/" in name for name in names)


def test_worker_requirements_are_the_pinned_worker_set(worker_sdist):
    with tarfile.open(worker_sdist) as tar:
        pkg_info = tar.extractfile(f"{worker_sdist.name[:-len('.tar.gz')]}/PKG-INFO").read().decode()
    meta = email.parser.Parser().parsestr(pkg_info)
    pins = setup_py_constant("PINS")
    requires = meta.get_all("Requires-Dist")
    assert sorted(requires) == sorted([
        f"apache-beam[gcp]=={pins['apache-beam']}", f"tensorflow=={pins['tensorflow']}",
        f"tensorflow-transform=={pins['tensorflow-transform']}", f"tokenizers=={pins['tokenizers']}",
        f"fsspec=={pins['fsspec']}", f"gcsfs=={pins['gcsfs']}",
    ])
    assert meta.get_all("Provides-Extra") is None  # no trainer extras hanging off the worker dist
    assert not {re.split(r"[\[=<>; ]", r)[0] for r in requires} & TRAINER_ONLY_REQUIREMENTS
    assert meta["Name"] == setup_py_constant("WORKER_DIST_NAME")


def test_worker_rebuilds_the_same_distribution_without_the_switch(worker_sdist, tmp_path):
    """A Dataflow worker pip-installs the staged sdist with no LMSHARDS_WORKER_PACKAGE in its env."""
    with tarfile.open(worker_sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (src,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    wheel_dir = tmp_path / "wheel"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheel_dir), "."],
         src, worker=False)
    (wheel,) = wheel_dir.glob("*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    packages = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packages == WORKER_PACKAGES
    assert not any(name.endswith("entry_points.txt") for name in names)  # no `lmshards` script without its package


def test_default_distribution_still_carries_everything(checkout, tmp_path):
    """Without the switch nothing changes: the trainer, the CLI and the extras stay in `lmshards`."""
    tarball = _sdist(checkout, tmp_path, worker=False)
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        pkg_info = tar.extractfile(f"{tarball.name[:-len('.tar.gz')]}/PKG-INFO").read().decode()
    assert FULL_PACKAGES <= top_level(names)
    assert "corpus_tools/tokenizer/cli.py" in {name.split("/", 1)[1] for name in names if "/" in name}
    assert {"tests", "data"} & top_level(names) == set()
    meta = email.parser.Parser().parsestr(pkg_info)
    assert meta["Name"] == "lmshards"
    extras = {ast.literal_eval(key) for key in _setup_py_value("EXTRAS").keys}
    assert extras | {"all"} <= set(meta.get_all("Provides-Extra"))


# ---------------------------------------------------------------- the worker / launcher image


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _arg_defaults(instructions) -> dict[str, str]:
    return dict(args.split("=", 1) for op, args in instructions if op == "ARG" and "=" in args)


def test_dockerfile_beam_image_matches_the_pinned_beam():
    instructions = _dockerfile_instructions()
    args = _arg_defaults(instructions)
    images = [re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], a.split()[0]) for op, a in instructions if op == "FROM"]
    pins = setup_py_constant("PINS")
    assert images[-1] == f"apache/beam_python3.11_sdk:{pins['apache-beam']}"  # the final stage: workers
    assert any(i.startswith("gcr.io/dataflow-templates-base/python311-template-launcher-base:") for i in images)


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
    assert ["--from=launcher", "/opt/google/dataflow/python_template_launcher",
            "/opt/google/dataflow/python_template_launcher"] in copies
    # Every copied source exists in the repository and gets past the build context's ignore file,
    # and what lands in WORKDIR includes main.py and setup.py.
    sources = [src for parts in copies if not parts[0].startswith("--from") for src in parts[:-1]]
    assert set(sources) >= {"setup.py", "schemas", "preprocess", "dataflow_templates/preprocess/main.py"}
    allowed = [line[1:].rstrip("/*") for line in DOCKERIGNORE.read_text().splitlines() if line.startswith("!")]
    for src in sources:
        assert (REPO / src).exists(), src
        assert src in allowed, f"{src} is excluded from the build context by {DOCKERIGNORE.name}"
    entrypoint = [args for op, args in instructions if op == "ENTRYPOINT"]
    assert entrypoint == ['["/opt/apache/beam/boot"]'] and workdir == "/template"


# Run in a fresh interpreter where everything a worker lacks fails to import.
_WORKER_ONLY_PRELUDE = """
import importlib.abc, sys
class NotOnWorkers(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not installed on Dataflow workers")
sys.meta_path.insert(0, NotOnWorkers())
"""


def _run_as_worker(code: str) -> subprocess.CompletedProcess:
    blocked = sorted(NOT_ON_WORKERS | {r.replace("-", "_") for r in TRAINER_ONLY_REQUIREMENTS})
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # as if the worker distribution were installed
    return subprocess.run([sys.executable, "-c", _WORKER_ONLY_PRELUDE.format(blocked=blocked) + code],
                          cwd=REPO.parent, env=env, capture_output=True, text=True, timeout=120)


def test_worker_modules_and_the_template_entry_point_need_nothing_outside_the_worker_set():
    """Every module of the worker packages and the Flex Template's main.py import no trainer-side package."""
    main_py = REPO / "dataflow_templates" / "preprocess" / "main.py"
    proc = _run_as_worker(
        "import importlib, pkgutil, runpy\n"
        f"for package in {sorted(WORKER_PACKAGES)!r}:\n"
        "    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + '.'):\n"
        "        if not module.name.endswith('.__main__'):  # running it is `python -m`'s job\n"
        "            importlib.import_module(module.name)\n"
        f"sys.argv = [{str(main_py)!r}, '--help']\n"
        f"runpy.run_path({str(main_py)!r}, run_name='__main__')\n"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--input" in proc.stdout and "--tokenizer" in proc.stdout and "--output" in proc.stdout
