"""The runnable examples in the docstrings of the interfaces contributors implement or call: the backend
interface, the backend names, the model families and the input plan."""

from __future__ import annotations

import doctest
import importlib

import pytest

# Without TensorFlow or Keras: these run in a second.
MODULES = [
    "lmshards.train.backend_names",
    "lmshards.train.backends.base",
    "lmshards.train.families",
    "lmshards.train.families.base",
]


def run_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, f"{result.failed} example(s) of {name} failed (see the output above)"


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_run(name):
    run_doctests(name)


def test_the_input_plan_examples_run():
    pytest.importorskip("tensorflow")
    run_doctests("lmshards.train.inputs.input_plan")
