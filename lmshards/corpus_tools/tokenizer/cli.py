"""`lmshards tokenizer train` and `lmshards tokenizer inspect`: train a tokenizer on a corpus sample, or look at one."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from lmshards.corpus_tools.tokenizer import config as cfg
from lmshards.corpus_tools.tokenizer.corpus_report import (
    DEFAULT_INSPECT_DOCUMENTS,
    byte_fallback_ids,
    load_tokenizer,
    sample_report,
)
from lmshards.corpus_tools.tokenizer.training import TrainResult, train_and_write
from lmshards.plumbing import stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_overwrite_flag,
    add_verbose_flag,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.flag_types import COUNT, SEED
from lmshards.plumbing.known_names import name_hints
from lmshards.plumbing.lease import add_lease_flag, output_lease
from lmshards.plumbing.units import format_duration, size_flag
from lmshards.preprocess import sources
from lmshards.schemas.layouts import TOKENIZER_OUTPUT

log = logging.getLogger(__name__)
TRAIN_COMMAND = "tokenizer train"
INSPECT_COMMAND = "tokenizer inspect"
LOG_PACKAGES = ("lmshards.corpus_tools", "lmshards.preprocess", "lmshards.schemas")
# --max_bytes: a bare number is bytes; 500MB and 2GiB mean what their units say.
MAX_BYTES_TYPE = size_flag("B")


def _add_input_args(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--input",
        action="append",
        required=required,
        default=[],
        metavar="PATH",
        help="file, directory or glob, local or gs://; text, JSONL or Parquet, optionally "
        ".gz/.bz2/.zst/.xz (repeatable)",
    )
    sources.add_reading_arguments(parser)
    parser.add_argument(
        "--seed", type=SEED, default=cfg.DEFAULT_SEED, help="seed of the document sample"
    )


def train_parser() -> CommandParser:
    parser = CommandParser(
        TRAIN_COMMAND,
        renamed=name_hints(TRAIN_COMMAND),
        description="Train a tokenizer on a seeded random sample of the corpus.",
    )
    _add_input_args(parser, required=True)
    parser.add_argument("--output", required=True, help="output directory (local or gs://)")
    add_overwrite_flag(parser, help="replace what a non-empty --output holds")
    add_verbose_flag(parser)
    add_lease_flag(parser)
    parser.add_argument(
        "--model", choices=cfg.MODELS, default=cfg.DEFAULT_MODEL, help="tokenizer model"
    )
    parser.add_argument(
        "--vocab_size",
        type=cfg.VOCAB_SIZE,
        default=cfg.DEFAULT_VOCAB_SIZE,
        help="vocabulary size, special tokens included",
    )
    parser.add_argument(
        "--special_tokens",
        choices=sorted(cfg.PRESETS),
        default=None,
        help="special-token preset (default: roberta for unigram/bpe, bert for wordpiece)",
    )
    parser.add_argument(
        "--lowercase", action="store_true", help="wordpiece: lowercase and strip accents"
    )
    parser.add_argument(
        "--max_documents", type=COUNT, default=None, help="cap on sampled documents"
    )
    parser.add_argument(
        "--max_bytes",
        type=MAX_BYTES_TYPE,
        default=None,
        help=f"cap on sampled text in bytes, or with a unit: 500MB (10^6 bytes each), 2GiB (default: {cfg.DEFAULT_MAX_BYTES // 10**6} MB for bpe and "
        "wordpiece, as trainer memory grows many times faster than the text; "
        f"{cfg.DEFAULT_MAX_BYTES_BY_MODEL[cfg.UNIGRAM] // 10**6} MB for unigram, whose training runs on one core)",
    )
    return parser


def inspect_parser() -> CommandParser:
    parser = CommandParser(
        INSPECT_COMMAND,
        description="Show tokens and ids of --text, and with --input the unknown-token rate and tokens per word "
        "(per character for CJK) on a sample.",
    )
    parser.add_argument("tokenizer", help="tokenizer directory or tokenizer.json (local or gs://)")
    parser.add_argument("--text", action="append", default=[], help="text to tokenize (repeatable)")
    _add_input_args(parser, required=False)
    parser.add_argument(
        "--max_documents",
        type=COUNT,
        default=DEFAULT_INSPECT_DOCUMENTS,
        help="documents sampled from --input",
    )
    add_verbose_flag(parser)
    return parser


def train_main(argv: Sequence[str]) -> int:
    args = train_parser().parse_args(list(argv))
    setup_logging(verbose=args.verbose, packages=LOG_PACKAGES)
    with one_line_errors(TRAIN_COMMAND) as failed, stopping.stop_signals():
        config = training_config(args)
        with output_lease(
            config.output,
            command=TRAIN_COMMAND,
            stale_after_s=args.lease_stale_s,
            partial_kind=TOKENIZER_OUTPUT,
        ):
            result = train_and_write(config)
        print_trained(result, config)
        return EXIT_OK
    return failed.code


def inspect_main(argv: Sequence[str]) -> int:
    parser = inspect_parser()
    args = parser.parse_args(list(argv))
    if not args.text and not args.input:
        parser.error("nothing to inspect: pass --text TEXT and/or --input PATH")
    setup_logging(verbose=args.verbose, packages=LOG_PACKAGES)
    with one_line_errors(INSPECT_COMMAND) as failed, stopping.stop_signals():
        _inspect(args)
        return EXIT_OK
    return failed.code


def training_config(args: argparse.Namespace) -> cfg.TokenizerTrainingConfig:
    """The training's config from the command line (checked when it is built)."""
    return cfg.TokenizerTrainingConfig(
        inputs=tuple(args.input),
        output=args.output,
        model=args.model,
        vocab_size=args.vocab_size,
        special_tokens=args.special_tokens,
        lowercase=args.lowercase,
        max_documents=args.max_documents,
        max_bytes=args.max_bytes,
        seed=args.seed,
        doc_separator=args.doc_separator,
        text_field=args.text_field,
        text_column=args.text_column,
        encoding=args.encoding,
        doc_marker=args.doc_marker,
        doc_marker_regex=args.doc_marker_regex,
        html_field=args.html_field,
        url_field=args.url_field,
        html_extract=args.html_extract,
        html_drop_comments=args.html_drop_comments,
        max_html_bytes=args.max_html_bytes,
        overwrite=args.overwrite,
    )


def print_trained(result: TrainResult, config: cfg.TokenizerTrainingConfig) -> None:
    """The command's closing lines on stdout: the sample, the vocabulary, where it was written."""
    s = result.sample
    print(
        f"Sampled {s.documents_sampled:,} of {s.documents_seen:,} documents "
        f"({s.bytes_sampled / 1e6:,.1f} of {s.bytes_seen / 1e6:,.1f} MB; cap {config.byte_cap / 1e6:,.0f} MB)"
    )
    print(
        f"Trained {config.model} ({config.special_tokens} special tokens), vocabulary {result.vocab_size:,}, "
        f"in {format_duration(result.seconds)} ({format_duration(result.sampling_seconds)} of it sampling); "
        f"peak RSS {result.peak_rss_bytes / 2**20:,.0f} MiB"
    )
    print(f"Special token ids: {result.special_token_ids}")
    print(f"Fingerprint: {result.fingerprint}")
    print(f"Wrote {result.output}")
    if result.vocab_size < config.vocab_size:
        log.warning("%s", smaller_vocabulary_message(result.vocab_size, config))


def smaller_vocabulary_message(got: int, config: cfg.TokenizerTrainingConfig) -> str:
    """Why a trained vocabulary can come out smaller than --vocab_size, and what to change."""
    return (
        f"the vocabulary has {got:,} tokens, fewer than --vocab_size {config.vocab_size:,}: the "
        f"sample ({(config.max_bytes or 0) / 1e6:,.0f} MB cap) holds too few distinct pieces for more. "
        "Pass a larger --max_bytes or more input for the size asked, or a --vocab_size near "
        f"{got:,} to say what you get (the model's embedding table follows the tokenizer)."
    )


def _inspect(args: argparse.Namespace) -> None:
    tok, roles = load_tokenizer(args.tokenizer)
    print(
        f"{args.tokenizer}: {type(tok.model).__name__}, vocabulary {tok.get_vocab_size():,}, special {roles}"
    )
    for text in args.text:
        enc = tok.encode(text)
        print(f"\ntext:    {text!r}")
        print(f"tokens:  {enc.tokens}")
        print(f"ids:     {enc.ids}")
        print(f"decoded: {tok.decode(enc.ids)!r}")
    if args.input:
        report = sample_report(
            tok,
            args.input,
            sources.read_options_from(args),
            seed=args.seed,
            max_documents=args.max_documents,
            unk_id=roles.get("unk"),
        )
        print(
            f"\nSample of {report.documents:,} documents: {report.tokens:,} tokens, "
            f"unknown-token rate {report.unknown_rate:.4%} ({report.unknown_tokens:,} unknown), "
            + (
                f"byte-fallback rate {report.byte_fallback_rate:.4%} "
                f"({report.byte_fallback_tokens:,} byte pieces)"
                if byte_fallback_ids(tok.get_vocab(with_added_tokens=True))
                else "byte-fallback rate n/a (no byte pieces in the vocabulary)"
            )
        )
        if report.tokens_per_word is not None:
            print(
                f"  {report.word_documents:,} word-separated documents: "
                f"{report.tokens_per_word:.3f} tokens per word ({report.words:,} words)"
            )
        if report.tokens_per_cjk_char is not None:
            print(
                f"  {report.cjk_documents:,} CJK documents: "
                f"{report.tokens_per_cjk_char:.3f} tokens per character ({report.cjk_chars:,} CJK characters)"
            )
