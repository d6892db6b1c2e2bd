"""The test tree mirrors the package: a reader finds a module's tests without searching."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "lmshards"
# Folders of tests/ that mirror lmshards/ sub-packages; every other folder holds the tests of one behaviour.
MIRRORED = ("command", "corpus_tools", "plumbing", "preprocess", "schemas", "train")
NOT_TESTS = ("data", "helpers")


def module_under_test(test_file: Path) -> Path | None:
    """The module or package a mirrored test file tests (`tests/train/loop/test_trainer_loop.py` ->
    `lmshards/train/loop/trainer.py`, its aspect `loop` dropped), or None if nothing matches."""
    rel = test_file.relative_to(TESTS)
    folder = PACKAGE.joinpath(*rel.parts[:-1])
    words = rel.stem.removeprefix("test_").split("_")
    for end in range(len(words), 0, -1):  # the longest module name the file name starts with
        name = "_".join(words[:end])
        for candidate in (folder / f"{name}.py", folder / name):
            if candidate.is_file() or (candidate / "__init__.py").is_file():
                return candidate
    return None


def test_every_mirrored_test_file_names_a_module_of_its_folder():
    strays = [
        str(path.relative_to(TESTS))
        for folder in MIRRORED
        for path in sorted((TESTS / folder).rglob("test_*.py"))
        if module_under_test(path) is None
    ]
    assert not strays, (
        f"{strays}: name a test file after the module it tests (tests/X/test_module[_aspect].py for "
        "lmshards/X/module.py), or move a test of a behaviour that spans modules to a folder named for it"
    )


def test_behaviour_folders_are_not_named_like_a_package():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith("__")}
    behaviours = folders - set(MIRRORED) - set(NOT_TESTS)
    assert not {name for name in behaviours if (PACKAGE / name).is_dir()}
    assert all(next((TESTS / name).glob("test_*.py"), None) for name in behaviours), behaviours


def test_the_rule_finds_a_module_through_an_aspect():
    assert module_under_test(TESTS / "train" / "loop" / "test_trainer_loop.py") == (
        PACKAGE / "train" / "loop" / "trainer.py"
    )
    assert module_under_test(TESTS / "train" / "test_families.py") == PACKAGE / "train" / "families"
    assert module_under_test(TESTS / "train" / "test_no_such_module.py") is None
