"""The shard sets a run reads: one, or several blended by weight; their files per input pipeline, passes and epochs.

Without TensorFlow, so the command line checks the sets before the training stack loads; lmshards.train.inputs.data
builds the tf.data pipeline from what this module plans.

- `--shards PATH[:WEIGHT]` repeats (lmshards.train.inputs.shards_flag says how a value reads); weights default to equal. Every set must
  come from the same tokenizer and seq_len. A set is named by its directory's basename, made unique
  with a `-2`, `-3`... suffix; metrics use the name (`eval_loss/<name>`, `sequences/<name>`).
- Sampling: each input pipeline draws its examples in blocks of MIXTURE_BLOCK, each block holding
  exactly block_counts()[i] examples of set i (weight x block, largest remainders first), each set's
  spread evenly over the block at random points drawn statelessly from (seed, pipeline, block)
  (lmshards.train.inputs.data.mixture_choices). The realised shares equal the weights to 1/MIXTURE_BLOCK at every block
  boundary and stay within about one example per set of them in between; how far a run has read into
  each set is a closed-form function of the step, so a resumed run reads exactly what an uninterrupted one would.
- A pass over a set gives every input pipeline the same number of that set's records: the smallest
  pipeline's share, rounded down to whole global batches. Each pass reshuffles. A set that runs out
  (a small set with a large weight) starts another pass; its repeats are counted and reported.
- An epoch is defined over the mixture: one epoch draws as many sequences as one pass over every set
  holds together, each set contributing by its weight (`--epochs E` draws E times that). With one set
  an epoch is one pass over it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import posixpath
from collections.abc import Sequence

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.manifest import (
    Manifest,
    check_packed_positions,
    check_tokenizer_copy,
    read_manifest,
)
from lmshards.train.inputs.shards_flag import ShardSource, parse_shards_flag, source_weights

__all__ = [
    "ShardSource",
    "parse_shards_flag",
    "source_weights",
]  # the --shards parse, for callers here

log = logging.getLogger(__name__)

# Examples per sampling block: the shares are exact to 1/MIXTURE_BLOCK at every block boundary.
MIXTURE_BLOCK = 1000


# ---------------------------------------------------------------- one split's files


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """A split's shard paths (manifest order) and their record counts."""

    paths: tuple[str, ...]
    records: tuple[int, ...]

    @property
    def total_records(self) -> int:
        return sum(self.records)


def split_files(manifest: Manifest, shards_dir: str, split: str) -> SplitFiles:
    return SplitFiles(
        paths=tuple(manifest.shard_paths(shards_dir, split)),
        records=tuple(s.records for s in manifest.split(split).shards),
    )


def check_shard_sizes(manifest: Manifest, shards_dir: str, split: str) -> None:
    """Raises LmshardsError naming the first shard that is missing or whose size differs from the manifest.

    A shard truncated at a record boundary reads without error, so sizes are checked up front.
    """
    check_tensorflow_reaches(shards_dir)
    for shard, path in zip(manifest.split(split).shards, manifest.shard_paths(shards_dir, split)):
        if not fs.exists(path):
            raise LmshardsError(
                f"Shard {path!r} listed in the manifest is missing; re-run `lmshards preprocess`."
            )
        actual = bounded.check_regular_file(path, "shard file")  # a FIFO or a device never reads
        if actual != shard.bytes:
            raise LmshardsError(
                f"Shard {path!r} is {actual} bytes but the manifest says {shard.bytes}: truncated or replaced. "
                "Re-run `lmshards preprocess` (or `lmshards inspect --verify` to check every shard)."
            )


def check_tensorflow_reaches(shards_dir: str) -> None:
    """Refuses gs:// shards under STORAGE_EMULATOR_HOST: tf.data reads gs:// with TensorFlow's own GCS
    client, which goes to storage.googleapis.com whatever that variable says, and fails mid-run.

    Raises:
      LmshardsError: naming the shard set and what to do instead.
    """
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator and fs.is_remote(shards_dir):
        raise LmshardsError(
            f"--shards {shards_dir!r}: training reads gs:// shards with TensorFlow's own GCS client, which "
            f"ignores STORAGE_EMULATOR_HOST={emulator} and would read storage.googleapis.com; copy the "
            f"shard set to a local directory (`gcloud storage cp -r {shards_dir} DIR`) and pass --shards DIR, "
            "or unset STORAGE_EMULATOR_HOST to train from GCS."
        )


def pipeline_files(files: SplitFiles, *, num_pipelines: int, pipeline_id: int) -> SplitFiles:
    """The files input pipeline `pipeline_id` of `num_pipelines` reads (every num_pipelines-th file).

    Raises:
      LmshardsError: the files do not divide evenly, so pipelines would see unequal data.
    """
    if len(files.paths) % num_pipelines:
        raise LmshardsError(
            f"{len(files.paths)} shard files do not divide evenly between {num_pipelines} input pipelines "
            f"(one per worker host). Re-run `lmshards preprocess` with a shard count that is a multiple of {num_pipelines}."
        )
    return SplitFiles(
        paths=files.paths[pipeline_id::num_pipelines],
        records=files.records[pipeline_id::num_pipelines],
    )


# ---------------------------------------------------------------- the mixture


@dataclasses.dataclass(frozen=True)
class ShardSet:
    """One shard set of a run. weight: its share of the train sequences (a mixture's weights sum to 1)."""

    name: str
    path: str
    weight: float
    manifest: Manifest

    def files(self, split: str) -> SplitFiles:
        return split_files(self.manifest, self.path, split)

    @property
    def has_validation(self) -> bool:
        return (
            VALIDATION_SPLIT in self.manifest.splits
            and self.manifest.splits[VALIDATION_SPLIT].records > 0
        )


@dataclasses.dataclass(frozen=True)
class Mixture:
    """The shard sets of a run, in --shards order."""

    sets: tuple[ShardSet, ...]

    @property
    def manifest(self) -> Manifest:
        """The first set's manifest; tokenizer and seq_len are the same in every set."""
        return self.sets[0].manifest

    def block_counts(self) -> tuple[int, ...]:
        """Examples of each set in every MIXTURE_BLOCK examples: weight x block, largest remainders first."""
        exact = [s.weight * MIXTURE_BLOCK for s in self.sets]
        counts = [math.floor(x) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
        for i in by_remainder[: MIXTURE_BLOCK - sum(counts)]:
            counts[i] += 1
        return tuple(counts)


def set_names(paths: Sequence[str]) -> tuple[str, ...]:
    """Each directory's basename, with `-2`, `-3`... appended to repeats: `a/shards`, `b/shards` -> shards, shards-2."""
    names: list[str] = []
    for path in paths:
        base = posixpath.basename(path.rstrip("/")) or path
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return tuple(names)


def open_mixture(paths: Sequence[str], weights: Sequence[float] = ()) -> Mixture:
    """Reads every set's manifest and checks that the sets can be blended. weights: as given; none means equal.

    Raises:
      LmshardsError: a manifest is missing or bad (shards listed twice, totals that disagree with the
        shards, a tokenizer/ copy that is not the manifest's, a packed set of the old positions); two sets differ in tokenizer or seq_len; a weight
        is so small that the set would never be drawn.
    """
    weights = tuple(weights) or (1.0,) * len(paths)
    if not paths or len(weights) != len(paths):
        raise LmshardsError(
            f"Pass one weight per shard set: {len(paths)} sets, {len(weights)} weights."
        )
    total = sum(weights)
    sets = tuple(
        ShardSet(name=name, path=path, weight=weight / total, manifest=read_manifest(path))
        for name, path, weight in zip(set_names(paths), paths, weights)
    )
    for s in sets:  # a set whose tokenizer/ was replaced would train and export under the wrong ids
        check_tokenizer_copy(s.manifest, s.path)
        # A packed set whose pieces' positions run past seq_len would index past the position table.
        check_packed_positions(s.manifest, s.path)
    first = sets[0]
    for other in sets[1:]:
        for what, a, b in (
            (
                "tokenizer fingerprint",
                first.manifest.tokenizer.fingerprint,
                other.manifest.tokenizer.fingerprint,
            ),
            ("seq_len", first.manifest.seq_len, other.manifest.seq_len),
        ):
            if a != b:
                raise LmshardsError(
                    f"--shards {first.path!r} and --shards {other.path!r} differ in {what} ({a} vs {b}); the sets "
                    "of a mixture must be made with the same tokenizer and --seq_len. Re-run `lmshards preprocess` "
                    "on one of them."
                )
        check_same_packing(first, other)
    mixture = Mixture(sets)
    for s, count in zip(sets, mixture.block_counts()):
        if count == 0:
            raise LmshardsError(
                f"--shards {s.path!r} has weight {s.weight:.6f} of the total, too small to be drawn "
                f"(the least is 1/{MIXTURE_BLOCK}); raise its weight or leave the set out."
            )
    return mixture


def check_same_packing(first: ShardSet, other: ShardSet) -> None:
    """Raises LmshardsError when one set is packed and the other concatenated.

    One batch feeds one model: a packed set's blocks need the packed backbone (attention within each
    segment), and a concatenated set's records have no segments to give it.
    """
    if first.manifest.packed != other.manifest.packed:
        packed, concat = (first, other) if first.manifest.packed else (other, first)
        raise LmshardsError(
            f"--shards {packed.path!r} is packed (--packing {packed.manifest.packing}) and --shards "
            f"{concat.path!r} is not; a mixture's sets must be packed alike. Repack one of them with "
            f"`lmshards repack --packing ...` (from its token store) or re-run `lmshards preprocess`."
        )


# ---------------------------------------------------------------- passes and epochs


@dataclasses.dataclass(frozen=True)
class SetStream:
    """One set's part of one input pipeline: its files and the records one pass over it reads there."""

    files: SplitFiles
    pass_records: int


def pass_records(mixture: Mixture, *, num_pipelines: int, unit: int) -> tuple[int, ...]:
    """Records of each set that one pass gives every input pipeline (a multiple of `unit`).

    unit: sequences per global step per input pipeline (per-replica batch x replicas it feeds).

    Raises:
      LmshardsError: a set's files do not divide between the pipelines, or it holds less than one global batch.
    """
    passes = []
    for s in mixture.sets:
        files = s.files(TRAIN_SPLIT)
        smallest = min(
            pipeline_files(files, num_pipelines=num_pipelines, pipeline_id=i).total_records
            for i in range(num_pipelines)
        )
        if smallest < unit:
            raise LmshardsError(
                f"The train split of {s.path!r} ({files.total_records} records) is smaller than one global batch "
                f"({unit * num_pipelines} sequences: {unit} for each of {num_pipelines} input pipelines); "
                "lower --per_replica_batch."
            )
        passes.append(smallest // unit * unit)
    return tuple(passes)


def steps_per_epoch(passes: Sequence[int], *, unit: int) -> int:
    """Global steps of one epoch over the mixture: one pass over every set's records, drawn by weight."""
    return sum(passes) // unit


def pipeline_streams(
    mixture: Mixture, passes: Sequence[int], *, num_pipelines: int, pipeline_id: int
) -> tuple[SetStream, ...]:
    """What input pipeline `pipeline_id` reads of each set."""
    return tuple(
        SetStream(
            pipeline_files(
                s.files(TRAIN_SPLIT), num_pipelines=num_pipelines, pipeline_id=pipeline_id
            ),
            n,
        )
        for s, n in zip(mixture.sets, passes)
    )


@dataclasses.dataclass(frozen=True)
class SetProgress:
    """How much of a set a run has read.

    passes: sequences read over one pass's records (all pipelines); repeats: passes begun after the first.
    """

    sequences: int
    passes: float
    repeats: int


def set_progress(
    sequences: Sequence[int], passes: Sequence[int], *, num_pipelines: int
) -> tuple[SetProgress, ...]:
    """Progress per set from the sequences read of each (all pipelines together) and its pass_records."""
    progress = []
    for read, per_pipeline in zip(sequences, passes):
        done = read / (per_pipeline * num_pipelines)
        progress.append(
            SetProgress(sequences=int(read), passes=done, repeats=max(0, math.ceil(done) - 1))
        )
    return tuple(progress)
