"""Planning a preprocess run, before any work: the config checked against its tokenizer, inputs and
output, the packing groups sized, and the default runner's one-step job. Beam-free: the default
path (lmshards.preprocess.local) plans without importing Beam; lmshards.preprocess.pipeline wires the
same plan into the staged Beam pipeline.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from lmshards.plumbing.errors import TokenizerError
from lmshards.plumbing.memory import frozen_imports
from lmshards.plumbing.outputs import check_no_overlap, check_replaceable
from lmshards.plumbing.units import MIB
from lmshards.preprocess.in_process import InProcessJob
from lmshards.preprocess.launch import PlannedShardSet, manifest_header
from lmshards.preprocess.options import PreprocessConfig, PreprocessError
from lmshards.preprocess.sources import (
    ReadStats,
    check_not_empty,
    discover_inputs,
    read_options_from,
    skip_binary_files,
)
from lmshards.preprocess.stages.encode import text_sha256
from lmshards.preprocess.stages.pack import REMAINDER_PAD, num_groups
from lmshards.preprocess.stages.read import plan_sized_ranges
from lmshards.preprocess.stages.tokens import TokenStoreManifest, id_dtype_for
from lmshards.schemas.constants import (
    PACKING_BEST_FIT,
    PACKING_CONCAT,
    TRAIN_SPLIT,
    VALIDATION_SPLIT,
)
from lmshards.schemas.layouts import OUTPUT_KINDS, PREPROCESS_OUTPUT
from lmshards.schemas.manifest import (
    TOKENIZER_RELPATH,
    InputFileInfo,
    Manifest,
    TokenizerInfo,
)
from lmshards.schemas.records import feature_names, record_bytes_upper_bound
from lmshards.schemas.tokenizer_info import (
    TokenizerSource,
    all_special_ids,
    fingerprint,
    locate_tokenizer,
    model_max_length,
    special_token_ids,
)
from lmshards.schemas.version import __version__

if TYPE_CHECKING:  # curation's modules load Beam: imported only by a run that curates
    from lmshards.preprocess.curation.stage import CurationSettings


@dataclasses.dataclass(frozen=True)
class PreprocessPlan:
    """A validated config plus everything learned from the inputs and tokenizer while building."""

    config: PreprocessConfig
    files: tuple[InputFileInfo, ...]
    tokenizer_source: TokenizerSource
    tokenizer: TokenizerInfo
    pad_id: int | None
    groups: dict[str, int]  # split -> packing groups
    record_bytes: int  # upper bound of one framed record, for the shard count
    reading: ReadStats  # what finding the inputs counted (files left out inside lmshards outputs)
    curation: CurationSettings | None = None  # --dedup / --decontaminate; None: no curation stage

    def manifest_header(self) -> Manifest:
        """The manifest's fields known before the run; the manifest stage fills in the rest."""
        return manifest_header(
            self.config,
            tokenizer=self.tokenizer,
            inputs=self.files,
            reading=self.reading.recorded(),
        )

    def store_header(self) -> TokenStoreManifest:
        """The token store's manifest as known before the run (preprocess --keep_tokens)."""
        tokenizer = self.tokenizer
        return TokenStoreManifest(
            tool_version=__version__,
            tokenizer=tokenizer,
            id_dtype=id_dtype_for(tokenizer.vocab_size),
            documents=0,
            tokens=0,
            files=(),
            inputs=self.files,
            reading=self.reading.recorded(),
            options=self.config.manifest_options(),
        )


def check_locations(config: PreprocessConfig) -> None:
    """Refuses an --output that overlaps an input or the tokenizer (no I/O).

    Raises:
      OutputError: the overlap, named.
    """
    check_no_overlap(config.inputs, config.output)
    # The tokenizer is copied into the output after --overwrite clears it: it must not live there.
    check_no_overlap([config.tokenizer], config.output, input_flag="--tokenizer")
    if config.decontaminate:
        check_no_overlap(config.decontaminate, config.output, input_flag="--decontaminate")


def plan_preprocess(config: PreprocessConfig) -> PreprocessPlan:
    """Checks the locations, tokenizer, inputs and output and sizes the packing groups.

    Reads nothing but the tokenizer and the input listing, and writes nothing.

    Raises:
      LmshardsError: an output overlapping an input or the tokenizer, a bad tokenizer, seq_len,
        input or output; the message names the value.
    """
    check_locations(config)
    source = locate_tokenizer(config.tokenizer)
    tokenizer = _load_tokenizer(source.json_text, source.json_path)
    max_len = model_max_length(source)
    roles = special_token_ids(source)
    pad_id = roles.get("pad")
    check_packing_options(config, model_max_length=max_len, pad_id=pad_id)
    info = TokenizerInfo(
        fingerprint=fingerprint(source.json_text),
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        special_token_ids=roles,
        all_special_ids=tuple(all_special_ids(source)),
        model_max_length=max_len,
        path=TOKENIZER_RELPATH,
    )
    read_options_from(config)  # checks the reading flags
    discovery = discover_inputs(config.inputs)
    check_not_empty(discovery.files)
    files, binary = (
        skip_binary_files(discovery.files, read_options_from(config))
        if config.skip_binary
        else (list(discovery.files), 0)
    )
    curation = planned_curation(config)  # reads the eval sets, to check them
    check_replaceable(
        config.output, kind=PREPROCESS_OUTPUT, overwrite=config.overwrite, others=OUTPUT_KINDS
    )
    total_bytes = sum(f.bytes for f in files)
    groups = packing_groups(total_bytes, config.validation_fraction, config.packing_group_tokens)
    return PreprocessPlan(
        config=config,
        files=tuple(files),
        tokenizer_source=source,
        tokenizer=info,
        pad_id=pad_id,
        groups=groups,
        record_bytes=record_bytes_for(config, info.vocab_size),
        reading=ReadStats(**discovery.counts(), files_skipped_binary=binary),
        curation=curation,
    )


def planned_curation(config: PreprocessConfig) -> CurationSettings | None:
    """The curation stage's settings; None when the run selects no curation step (its modules, which
    load Beam, are then never imported)."""
    if not config.curation_steps:
        return None
    with frozen_imports():  # Beam's modules with them: the collector off while they load
        from lmshards.preprocess.curation_plan import plan_curation

    return plan_curation(
        config,
        batch_size=config.documents_per_tokenizer_call,
        range_bytes=int(config.range_mb * MIB),
    )


def record_bytes_for(config: PreprocessConfig, vocab_size: int) -> int:
    """The upper bound of one framed record of this run's features."""
    names = feature_names(config.packing != PACKING_CONCAT)
    return record_bytes_upper_bound(config.seq_len, vocab_size, names)


def check_packing_options(
    config: PreprocessConfig, *, model_max_length: int | None, pad_id: int | None
) -> None:
    """Raises PreprocessError when seq_len exceeds the tokenizer's model_max_length, or --remainder pad
    or --packing best_fit is asked of a tokenizer without a pad token."""
    if model_max_length is not None and config.seq_len > model_max_length:
        raise PreprocessError(
            f"--seq_len {config.seq_len} exceeds the tokenizer's model_max_length {model_max_length} "
            f"({config.tokenizer!r}); use --seq_len {model_max_length} or less."
        )
    if config.packing == PACKING_BEST_FIT and pad_id is None:
        raise PreprocessError(
            f"--packing best_fit pads blocks with the pad token, and tokenizer {config.tokenizer!r} has "
            "none; use --packing concat or add a pad token."
        )
    if config.remainder == REMAINDER_PAD and pad_id is None:
        raise PreprocessError(
            f"--remainder pad needs a pad token, and tokenizer {config.tokenizer!r} has none; "
            "use --remainder drop or add a pad token."
        )


def _load_tokenizer(json_text: str, path: str):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(json_text)
    except Exception as e:  # the Rust side raises a bare Exception for any malformed tokenizer
        raise TokenizerError(
            f"Tokenizer file {path!r} cannot be loaded by `tokenizers`: {e}. Re-save it with "
            "`tokenizer.save(PATH)` (tokenizers) or `save_pretrained(DIR)` (transformers), or retrain it."
        ) from e


def in_process_job(plan: PreprocessPlan) -> InProcessJob:
    config = plan.config
    files, ranges = plan_sized_ranges(
        list(plan.files), read_options_from(config), range_bytes=int(config.range_mb * MIB)
    )  # checks every input file, as the reader does
    return InProcessJob(
        config=config,
        ranges=tuple(ranges),
        read_options=read_options_from(config),
        total_bytes=sum(f.bytes for f in files),
        tokenizer_path=plan.tokenizer_source.json_path,
        tokenizer_sha256=text_sha256(plan.tokenizer_source.json_text),
        vocab_size=plan.tokenizer.vocab_size,
        groups=plan.groups,
        pad_id=plan.pad_id,
        record_bytes=plan.record_bytes,
        header=plan.manifest_header(),
        store_header=plan.store_header() if config.keep_tokens else None,
        curation=plan.curation,
    )


def packing_groups(
    total_bytes: int, validation_fraction: float, group_tokens: int
) -> dict[str, int]:
    """split -> packing groups, sized from the input's bytes (known before tokenizing)."""
    return {
        TRAIN_SPLIT: num_groups(total_bytes, 1.0 - validation_fraction, group_tokens),
        VALIDATION_SPLIT: num_groups(total_bytes, validation_fraction, group_tokens),
    }


def worker_paths(config: PreprocessConfig) -> dict[str, tuple[str, ...]]:
    """Every path flag the workers read or write -> its paths."""
    return {
        "--input": config.inputs,
        "--output": (config.output,),
        "--tokenizer": (config.tokenizer,),
        "--decontaminate": config.decontaminate,
    }


def shard_set(plan: PreprocessPlan) -> PlannedShardSet:
    """The plan as the launcher runs it."""
    return PlannedShardSet(
        config=plan.config, tokenizer=plan.tokenizer_source, header=plan.manifest_header()
    )
