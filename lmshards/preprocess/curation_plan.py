"""Planning curation while the pipeline is built: the settings, and the eval sets checked.

The eval sets are read once here, through the same readers as the inputs, so that a missing or
empty eval set, or one whose every document is shorter than --decontaminate_ngram words (it could
never match anything), is refused before any work starts.
"""

from __future__ import annotations

import dataclasses

from lmshards.preprocess.curation.decontaminate import longest_words
from lmshards.preprocess.curation.dedup import MinHashSettings
from lmshards.preprocess.curation.stage import CurationSettings, EvalSets
from lmshards.preprocess.curation.steps import SelectedStep, StepError, prepare_steps
from lmshards.preprocess.curation.steps.dedup import DEDUP_NONE
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.sources import (
    InputError,
    ReadOptions,
    check_not_empty,
    discover_inputs,
    iter_documents,
    read_options_from,
)
from lmshards.schemas.manifest import InputFileInfo


def eval_read_options(config: PreprocessConfig) -> ReadOptions:
    """The inputs' reading options, with --decontaminate_text_field as the JSON field and Parquet column."""
    options = read_options_from(config)
    field = config.decontaminate_text_field
    if field is None:
        return options
    return dataclasses.replace(options, text_field=field, text_column=field)


def plan_eval_sets(config: PreprocessConfig) -> EvalSets | None:
    """The eval sets' files and reading options, checked; None without --decontaminate.

    Raises:
      InputError: an eval set that is missing, empty, gives no document, or has no document of
        --decontaminate_ngram words; the message names it.
    """
    if not config.decontaminate:
        return None
    options = eval_read_options(config)
    files: list[InputFileInfo] = []
    for pattern in config.decontaminate:
        try:
            discovery = discover_inputs([pattern])
            check_not_empty(discovery.files)
        except InputError as e:
            raise InputError(str(e).replace("--input", "--decontaminate")) from None
        texts = list(iter_documents([f.path for f in discovery.files], options))
        if not texts:
            raise InputError(
                f"--decontaminate {pattern!r} gives no documents; check it, and "
                "--decontaminate_text_field for JSON Lines or Parquet eval sets."
            )
        longest = longest_words(texts)
        if longest < config.decontaminate_ngram:
            raise InputError(
                f"--decontaminate_ngram {config.decontaminate_ngram} is longer than every document of "
                f"--decontaminate {pattern!r} (the longest has {longest} words), so nothing could "
                f"match; use --decontaminate_ngram {max(longest, 1)} or less."
            )
        files.extend(f for f in discovery.files if f not in files)
    return EvalSets(files=tuple(files), options=options)


def planned_steps(config: PreprocessConfig) -> tuple[SelectedStep, ...]:
    """The run's curation steps, with what each reads before work starts (a word list's fingerprint).

    Raises:
      InputError: a file a step names that is missing or unusable, naming the flag and the fix.
    """
    try:
        return prepare_steps(config.curation_steps)
    except StepError as e:
        raise InputError(str(e)) from None


def plan_curation(
    config: PreprocessConfig, *, batch_size: int, range_bytes: int
) -> CurationSettings | None:
    """The curation stage's settings, or None when nothing is curated (--dedup none, no eval set, no
    document step)."""
    eval_sets = plan_eval_sets(config)
    steps = planned_steps(config)
    if config.dedup == DEDUP_NONE and eval_sets is None and not steps:
        return None
    return CurationSettings(
        dedup=config.dedup,
        minhash=MinHashSettings(
            ngram=config.minhash_ngram,
            bands=config.minhash_bands,
            rows=config.minhash_rows,
            min_words=config.minhash_min_words,
        ),
        decontaminate_ngram=config.decontaminate_ngram,
        eval_sets=eval_sets,
        batch_size=batch_size,
        range_bytes=range_bytes,
        steps=steps,
    )
