"""constraints/tpu.txt, the TPU venv's pins, against setup.py's and the known libtpu ranges."""

from __future__ import annotations

import ast

from packaging.utils import canonicalize_name

from lmshards.train.commands.runtime_check import (
    TENSORFLOW_DISTRIBUTIONS,
    TENSORFLOW_TPU,
    libtpu_range,
)
from tests.helpers.tpu_constraints import REPO, constraint_lines, tpu_pins

# Installed without their requirements: resolving them would bring `tensorflow` beside tensorflow-tpu.
NO_DEPS = {"tensorflow-text", "keras-hub"}
# Released with TensorFlow and pinned to its minor version: the TPU set's follows tensorflow-tpu's.
FOLLOWS_TENSORFLOW = {"tensorboard"}


def setup_py_literal(name: str):
    """A literal module-level constant of setup.py (which runs setup() on import, so it is parsed)."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(f"setup.py assigns no {name}")


def test_every_pin_is_exact_and_named_once():
    lines = constraint_lines()
    assert all(len(req.specifier) == 1 and str(req.specifier).startswith("==") for req, _ in lines)
    names = [canonicalize_name(req.name) for req, _ in lines]
    assert len(names) == len(set(names))


def test_pins_setup_py_shares_never_disagree():
    setup_pins = {canonicalize_name(k): v for k, v in setup_py_literal("PINS").items()}
    pins = tpu_pins()
    shared = {name: version for name, version in pins.items() if name in setup_pins}
    agreeing = set(shared) - FOLLOWS_TENSORFLOW
    assert {n: shared[n] for n in agreeing} == {n: setup_pins[n] for n in agreeing}
    tf_minor = pins[TENSORFLOW_TPU].rsplit(".", 1)[0]
    assert all(shared[n].rsplit(".", 1)[0] == tf_minor for n in FOLLOWS_TENSORFLOW & set(shared))
    # Everything the `train` extra installs, but TensorFlow itself, is among them.
    assert train_extra_names() - {"tensorflow"} <= set(shared)


def train_extra_names() -> set[str]:
    """The distributions setup.py's EXTRAS['train'] pins (its entries are `pinned(NAME)` calls)."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    (extras,) = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "EXTRAS"
    ]
    train = next(v for k, v in zip(extras.keys, extras.values) if ast.literal_eval(k) == "train")
    return {canonicalize_name(call.args[0].value) for call in train.elts}


def test_one_tensorflow_distribution_and_a_libtpu_that_loads_with_it():
    pins = tpu_pins()
    assert [name for name in TENSORFLOW_DISTRIBUTIONS if name in pins] == [TENSORFLOW_TPU]
    known = libtpu_range(TENSORFLOW_TPU, pins[TENSORFLOW_TPU])
    assert known is not None and known.contains(pins["libtpu"])


def test_only_what_would_pull_tensorflow_is_installed_without_requirements():
    assert {
        canonicalize_name(req.name) for req, no_deps in constraint_lines() if no_deps
    } == NO_DEPS
