"""The input plan of a run: which sequences each input pipeline reads, masked how, in which batches.

One object owns the mixture's train and eval inputs, so the trainer, every backend, `lmshards preview`
and the input benchmark build them the same way, and none of them rewires the recipe by hand. The
host pipeline is tf.data (lmshards.train.inputs.data); a backend that does not take tf.data datasets reads the same
batches as numpy (numpy_batches).

Batches are per replica: input pipeline p of num_pipelines yields, step after step, one batch for
each of the replicas it feeds (replicas_per_pipeline), in replica order. Everything about position is
a closed-form function of the global step: where each pipeline starts, how many sequences each set
gave, and the epoch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from lmshards.plumbing.errors import LmshardsError
from lmshards.schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.manifest import manifest_path
from lmshards.schemas.tokenizer_info import TokenizerSource
from lmshards.train.config import TrainConfig
from lmshards.train.families import get_family
from lmshards.train.inputs import data, mixture
from lmshards.train.inputs.masking import MaskingSpec
from lmshards.train.inputs.mixture import Mixture, SetProgress, ShardSet

# run_config.json's "resolved" key for the input pipelines (hosts) that read the run's data.
INPUT_PIPELINES_KEY = "input_pipelines"
# TensorFlow's file system errors end with the object: "...\n\t when reading gs://b/x.tfrecord".
_REMOTE_READ_RE = re.compile(r"\s*when reading ((?:gs|gcs)://\S+)")


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """A run's inputs for `replicas` replicas fed by `num_pipelines` input pipelines (one per host).

    pass_records: per set, its records in one pass, per input pipeline (lmshards.train.inputs.mixture.pass_records).

    Two shard sets blended 3:1, on 4 replicas fed by 2 hosts (the manifests only; no file is read):

    >>> from lmshards.schemas.manifest import Manifest, ShardInfo, SplitInfo, SplitTotals, TokenizerInfo
    >>> from lmshards.train.inputs.mixture import Mixture, ShardSet
    >>> tokenizer = TokenizerInfo("sha256:0", 1000, {"pad": 1, "mask": 4}, (0, 1, 2, 3, 4))
    >>> def shard_set(name, records, weight):
    ...     shards = tuple(ShardInfo(f"train-{i}.tfrecord", n, 0, "") for i, n in enumerate(records))
    ...     splits = {"train": SplitInfo(shards, SplitTotals(records=sum(records)))}
    ...     manifest = Manifest("0.1.0", 128, tokenizer, splits, (), 0, {})
    ...     return ShardSet(name, f"/data/{name}", weight, manifest)
    >>> mix = Mixture((shard_set("web", [640, 640], 0.75), shard_set("books", [160, 160], 0.25)))
    >>> masking = masking_for(mix, recipe="token", mlm_probability=0.15, tokenizer=None)
    >>> plan = InputPlan.create(
    ...     mix, masking=masking, per_replica_batch=8, seed=0, shuffle_buffer=64, replicas=4, num_pipelines=2
    ... )
    >>> plan.global_batch, plan.pass_records, plan.steps_per_epoch
    (32, (640, 160), 50)
    >>> plan.sequences_read(10), plan.epoch(10)  # closed-form functions of the global step
    ((240, 80), 0.2)
    """

    mixture: Mixture
    masking: MaskingSpec
    per_replica_batch: int
    replicas: int
    num_pipelines: int
    seed: int
    shuffle_buffer: int
    with_segment_ids: bool
    pass_records: tuple[int, ...]

    @classmethod
    def create(
        cls,
        mix: Mixture,
        *,
        masking: MaskingSpec,
        per_replica_batch: int,
        seed: int,
        shuffle_buffer: int,
        with_segment_ids: bool = False,
        replicas: int = 1,
        num_pipelines: int = 1,
    ) -> InputPlan:
        """Raises LmshardsError: a set's files do not divide between the pipelines, or it holds less than a global batch."""
        unit = per_replica_batch * (replicas // num_pipelines)
        passes = mixture.pass_records(mix, num_pipelines=num_pipelines, unit=unit)
        return cls(
            mix,
            masking,
            per_replica_batch,
            replicas,
            num_pipelines,
            seed,
            shuffle_buffer,
            with_segment_ids,
            passes,
        )

    @classmethod
    def for_run(
        cls,
        config: TrainConfig,
        mix: Mixture,
        *,
        masking: MaskingSpec,
        family: str,
        replicas: int,
        num_pipelines: int,
    ) -> InputPlan:
        """The plan of `lmshards train` with these options on `replicas` replicas."""
        return cls.create(
            mix,
            masking=masking,
            per_replica_batch=config.per_replica_batch,
            seed=config.seed,
            shuffle_buffer=config.shuffle_buffer,
            with_segment_ids=get_family(family).uses_segment_ids,
            replicas=replicas,
            num_pipelines=num_pipelines,
        )

    # ------------------------------------------------------------ sizes

    @property
    def replicas_per_pipeline(self) -> int:
        return self.replicas // self.num_pipelines

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step, all replicas together."""
        return self.per_replica_batch * self.replicas

    @property
    def steps_per_epoch(self) -> int:
        """Global steps of one epoch over the mixture: one pass over every set's records, drawn by weight."""
        return mixture.steps_per_epoch(
            self.pass_records, unit=self.per_replica_batch * self.replicas_per_pipeline
        )

    def total_steps(self, *, steps: int | None, epochs: float | None) -> int:
        """--steps, or --epochs in steps. Raises LmshardsError for neither."""
        if steps is not None:
            return steps
        if epochs is not None:
            return math.ceil(epochs * self.steps_per_epoch)
        raise LmshardsError("Pass --steps N or --epochs E.")

    # ------------------------------------------------------------ resuming on another topology

    def check_resume(self, resolved: Mapping[str, Any] | None) -> None:
        """Refuses to continue a run (resolved: its run_config.json "resolved") on inputs that would not.

        A step's sequences and masks depend on the global step and the global batch, and on the input
        pipelines (hosts) that share the files, never on the replicas: any number of devices per host
        continues a run exactly, as long as the global batch and the hosts stay the same.
        Raises:
          LmshardsError: the global batch or the number of input pipelines differs from the run's.
        """
        if not resolved:
            return
        before = resolved.get("global_batch")
        if before is not None and before != self.global_batch:
            if before % self.replicas == 0:
                fix = (
                    f"Pass --per_replica_batch {before // self.replicas} to keep the run's global batch of {before} "
                    f"on these {self.replicas} replicas"
                )
            else:
                fix = (
                    f"The run's global batch of {before} does not divide over these {self.replicas} replicas: resume it "
                    f"on a number of devices that divides {before}"
                )
            raise LmshardsError(
                f"This run trained with a global batch of {before} sequences and this command's is {self.global_batch} "
                f"(--per_replica_batch {self.per_replica_batch} x {self.replicas} replicas): its data position, masks "
                f"and steps would not continue the run's. {fix}, or start a new run (--restart or another --output)."
            )
        pipelines = resolved.get(INPUT_PIPELINES_KEY)
        if pipelines is not None and pipelines != self.num_pipelines:
            raise LmshardsError(
                f"This run read its data with {pipelines} input pipelines (one per host, each reading its share of "
                f"the shard files) and this command has {self.num_pipelines}: the run's data order does not continue "
                f"on another number of hosts. Resume it on {pipelines} hosts (the devices per host may differ), or "
                "start a new run (--restart or another --output)."
            )

    def resolved(self) -> dict[str, int]:
        """What run_config.json's "resolved" records of the inputs, for check_resume of a later command."""
        return {
            "global_batch": self.global_batch,
            INPUT_PIPELINES_KEY: self.num_pipelines,
            "steps_per_epoch": self.steps_per_epoch,
        }

    # ------------------------------------------------------------ train input

    def train_dataset(self, *, pipeline_id: int, start_step: int) -> tf.data.Dataset:
        """Endless per-replica batches of input pipeline `pipeline_id`, from the batches of global step start_step."""
        streams = mixture.pipeline_streams(
            self.mixture,
            self.pass_records,
            num_pipelines=self.num_pipelines,
            pipeline_id=pipeline_id,
        )
        return data.train_dataset(
            streams,
            block_counts=self.mixture.block_counts(),
            features=self.mixture.manifest.features(),
            batch_size=self.per_replica_batch,
            shuffle_buffer=self.shuffle_buffer,
            seed=self.seed,
            start_step=start_step,
            masking=self.masking,
            with_segment_ids=self.with_segment_ids,
            pipeline_id=pipeline_id,
            replicas=self.replicas_per_pipeline,
        )

    def drawn_sets(self, count: int, *, pipeline_id: int = 0) -> list[str]:
        """Names of the sets the first `count` sequences of a pipeline come from."""
        if len(self.mixture.sets) == 1:
            return [self.mixture.sets[0].name] * count
        choices = data.mixture_choices(
            self.mixture.block_counts(), seed=self.seed, pipeline_id=pipeline_id, start_example=0
        )
        return [self.mixture.sets[i].name for i in choices.take(count).as_numpy_iterator()]

    @property
    def train_paths(self) -> tuple[str, ...]:
        return tuple(p for s in self.mixture.sets for p in s.files(TRAIN_SPLIT).paths)

    # ------------------------------------------------------------ position

    def sequences_read(self, step: int) -> tuple[int, ...]:
        """Sequences each set has given all pipelines together by global step `step`."""
        return data.sequences_read(
            self.mixture.block_counts(),
            seed=self.seed,
            num_pipelines=self.num_pipelines,
            examples_per_pipeline=step * self.replicas_per_pipeline * self.per_replica_batch,
        )

    def set_progress(self, step: int) -> tuple[SetProgress, ...]:
        return mixture.set_progress(
            self.sequences_read(step), self.pass_records, num_pipelines=self.num_pipelines
        )

    def epoch(self, step: int) -> float:
        """Epochs over the mixture trained by global step `step` (1.0 = one pass over every set, by weight)."""
        return step / self.steps_per_epoch

    # ------------------------------------------------------------ eval input

    @property
    def eval_sets(self) -> tuple[ShardSet, ...]:
        """The sets that have a validation split, in --shards order."""
        return tuple(s for s in self.mixture.sets if s.has_validation)

    def eval_dataset(
        self, shard_set: ShardSet, *, pipeline_id: int, limit: int | None
    ) -> tf.data.Dataset:
        """Per-replica batches of a set's validation split for one pipeline: its share of the first `limit`
        global batches (None: all), padded to whole global batches, masked the same way every time."""
        files = mixture.pipeline_files(
            shard_set.files(VALIDATION_SPLIT),
            num_pipelines=self.num_pipelines,
            pipeline_id=pipeline_id,
        )
        return data.eval_dataset(
            files,
            features=self.mixture.manifest.features(),
            batch_size=self.per_replica_batch,
            masking=self.masking,
            with_segment_ids=self.with_segment_ids,
            max_batches=limit or None,
            replicas=self.replicas_per_pipeline,
        )

    def eval_batches(self, shard_set: ShardSet, limit: int | None) -> int:
        """Global batches eval_dataset gives for the set: its first `limit` (None: all), padding included."""
        files = mixture.pipeline_files(
            shard_set.files(VALIDATION_SPLIT), num_pipelines=self.num_pipelines, pipeline_id=0
        )
        return data.eval_batch_count(
            files.total_records,
            batch_size=self.per_replica_batch,
            max_batches=limit or None,
            replicas=self.replicas_per_pipeline,
        )

    # ------------------------------------------------------------ for every backend

    def numpy_batches(self, dataset: tf.data.Dataset) -> Iterator[dict[str, np.ndarray]]:
        """A pipeline's per-replica batches as numpy host batches: each the replicas_per_pipeline
        consecutive batches of one step joined in replica order ({name: [rpp * per_replica_batch, ...]})."""
        rpp = self.replicas_per_pipeline
        joined = dataset.batch(rpp, drop_remainder=True).map(
            lambda b: {name: tf.reshape(t, [-1, *t.shape[2:]]) for name, t in b.items()}
        )
        return joined.as_numpy_iterator()

    @contextlib.contextmanager
    def readable_errors(self, paths: Sequence[str]) -> Iterator[None]:
        """Turns the input pipeline's failures into LmshardsError: a corrupt shard (found among paths and
        named), a token id the manifests' vocabulary does not have, or a gs:// shard TensorFlow cannot read."""
        try:
            yield
        except tf.errors.DataLossError as e:
            raise data.corrupt_shard_error(tuple(paths), e) from e
        except tf.errors.InvalidArgumentError as e:
            if data.ID_OUT_OF_VOCABULARY not in (e.message or ""):
                raise
            vocab = self.mixture.manifest.tokenizer.vocab_size
            manifests = ", ".join(repr(manifest_path(s.path)) for s in self.mixture.sets)
            raise LmshardsError(
                f"The shards hold token ids of {vocab} or more, but {manifests} says the tokenizer has vocab_size "
                f"{vocab}: the manifest does not describe these shards. Re-run `lmshards preprocess` "
                "(`lmshards inspect --verify` checks the ids against the manifest)."
            ) from e
        except tf.errors.OpError as e:
            problem = remote_read_problem(e.message or "")
            if problem is None:
                raise
            raise LmshardsError(problem) from e


def remote_read_problem(message: str) -> str | None:
    """One line for TensorFlow's error reading a gs:// shard (its message ends `when reading gs://...`);
    None for any other error."""
    match = _REMOTE_READ_RE.search(message)
    if match is None:
        return None
    cause = " ".join(message[: match.start()].split())[:300]
    return (
        f"Cannot read {match[1]} ({cause}). Training reads gs:// shards with TensorFlow's GCS client: check "
        "the network and your credentials (`gcloud auth application-default login`), or copy the shard set "
        "to a local directory and pass that to --shards."
    )


def run_masking(
    config: TrainConfig, mix: Mixture, tokenizer: TokenizerSource | None
) -> MaskingSpec:
    """The masking spec of `lmshards train`'s --masking and --mlm_probability."""
    return masking_for(
        mix, recipe=config.masking, mlm_probability=config.mlm_probability, tokenizer=tokenizer
    )


def masking_for(
    mix: Mixture, *, recipe: str, mlm_probability: float, tokenizer: TokenizerSource | None
) -> MaskingSpec:
    """The masking spec of a recipe for the mixture's tokenizer (lmshards.train.inputs.data.masking_spec)."""
    return data.masking_spec(
        mix.manifest, recipe=recipe, mlm_probability=mlm_probability, tokenizer=tokenizer
    )
