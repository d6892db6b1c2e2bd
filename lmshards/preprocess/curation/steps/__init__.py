"""Curation as an ordered list of steps (see base.py for what a step is).

The order is fixed: read -> extract -> language -> quality filters -> PII -> decontaminate -> dedup ->
tokenize; `_STEP_MODULES` lists the steps in it. Adding a step is one module beside these (defining
STEP) and its name in `_STEP_MODULES`, at its place in the order.

The framework here turns a step's flags into preprocess flags, checks them, and picks the steps a run
selects with their options (which the manifest records); lmshards.preprocess.curation.judging builds the
document steps and runs documents through them. This package imports nothing else of curation's: what
flows through it (records.py) and the stages that run it import the registry, not the reverse.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import Number, real, whole
from lmshards.preprocess.curation.steps.base import (
    CORPUS,
    DOCUMENT,
    DocumentStep,
    Judgement,
    Step,
    StepFlag,
)

# Modules of this package, one per step, in the order the steps run.
_STEP_MODULES = (
    "language",
    "gopher_quality",
    "gopher_repetition",
    "c4_quality",
    "c4_badwords",
    "fineweb_quality",
    "pii",
    "decontaminate",
    "dedup",
)

STEPS: tuple[Step, ...] = tuple(
    importlib.import_module(f"{__name__}.{m}").STEP for m in _STEP_MODULES
)
# The flag naming the quality filters to run (the document steps without a switch of their own).
QUALITY_FILTERS = "quality_filters"

__all__ = [
    "CORPUS",
    "DOCUMENT",
    "QUALITY_FILTERS",
    "STEPS",
    "DocumentStep",
    "Judgement",
    "SelectedStep",
    "Step",
    "StepError",
    "StepFlag",
    "add_step_arguments",
    "check_flags_apply",
    "check_step_values",
    "prepare_steps",
    "select_steps",
    "step_named",
]


class StepError(LmshardsError):
    """A curation step named or set wrongly on the command line."""


def step_named(name: str, steps: Sequence[Step] | None = None) -> Step:
    """The registered step called name. Raises StepError listing the names."""
    for step in STEPS if steps is None else steps:
        if step.name == name:
            return step
    raise StepError(f"Unknown curation step {name!r}; the steps are {[s.name for s in STEPS]}.")


def quality_filters(steps: Sequence[Step] | None = None) -> tuple[Step, ...]:
    """The document steps --quality_filters names (those without a switch of their own)."""
    return tuple(
        s for s in (STEPS if steps is None else steps) if s.kind == DOCUMENT and not s.switch
    )


def document_flags(steps: Sequence[Step] | None = None) -> tuple[StepFlag, ...]:
    """Every flag of the document steps, in step order."""
    return tuple(
        f for s in (STEPS if steps is None else steps) if s.kind == DOCUMENT for f in s.flags
    )


# ---------------------------------------------------------------- flags


def flag_number(flag: StepFlag) -> Number | None:
    """The range of a numeric flag (the argparse type and the check), None for the others."""
    if flag.type is int:
        low = None if flag.minimum is None else int(flag.minimum)
        high = None if flag.maximum is None else int(flag.maximum)
        return whole(low, high)
    if flag.type is float:
        return real(flag.minimum, flag.maximum)
    return None


def add_step_arguments(
    parser: argparse.ArgumentParser, steps: Sequence[Step] | None = None
) -> None:
    """--quality_filters and every document step's flags (corpus steps' flags are options.py's)."""
    names = [s.name for s in quality_filters(steps)]
    parser.add_argument(
        f"--{QUALITY_FILTERS}",
        default=None,
        help="Comma-separated quality filters to run on each document before tokenizing, in this "
        f"order whatever the order given: {', '.join(names) or '(none registered)'}.",
    )
    # Argparse's default is None (not given): the step's default is filled in by step_values, so the
    # Flex Template, which passes only what is set, needs no default of its own.
    for flag in document_flags(steps):
        number = flag_number(flag)
        if flag.type is bool:
            parser.add_argument(
                f"--{flag.flag}",
                dest=flag.flag,
                action="store_true",
                default=flag.default,
                help=flag.help,
            )
        else:
            parser.add_argument(
                f"--{flag.flag}",
                dest=flag.flag,
                type=number if number is not None else flag.type,
                choices=flag.choices,
                default=None,
                help=f"{flag.help} (default: {flag.default})"
                if flag.default not in ("", None)
                else flag.help,
            )


def step_values(namespace: Any, steps: Sequence[Step] | None = None) -> dict[str, Any]:
    """field -> value of every document step's flag, read from parsed flags (attributes by flag name;
    None: not given, the flag's default)."""
    values = {}
    for flag in document_flags(steps):
        value = getattr(namespace, flag.flag, None)
        values[flag.field] = flag.default if value is None else value
    return values


def check_step_values(values: Mapping[str, Any], steps: Sequence[Step] | None = None) -> None:
    """Checks each document step's options against its flags' ranges and choices (a config built in
    code skips argparse's), then each step's own check.

    Raises:
      StepError: naming the flag, the value and the fix.
    """
    for step in STEPS if steps is None else steps:
        if step.kind != DOCUMENT:
            continue
        for flag in step.flags:
            value = values.get(flag.field, flag.default)
            number = flag_number(flag)
            if number is not None and value is not None and not number.contains(value):
                raise StepError(
                    f"--{flag.flag} {value!r} is out of range: it must be {number.describe()}."
                )
            if flag.choices is not None and value not in flag.choices:
                raise StepError(
                    f"--{flag.flag} {value!r} is not one of {list(flag.choices)}; use one of them."
                )
        if step.check is not None:
            try:
                step.check(step_options(step, values))
            except ValueError as e:
                raise StepError(str(e)) from None


def step_options(step: Step, values: Mapping[str, Any]) -> dict[str, Any]:
    """The options a step is built from and the manifest records: its flags' fields and values."""
    return {f.field: values.get(f.field, f.default) for f in step.flags}


def parse_quality_filters(text: str, steps: Sequence[Step] | None = None) -> tuple[str, ...]:
    """The names in --quality_filters, checked. Raises StepError naming an unknown one and the fix."""
    known = [s.name for s in quality_filters(steps)]
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if name not in known:
            hint = difflib.get_close_matches(name, known, n=1)
            raise StepError(
                f"--{QUALITY_FILTERS} {name!r} is not a quality filter"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; choose from {', '.join(known) or '(none registered)'}."
            )
    if len(set(names)) != len(names):
        raise StepError(f"--{QUALITY_FILTERS} {text!r} names a filter twice; name each once.")
    return names


# ---------------------------------------------------------------- selection


@dataclasses.dataclass(frozen=True)
class SelectedStep:
    """A step a run selected, with the options it is built from (recorded in the manifest)."""

    name: str
    kind: str
    options: dict[str, Any]


def select_steps(
    *,
    quality: Sequence[str],
    values: Mapping[str, Any],
    switches: Mapping[str, bool],
    steps: Sequence[Step] | None = None,
) -> tuple[SelectedStep, ...]:
    """The steps a run selects, in the registry's order.

    quality: the --quality_filters names; values: the document steps' flag values (step_values);
    switches: a corpus step's switch field -> whether it is on (from PreprocessConfig).
    """
    selected = []
    for step in STEPS if steps is None else steps:
        if step.kind == CORPUS:
            on = switches.get(step.switch, False)
        elif not step.switch:
            on = step.name in quality
        else:
            default = next(f.default for f in step.flags if f.field == step.switch)
            on = values.get(step.switch, default) != default
        if on:
            selected.append(SelectedStep(step.name, step.kind, step_options(step, values)))
    return tuple(selected)


def prepare_steps(
    selected: Sequence[SelectedStep], steps: Sequence[Step] | None = None
) -> tuple[SelectedStep, ...]:
    """The selected steps with what each step's prepare reads added to its options (I/O: call it
    while planning the run, before work starts).

    Raises:
      StepError: what a prepare refused, naming the flag and the fix.
    """
    prepared = []
    for chosen in selected:
        step = step_named(chosen.name, steps)
        if step.prepare is None:
            prepared.append(chosen)
            continue
        try:
            added = step.prepare(chosen.options)
        except ValueError as e:
            raise StepError(str(e)) from None
        prepared.append(dataclasses.replace(chosen, options={**chosen.options, **added}))
    return tuple(prepared)


def check_flags_apply(
    values: Mapping[str, Any], selected: Sequence[SelectedStep], steps: Sequence[Step] | None = None
) -> None:
    """Refuses a flag of a document step that does not run, set to other than its default (it would be
    ignored).

    Raises:
      StepError: naming the flag, the step and the fix.
    """
    running = {chosen.name for chosen in selected}
    for step in STEPS if steps is None else steps:
        if step.kind != DOCUMENT or step.name in running:
            continue
        for flag in step.flags:
            if values.get(flag.field, flag.default) != flag.default:
                turn_on = f"--{step.switch}" if step.switch else f"--{QUALITY_FILTERS} {step.name}"
                raise StepError(
                    f"--{flag.flag} is ignored without the {step.name} step: add {turn_on} or leave "
                    f"--{flag.flag} out."
                )
