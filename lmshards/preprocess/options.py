"""`lmshards preprocess` flags (declared without Beam), turned into a frozen PreprocessConfig.

Our flags live beside Beam's own (--runner, --project, --temp_location, --direct_num_workers, ...),
which pass through untouched to the runner.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from lmshards.plumbing.cli import add_overwrite_flag, add_verbose_flag
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import (
    COUNT,
    FRACTION_BELOW_ONE,
    POSITIVE,
    SEED,
    Number,
    check_ranges,
    whole,
)
from lmshards.plumbing.known_names import name_hints
from lmshards.plumbing.lease import STALE_AFTER_RANGE, STALE_AFTER_S, add_lease_flag
from lmshards.plumbing.units import size_flag
from lmshards.preprocess.curation.minhash import (
    DEFAULT_BANDS,
    DEFAULT_MIN_WORDS,
    DEFAULT_NGRAM,
    DEFAULT_ROWS,
    MAX_HASHING_BYTES,
    hashing_bytes,
    max_permutations,
)
from lmshards.preprocess.curation.steps import (
    DOCUMENT,
    QUALITY_FILTERS,
    SelectedStep,
    StepError,
    add_step_arguments,
    check_flags_apply,
    check_step_values,
    document_flags,
    parse_quality_filters,
    select_steps,
    step_values,
)
from lmshards.preprocess.curation.steps.decontaminate import DEFAULT_DECONTAMINATE_NGRAM
from lmshards.preprocess.curation.steps.dedup import DEDUP_CHOICES, DEDUP_NEAR, DEDUP_NONE
from lmshards.preprocess.sources import (
    DEFAULT_TEXT_COLUMN,
    DEFAULT_TEXT_FIELD,
    HTML_EXTRACT_MAIN,
    LINE,
    MAX_HTML_BYTES,
    UTF8,
    add_reading_arguments,
)
from lmshards.preprocess.stages.pack import (
    DEFAULT_GROUP_TOKENS,
    REMAINDER_CHOICES,
    REMAINDER_DROP,
    REMAINDER_PAD,
)
from lmshards.preprocess.stages.shard import DEFAULT_SHARD_MULTIPLE, DEFAULT_TARGET_SHARD_MB
from lmshards.schemas.constants import (
    DEFAULT_SEQ_LEN,
    MIN_SEQ_LEN,
    PACKING_BEST_FIT,
    PACKING_CHOICES,
    PACKING_CONCAT,
)

DEFAULT_VALIDATION_FRACTION = 0.005
# The options that decide how a run's tokens are cut into blocks, split and sharded (in the manifest's order).
LAYOUT_OPTIONS = (
    "seq_len",
    "remainder",
    "validation_fraction",
    "seed",
    "target_shard_mb",
    "num_shards",
    "shard_multiple",
)
DEFAULT_DOCUMENTS_PER_TOKENIZER_CALL = 1000  # documents per encode_batch call
# Flags that were renamed: the old name is refused with a hint naming the new one.
RENAMED_FLAGS = {
    **name_hints("preprocess"),
    "--batch_size": "--documents_per_tokenizer_call",
}
DEFAULT_RANGE_MB = 64.0  # bytes of input one read task covers
DEFAULT_TOKENIZER_THREADS = 0  # auto: see lmshards.preprocess.runners.tokenizer_threads
# The curation flags, which `lmshards repack` refuses (its token store was curated by preprocess).
CURATION_FLAGS = (
    "--dedup",
    "--minhash_ngram",
    "--minhash_bands",
    "--minhash_rows",
    "--minhash_min_words",
    "--decontaminate",
    "--decontaminate_ngram",
    "--decontaminate_text_field",
    f"--{QUALITY_FILTERS}",
    *(f"--{flag.flag}" for flag in document_flags()),
    "--curate_sample",
)
# Declared optional to Beam (which parses every option class on every run), required by `lmshards preprocess`.
REQUIRED_FLAGS = ("--input", "--tokenizer", "--output")
# Shard names hold 5-digit indices; far more files than records is a typo (each split also needs one
# record per shard, checked once the records are counted: lmshards.preprocess.stages.shard.check_shard_count).
MAX_NUM_SHARDS = 10_000
MAX_SEQ_LEN = 1 << 20
MAX_TOKENIZER_THREADS = 1024
MAX_DOCUMENTS_PER_TOKENIZER_CALL = 10**6
MAX_NGRAM = 1000  # words per shingle or n-gram
MAX_MINHASH_BANDS_OR_ROWS = 10_000
MAX_MINHASH_MIN_WORDS = 1_000_000
MAX_CURATE_SAMPLE = 1_000_000  # documents: a sample is judged in memory, in one batch
# The range of every numeric flag: the argparse type of the flag and validate()'s check.
PREPROCESS_RANGES: dict[str, Number] = {
    "seq_len": whole(MIN_SEQ_LEN, MAX_SEQ_LEN),
    "validation_fraction": FRACTION_BELOW_ONE,
    "seed": SEED,
    "target_shard_mb": POSITIVE,  # parsed by size_flag (a unit may follow), checked here
    "num_shards": whole(1, MAX_NUM_SHARDS),
    "shard_multiple": whole(1, MAX_NUM_SHARDS),
    "tokenizer_threads": whole(0, MAX_TOKENIZER_THREADS),
    "documents_per_tokenizer_call": whole(1, MAX_DOCUMENTS_PER_TOKENIZER_CALL),
    "range_mb": POSITIVE,
    "packing_group_tokens": COUNT,
    "lease_stale_s": STALE_AFTER_RANGE,
    "minhash_ngram": whole(1, MAX_NGRAM),
    "minhash_bands": whole(1, MAX_MINHASH_BANDS_OR_ROWS),
    "minhash_rows": whole(1, MAX_MINHASH_BANDS_OR_ROWS),
    "minhash_min_words": whole(0, MAX_MINHASH_MIN_WORDS),
    "decontaminate_ngram": whole(1, MAX_NGRAM),
    "curate_sample": whole(0, MAX_CURATE_SAMPLE),
}
_R = PREPROCESS_RANGES


# The runners --help and an error message suggest: the ones a user of lmshards picks from.
SUGGESTED_RUNNERS = (
    "DirectRunner",
    "DataflowRunner",
    "DaskRunner",
    "FlinkRunner",
    "SparkRunner",
    "PrismRunner",
)


class PreprocessError(LmshardsError):
    """A bad preprocess flag value."""


def add_preprocess_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `lmshards preprocess`; every other flag is a Beam pipeline option
    (lmshards.preprocess.pipeline_options declares these to Beam's parser)."""
    parser.add_argument(
        "--input",
        action="append",
        default=None,
        help="Input file, directory or glob (local or gs://); repeatable.",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json, or a directory holding one (local or gs://).",
    )
    parser.add_argument("--output", default=None, help="Output directory (local or gs://).")
    parser.add_argument(
        "--seq_len",
        type=_R["seq_len"],
        default=DEFAULT_SEQ_LEN,
        help=f"Tokens per record (>= {MIN_SEQ_LEN}, <= the tokenizer's model_max_length).",
    )
    parser.add_argument(
        "--remainder",
        choices=REMAINDER_CHOICES,
        default=None,
        help="Final partial block of each packing group: drop it, or pad it "
        "with the pad token (attention_mask 0). Default: drop with --packing concat; "
        "--packing best_fit pads every block it cannot fill, so it takes only pad.",
    )
    parser.add_argument(
        "--packing",
        choices=PACKING_CHOICES,
        default=PACKING_CONCAT,
        help="concat (default): documents one after another, cut every seq_len tokens "
        "(a block's tokens see neighbouring documents). best_fit: whole documents packed "
        "into padded blocks by best-fit decreasing; records also carry segment_ids and "
        "positions, and the trainer keeps each document's attention to itself.",
    )
    parser.add_argument(
        "--validation_fraction",
        type=_R["validation_fraction"],
        default=DEFAULT_VALIDATION_FRACTION,
        help="Share of documents held out for validation.",
    )
    parser.add_argument("--seed", type=_R["seed"], default=0, help="Seed of the record shuffle.")
    parser.add_argument(
        "--target_shard_mb",
        type=size_flag("MiB"),
        default=DEFAULT_TARGET_SHARD_MB,
        help="Target shard size in MiB (2^20 bytes), or with a unit (500MB = 500 x 10^6 bytes).",
    )
    parser.add_argument(
        "--num_shards",
        type=_R["num_shards"],
        default=None,
        help="Shards per split, instead of --target_shard_mb.",
    )
    parser.add_argument(
        "--shard_multiple",
        type=_R["shard_multiple"],
        default=DEFAULT_SHARD_MULTIPLE,
        help="Round each split's shard count up to a multiple of this (so every "
        "TPU host gets whole files).",
    )
    # --doc_separator, --doc_marker(_regex), --text_field, --text_column, --encoding
    add_reading_arguments(parser)
    parser.add_argument(
        "--skip_binary",
        action="store_true",
        help="Skip input files that are not text (images, archives, PDF, compressed bytes whose "
        "name does not end in .gz/.bz2/.zst/.xz, ...) and count them (files_skipped_binary) "
        "instead of refusing the run.",
    )
    # The Flex Template launcher's `--overwrite=true` is rewritten `--overwrite` by lmshards.preprocess.cli.
    add_overwrite_flag(
        parser,
        help="Replace an earlier lmshards preprocess output (its manifest is deleted first); "
        "refused if the directory holds anything lmshards did not write.",
    )
    add_verbose_flag(parser)
    add_lease_flag(parser)
    parser.add_argument(
        "--keep_tokens",
        action="store_true",
        help="Also keep every document's token ids in OUTPUT/tokens/ (Parquet), so that "
        "`lmshards repack` can build other shard sets (seq_len, shard count, split, seed) "
        "without tokenizing again. The shards are the same with or without it.",
    )
    parser.add_argument(
        "--tokenizer_threads",
        type=_R["tokenizer_threads"],
        default=DEFAULT_TOKENIZER_THREADS,
        help="Tokenizer threads per worker process (on the default runner, encode threads "
        "that each encode their own batches). 0 = auto: every core for the default "
        "in-process runner (one worker), else 1 (the runner already runs one worker "
        "process per core).",
    )
    parser.add_argument(
        "--documents_per_tokenizer_call",
        type=_R["documents_per_tokenizer_call"],
        default=DEFAULT_DOCUMENTS_PER_TOKENIZER_CALL,
        help="Documents per tokenizer call (not the training batch); no effect on output.",
    )
    parser.add_argument(
        "--range_mb",
        type=size_flag("MiB"),
        default=DEFAULT_RANGE_MB,
        help="Input per read task in MiB (2^20 bytes), or with a unit (e.g. 100MB); "
        "no effect on output.",
    )
    parser.add_argument(
        "--packing_group_tokens",
        type=_R["packing_group_tokens"],
        default=DEFAULT_GROUP_TOKENS,
        help="Approximate tokens per packing group; each group drops or pads at most "
        "one partial block.",
    )
    add_curation_arguments(parser)


def preprocess_flags() -> frozenset[str]:
    """Every flag add_preprocess_arguments declares. Beam's parser declares them for every Beam command
    (stats, repack), which would take them and ignore them; those commands refuse them instead."""
    parser = argparse.ArgumentParser(add_help=False)
    add_preprocess_arguments(parser)
    return frozenset(opt for action in parser._actions for opt in action.option_strings)


def add_curation_arguments(parser: argparse.ArgumentParser) -> None:
    """--dedup, the MinHash parameters and --decontaminate (see docs/preprocess.md, Curation)."""
    parser.add_argument(
        "--dedup",
        choices=DEDUP_CHOICES,
        default=DEDUP_NONE,
        help="Remove duplicate documents before tokenizing: exact (equal after Unicode NFC and "
        "whitespace collapsing) or near (MinHash LSH over word n-grams; includes exact). Every "
        "removal is listed in OUTPUT/curation/.",
    )
    parser.add_argument(
        "--minhash_ngram",
        type=_R["minhash_ngram"],
        default=DEFAULT_NGRAM,
        help="--dedup near: words per shingle.",
    )
    parser.add_argument(
        "--minhash_bands",
        type=_R["minhash_bands"],
        default=DEFAULT_BANDS,
        help="--dedup near: LSH bands (more: more pairs caught at lower similarity).",
    )
    parser.add_argument(
        "--minhash_rows",
        type=_R["minhash_rows"],
        default=DEFAULT_ROWS,
        help="--dedup near: MinHash values per band (more: fewer pairs caught at lower similarity).",
    )
    parser.add_argument(
        "--minhash_min_words",
        type=_R["minhash_min_words"],
        default=DEFAULT_MIN_WORDS,
        help="--dedup near: documents of fewer words are only exact-deduplicated, never near-removed "
        "nor the kept document of a near removal (0: every document takes part).",
    )
    parser.add_argument(
        "--decontaminate",
        action="append",
        default=None,
        help="Eval set (file, directory or glob, read like --input); training documents sharing a "
        "--decontaminate_ngram word n-gram with any of its documents are removed. Repeatable.",
    )
    parser.add_argument(
        "--decontaminate_ngram",
        type=_R["decontaminate_ngram"],
        default=DEFAULT_DECONTAMINATE_NGRAM,
        help="Words per n-gram for --decontaminate.",
    )
    parser.add_argument(
        "--decontaminate_text_field",
        default=None,
        help="The JSON Lines field / Parquet column holding the eval sets' text "
        "(default: --text_field / --text_column).",
    )
    # --quality_filters and the document steps' own flags (lmshards.preprocess.curation.steps)
    add_step_arguments(parser)
    parser.add_argument(
        "--curate_sample",
        type=_R["curate_sample"],
        default=0,
        help="Instead of the run: judge the first N documents (spread over the input files) with the "
        "document steps selected and print what each would remove, with examples; writes nothing.",
    )


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
    """Everything our own flags say, validated for range; passed down to every stage."""

    inputs: tuple[str, ...]
    tokenizer: str
    output: str
    seq_len: int = DEFAULT_SEQ_LEN
    remainder: str = REMAINDER_DROP
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION
    seed: int = 0
    target_shard_mb: float = DEFAULT_TARGET_SHARD_MB
    num_shards: int | None = None
    shard_multiple: int = DEFAULT_SHARD_MULTIPLE
    doc_separator: str = LINE
    text_field: str = DEFAULT_TEXT_FIELD
    text_column: str = DEFAULT_TEXT_COLUMN
    encoding: str = UTF8
    doc_marker: str | None = None
    doc_marker_regex: str | None = None
    html_field: str | None = None
    url_field: str | None = None
    html_extract: str = HTML_EXTRACT_MAIN
    html_drop_comments: bool = False
    max_html_bytes: int = MAX_HTML_BYTES
    skip_binary: bool = False
    overwrite: bool = False
    keep_tokens: bool = False
    tokenizer_threads: int = DEFAULT_TOKENIZER_THREADS
    documents_per_tokenizer_call: int = DEFAULT_DOCUMENTS_PER_TOKENIZER_CALL
    range_mb: float = DEFAULT_RANGE_MB
    packing_group_tokens: int = DEFAULT_GROUP_TOKENS
    packing: str = PACKING_CONCAT
    lease_stale_s: float = STALE_AFTER_S
    dedup: str = DEDUP_NONE
    minhash_ngram: int = DEFAULT_NGRAM
    minhash_bands: int = DEFAULT_BANDS
    minhash_rows: int = DEFAULT_ROWS
    minhash_min_words: int = DEFAULT_MIN_WORDS
    decontaminate: tuple[str, ...] = ()
    decontaminate_ngram: int = DEFAULT_DECONTAMINATE_NGRAM
    decontaminate_text_field: str | None = None
    quality_filters: tuple[str, ...] = ()  # --quality_filters, in the order given
    # The document steps' flag values, (field, value) by field; a field left out takes its default.
    step_values: tuple[tuple[str, Any], ...] = ()
    curate_sample: int = 0  # documents; 0: the run itself

    @property
    def curating(self) -> bool:
        """Whether a curation stage runs (--dedup exact/near, --decontaminate or a document step)."""
        return bool(self.curation_steps)

    @property
    def curation_steps(self) -> tuple[SelectedStep, ...]:
        """The curation steps this run selects, in their fixed order, with their options."""
        return select_steps(
            quality=self.quality_filters,
            values=dict(self.step_values),
            switches={"dedup": self.dedup != DEDUP_NONE, "decontaminate": bool(self.decontaminate)},
        )

    def __post_init__(self) -> None:
        validate(self)

    def manifest_options(self) -> dict[str, Any]:
        """The options that decide the output's bytes (recorded in the manifest).

        Paths, --overwrite, --verbose, --keep_tokens, --lease_stale_s and pure speed knobs (documents per tokenizer call, read range, threads) are left out, so
        the same corpus gives the same manifest whatever the machine.
        """
        keys = (
            *LAYOUT_OPTIONS,
            "doc_separator",
            "text_field",
            "text_column",
            "packing_group_tokens",
        )
        recorded = {key: getattr(self, key) for key in keys}
        # Reading options added after format 1 are recorded only when set, so that the manifest of
        # a run that does not use them stays as it was.
        recorded.update(
            {
                f.name: getattr(self, f.name)
                for f in dataclasses.fields(self)
                if f.name in NEWER_READING_OPTIONS and getattr(self, f.name) != f.default
            }
        )
        if self.packing != PACKING_CONCAT:  # only when packed: concat manifests stay as they were
            recorded["packing"] = self.packing
        return recorded


# Reading flags the manifest records only when they differ from their defaults.
NEWER_READING_OPTIONS = (
    "encoding",
    "doc_marker",
    "doc_marker_regex",
    "skip_binary",
    "html_field",
    "url_field",
    "html_extract",
    "html_drop_comments",
    "max_html_bytes",
)


def validate(config: PreprocessConfig) -> None:
    """Checks that need no I/O. Raises PreprocessError (or FlagRangeError) naming the flag and the fix."""
    if not config.inputs:
        raise PreprocessError("No --input given. Pass --input PATH_OR_GLOB (repeatable).")
    if not config.tokenizer:
        raise PreprocessError(
            "No --tokenizer given. Pass a tokenizer.json or a tokenizer directory."
        )
    if not config.output:
        raise PreprocessError("No --output given. Pass --output DIR (local or gs://).")
    check_ranges(config, PREPROCESS_RANGES)
    if config.remainder not in REMAINDER_CHOICES:
        raise PreprocessError(
            f"--remainder {config.remainder!r} is not one of {list(REMAINDER_CHOICES)}."
        )
    if config.packing not in PACKING_CHOICES:
        raise PreprocessError(
            f"--packing {config.packing!r} is not one of {list(PACKING_CHOICES)}."
        )
    if config.packing == PACKING_BEST_FIT and config.remainder != REMAINDER_PAD:
        raise PreprocessError(
            f"--packing best_fit cannot honour --remainder {config.remainder}: it keeps every token "
            "and pads every block it cannot fill. Use --remainder pad (or leave --remainder out)."
        )
    validate_curation(config)


def validate_curation(config: PreprocessConfig) -> None:
    """Range checks of the curation flags (the eval sets are checked while planning)."""
    if config.dedup not in DEDUP_CHOICES:
        raise PreprocessError(f"--dedup {config.dedup!r} is not one of {list(DEDUP_CHOICES)}.")
    if config.decontaminate_text_field == "":
        raise PreprocessError(
            "--decontaminate_text_field is empty; give the eval sets' JSON field or Parquet column."
        )
    if config.dedup == DEDUP_NEAR:
        check_minhash_memory(bands=config.minhash_bands, rows=config.minhash_rows)
    try:
        parse_quality_filters(",".join(config.quality_filters))
        check_step_values(dict(config.step_values))
    except StepError as e:
        raise PreprocessError(str(e)) from None


def check_minhash_memory(*, bands: int, rows: int) -> None:
    """Refuses --minhash_bands x --minhash_rows whose hashing needs more than MAX_HASHING_BYTES, each of
    them in its range or not: each document's signature() would allocate that much.

    Raises:
      PreprocessError: with the estimate and the largest product that fits.
    """
    needed = hashing_bytes(bands * rows)
    if needed > MAX_HASHING_BYTES:
        raise PreprocessError(
            f"--minhash_bands {bands} x --minhash_rows {rows} = {bands * rows:,} MinHash values per document "
            f"need about {needed / 1e9:,.1f} GB of memory to hash a document, over the "
            f"{MAX_HASHING_BYTES / 1e9:.1f} GB limit; lower --minhash_bands or --minhash_rows so that their "
            f"product is at most {max_permutations():,} (the default is {DEFAULT_BANDS} x {DEFAULT_ROWS})."
        )


@dataclasses.dataclass(frozen=True)
class DependentFlag:
    """A flag that means something only when `applies` holds of the config; set otherwise it would be
    ignored, so it is refused: `{flag} is ignored {when}: {fix} or leave {flag} out.`"""

    when: str
    fix: str
    applies: Callable[[PreprocessConfig], bool]


_NEAR = DependentFlag("without --dedup near", "add --dedup near", lambda c: c.dedup == DEDUP_NEAR)
_DECONTAMINATE = DependentFlag(
    "without --decontaminate", "add --decontaminate EVAL_SET", lambda c: bool(c.decontaminate)
)
DEPENDENT_FLAGS: dict[str, DependentFlag] = {
    "--minhash_ngram": _NEAR,
    "--minhash_bands": _NEAR,
    "--minhash_rows": _NEAR,
    "--minhash_min_words": _NEAR,
    "--decontaminate_ngram": _DECONTAMINATE,
    "--decontaminate_text_field": _DECONTAMINATE,
    "--curate_sample": DependentFlag(
        "without a document step",
        f"add --{QUALITY_FILTERS} or a step's own switch (--languages, ...)",
        lambda c: any(s.kind == DOCUMENT for s in c.curation_steps),
    ),
    "--target_shard_mb": DependentFlag(
        "with --num_shards, which fixes the count", "drop --num_shards", lambda c: not c.num_shards
    ),
}


def check_dependent_flags(config: PreprocessConfig) -> None:
    """Refuses a flag of DEPENDENT_FLAGS set to other than its default where it does not apply. (Its
    default is let through: the Flex Template launcher passes every parameter's default.)

    Raises:
      PreprocessError: naming the flag, why it would be ignored and the fix.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(PreprocessConfig)}
    for flag, dependent in DEPENDENT_FLAGS.items():
        name = flag.removeprefix("--")
        if getattr(config, name) != defaults[name] and not dependent.applies(config):
            raise PreprocessError(
                f"{flag} is ignored {dependent.when}: {dependent.fix} or leave {flag} out."
            )
    try:  # the document steps' flags: each applies only when its step runs
        check_flags_apply(dict(config.step_values), config.curation_steps)
    except StepError as e:
        raise PreprocessError(str(e)) from None


def config_from_flags(flags: argparse.Namespace | Any) -> PreprocessConfig:
    """Our flags (parsed by add_preprocess_arguments' parser, or Beam's view of them), as a
    PreprocessConfig. Raises PreprocessError on a bad value."""
    own = {"inputs", "decontaminate", "quality_filters", "step_values"}
    fields = {f.name for f in dataclasses.fields(PreprocessConfig)} - own
    values = {name: getattr(flags, name) for name in fields}
    if values["remainder"] is None:
        values["remainder"] = default_remainder(values["packing"])
    try:
        quality = parse_quality_filters(getattr(flags, QUALITY_FILTERS) or "")
    except StepError as e:
        raise PreprocessError(str(e)) from None
    return PreprocessConfig(
        inputs=tuple(flags.input or ()),
        decontaminate=tuple(flags.decontaminate or ()),
        quality_filters=quality,
        step_values=tuple(sorted(step_values(flags).items())),
        **values,
    )


def resolved_tokenizer_threads(requested: int, *, in_process: bool) -> int:
    """--tokenizer_threads, with 0 (auto) resolved: all cores for one in-process worker, else 1.

    On multi-process runners (multi_processing, Dask, Dataflow: one SDK process per vCPU) more
    threads per worker would only oversubscribe the cores.
    """
    if requested:
        return requested
    return (os.cpu_count() or 1) if in_process else 1


def default_remainder(packing: str) -> str:
    """--remainder when not given: pad for best_fit (it pads blocks anyway), else drop."""
    return REMAINDER_PAD if packing == PACKING_BEST_FIT else REMAINDER_DROP
