"""Beam's DaskRunner with the gaps that change lmshards' output or cost closed.

`--runner DaskRunner` runs on this subclass: lmshards.preprocess.runners maps the short name and Beam's own
class path to it. Beam 2.77's DaskRunner turns every primitive transform into a Dask bag step and
runs each ParDo bundle (one bag partition) with a DoFnInvoker. Changed here:

- ParDo outputs: Beam collects them in one list that belongs to the task graph and is never
  emptied, so a bundle also returns what earlier bundles in the same worker process emitted (the
  shard stage's layout saw each packing group several times); and it takes that list before
  finish_bundle runs, so what finish_bundle emits is lost. Here every bundle gets its own receivers
  and invoker, and returns what finish_bundle emitted too. Each worker thread sets up its own copy
  of a DoFn once and reuses it, as Beam's workers do (Beam's DaskRunner sets the DoFn up again for
  every bundle, and shares one instance between a worker's threads).
- Side inputs: Beam hands a ParDo its side input as a bag computed inside every task that reads it,
  so the side input's whole upstream runs again in each such task (and the pipeline's final step,
  the manifest, ran the whole pipeline that way). Here a side input is a dependency in the graph,
  computed once, and every leaf of the pipeline is computed, not only the last one visited.
- Combines: Beam's DaskRunner groups every input value of a CombinePerKey (and so of a
  CombineGlobally, Count, Distinct, ToList) before combining, so curation's count of each document
  gathered one value per document in one task. Here each bundle combines its own values first
  (Beam's LiftedCombinePerKey, as Beam's DirectRunner does) and only those partial results are grouped.
- Windows: Beam's DaskRunner wraps a ParDo's input in its window with a map of its own, a task per
  reader that holds a copy of the partition until its reader has run; here the bundle's task wraps
  each element as it goes.
- Create: Beam puts up to 128 elements in one partition, so every read range would be read by one
  task; here each element is its own partition unless --dask_npartitions or --dask_partition_size
  says otherwise.
- GroupByKey: Beam's DaskRunner groups through Dask's task shuffle, which holds every shuffled element
  in the workers' memory until its group is consumed, so a worker's peak grew with the corpus. Here a
  GroupByKey goes through files (lmshards.preprocess.dask_shuffle) under --dask_shuffle_dir, or a
  temporary directory when every worker can read this machine's (a local cluster); --dask_shuffle tasks
  keeps Dask's own. A ParDo reading a GroupByKey groups its partition inside its own bundle's task (a
  reduce task of its own left its groups in the worker until the reader ran), and a group's values
  written apart are read only as the reader iterates them.
- Task specs: Beam puts the pickled DoFn in every bundle's task, so a worker held a copy per task
  queued on it (22 MB at 64 MB of text); here a worker plugin gives every worker the job's DoFns once
  and a bundle's task names its DoFn by key.
- Order: a step's tasks carry its place in the pipeline as their priority, later steps first, so a
  worker runs whatever consumes data it already holds before it reads more (Dask's own order let a
  worker judge range after range while the removals waited for their reader: memory grew with the
  corpus). A task's name is its (last) step's label (on the dashboard, in the scheduler's logs).
- Fusion: Beam's DaskRunner makes a task per step and partition (1,103 tasks for a plain preprocess of
  the benchmark corpus), each one scheduled, sent and its result held by a worker until its reader ran.
  Here a step whose output has exactly one reader runs inside that reader's tasks (as Beam's runners
  fuse such chains: read -> encode -> route -> the shuffle's write is one task per read range), and a
  side input's or shuffle's values are gathered by one task, not Dask's reduction tree: 392 tasks, the
  same outputs. Dask's own fusion is not used: it drops the steps' priorities.
- The cluster: without --dask_client_address or --dask_scheduler_file, a local cluster of one
  single-threaded worker process per core, listening on 127.0.0.1 only (Beam's bare `Client()`
  serves its dashboard on every interface), without the workers' statistical profiler (its history
  grows with the time worked), its servers checking their event loops once a second (dask's 20 ms
  cost an idle cluster of two an eighth of a core), its workers forked from a server that imported
  Beam, dask and the stages once (each spawned worker imported them again). The workers' `preprocess`
  log records (progress lines) reach this process, and the client (with a local cluster, the cluster
  too) is closed when the job ends.

A ParDo with tagged outputs is refused while the graph is built: Beam's DaskRunner would deliver
them into the main output.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import multiprocessing
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import dask
import dask.bag as db
import dask.distributed as ddist
from apache_beam import coders, pvalue
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor, PTransformOverride
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler
from apache_beam.runners.dask import dask_runner, transform_evaluator
from apache_beam.runners.dask.overrides import _Create, dask_overrides
from apache_beam.transforms.combiners import LiftedCombinePerKey
from apache_beam.transforms.core import CombinePerKey, DoFn, ParDo
from apache_beam.transforms.sideinputs import SideInputMap
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.utils import get_mp_context

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.preprocess import dask_shuffle

LOCALHOST = "127.0.0.1"
# The logger whose worker-side records (our progress lines) reach the launcher.
FORWARDED_LOGGER = "preprocess"
DEFAULT_ELEMENTS_PER_PARTITION = 1
# How a GroupByKey moves data: through files (dask_shuffle), or Dask's task shuffle (between workers'
# memories, through the scheduler's tasks).
FILE_SHUFFLE, TASK_SHUFFLE = "files", "tasks"
SHUFFLES = (FILE_SHUFFLE, TASK_SHUFFLE)
# A job's shuffle files go in a new directory of this prefix (under --dask_shuffle_dir, or the temp dir).
SHUFFLE_DIR_PREFIX = "lmshards-dask-shuffle-"
# Set-up DoFns a worker process keeps (per thread and DoFn); more than one job's worth.
SET_UP_FNS_PER_PROCESS = 64
# Dask's setting for the workers' statistical profiler (off on the clusters lmshards starts).
WORKER_PROFILER = "distributed.worker.profile.enabled"
# Dask's setting for how often every server of a cluster (scheduler, nannies, workers) checks that its event
# loop is responsive, and the interval lmshards' local cluster uses: dask's 20 ms cost an idle local cluster
# of two workers 0.13 CPU s every second, 1 s costs 0.05 (docs/benchmarks.md); a loop blocked past
# distributed.admin.tick.limit (3 s) is still reported.
EVENT_LOOP_TICK, LOCAL_TICK_INTERVAL = "distributed.admin.tick.interval", "1s"
# Dask's setting for how a nanny starts its worker process, and the method lmshards' local cluster uses.
START_METHOD, FORKSERVER = "distributed.worker.multiprocessing-method", "forkserver"
# What the local cluster's fork server imports once for every worker: dask's worker, Beam, the stages
# (frozen out of the garbage collector's reach there: see the module).
WORKER_PRELOAD = ("lmshards.preprocess.dask_preload",)


# ---------------------------------------------------------------- ParDo: fresh receivers per bundle


@dataclasses.dataclass(frozen=True)
class _SideInputView:
    """How a bundle turns a side input's computed values back into what the DoFn receives."""

    view_class: type
    view_options: dict
    window_fn: Any


@dataclasses.dataclass(frozen=True)
class _BundleSpec:
    """Everything one ParDo bundle needs besides its elements and side input values (all picklable)."""

    label: str
    fns: str  # the _DoFns plugin that holds the pickled DoFn
    fn: str  # its key there
    args: tuple
    kwargs: dict
    window_fn: Any
    side_inputs: tuple[_SideInputView, ...]


@functools.lru_cache(maxsize=SET_UP_FNS_PER_PROCESS)
def _set_up_fn(fns: str, key: str, thread: int) -> DoFnSignature:
    """The DoFn, unpickled and set up once per worker thread and reused by the thread's later bundles,
    as Beam's own workers do: heavy objects (a tokenizer) are built once, a progress count goes on.
    As its signature (which holds it), whose inspection of the DoFn's methods would otherwise run
    every bundle."""
    plugin = ddist.get_worker().plugins[fns]
    assert isinstance(plugin, _DoFns)
    fn = pickler.loads(plugin.fns[key])
    fn.setup()
    return DoFnSignature(fn)


def _process_bundle(elements, spec: _BundleSpec, *side_values: list) -> list:
    """Runs one bundle through this thread's DoFn; returns its outputs, finish_bundle's included.

    side_values: every value of each side input.
    """
    receivers = transform_evaluator.OneReceiver()
    handler = _OutputHandler(
        window_fn=spec.window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    side_inputs = [
        SideInputMap(
            view.view_class,
            view.view_options,
            [transform_evaluator.get_windowed_value(v, view.window_fn) for v in values],
        )
        for view, values in zip(spec.side_inputs, side_values)
    ]
    invoker = DoFnInvoker.create_invoker(
        _set_up_fn(spec.fns, spec.fn, threading.get_ident()),
        handler,
        context=DoFnContext(spec.label, state=None),
        side_inputs=side_inputs,
        input_args=list(spec.args),
        input_kwargs=dict(spec.kwargs),
        user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_start_bundle()
    for element in elements:
        invoker.invoke_process(transform_evaluator.get_windowed_value(element, spec.window_fn))
    invoker.invoke_finish_bundle()
    return [output.value for output in receivers.values]


def _task_name(applied: AppliedPTransform) -> str:
    """A step's Dask task names: its Beam label (what the dashboard and the scheduler show), in
    characters dask's key parsing keeps together."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", applied.full_label)


def _concat(parts: list[list]) -> list:
    return [value for part in parts for value in part]


def _all_values(bag: db.Bag):
    """Every value of `bag` as one Delayed that refers to the bag's own tasks.

    Handing a ParDo the bag itself (or dask.delayed of it) would give the ParDo a renamed copy of
    the bag's whole upstream graph, computed again; a Delayed passed as an argument is used as is.
    One task reads every partition: dask's reduction adds a task per partition and a tree of
    aggregates (a side input's or a shuffle's file list is small; the tree saves nothing).
    """
    key = f"all-values-{dask.base.tokenize(bag.name)}"
    layer = {key: (_concat, [(bag.name, i) for i in range(bag.npartitions)])}
    dependencies: list[Any] = [bag]  # a Bag is a dask collection (dask's stubs say otherwise)
    return Delayed(key, HighLevelGraph.from_collections(key, layer, dependencies=dependencies))


class _DoFns(WorkerPlugin):
    """The job's pickled DoFns, on every worker (new ones too): a bundle's task names its DoFn by key.

    Beam's DaskRunner puts the pickled DoFn in every bundle's task, so a worker held a copy for each task
    queued on it (22 MB at 64 MB of text); a task of its own holding it would draw the bundles to the
    worker that ran it."""

    def __init__(self) -> None:
        self.name = f"lmshards-dofns-{uuid.uuid4().hex}"
        self.fns: dict[str, bytes] = {}

    def add(self, pickled: bytes) -> str:
        key = hashlib.blake2b(pickled, digest_size=16).hexdigest()
        self.fns[key] = pickled
        return key


@dataclasses.dataclass
class _ParDo(transform_evaluator.DaskBagOp):
    """A ParDo whose side inputs are graph dependencies (the op gets (side input, bag) pairs)."""

    fns: _DoFns = dataclasses.field(default_factory=_DoFns)  # the builder's: every ParDo's DoFn

    def apply(self, input_bag: db.Bag, side_inputs=None) -> db.Bag:
        transform = self.transform
        main_input = next(iter(self.applied.main_inputs.values()))
        window_fn = main_input.windowing.windowfn
        side_inputs = side_inputs or []
        spec = _BundleSpec(
            label=transform.label,
            fns=self.fns.name,
            fn=self.fns.add(pickler.dumps(transform.fn)),
            args=tuple(transform.args),
            kwargs=dict(transform.kwargs),
            window_fn=window_fn,
            side_inputs=tuple(
                _SideInputView(type(si), si._view_options(), si.pvalue.windowing.windowfn)
                for si, _ in side_inputs
            ),
        )
        side_values = [_all_values(bag) for _, bag in side_inputs]
        # Elements are wrapped in their window inside the bundle's task: a separate map would be a
        # task of its own per consumer, holding its own copy of the partition until that consumer ran.
        return _then(
            input_bag, _Step(_process_bundle, (spec,), len(side_values)), side_values, self.applied
        )


# ---------------------------------------------------------------- fusion: a step's tasks run its consumer too


@dataclasses.dataclass(frozen=True)
class _Step:
    """One step run inside a partition's task: fn(elements, *args, *its side inputs' values) -> outputs."""

    fn: Callable[..., list]
    args: tuple
    sides: int  # how many side inputs' value lists it takes


def _run_steps(elements, steps: tuple[_Step, ...], *side_values: list) -> list:
    """A partition through fused steps, each step's whole output (finish_bundle's too) into the next;
    side_values: each step's side inputs' values, in step order."""
    at = 0
    for step in steps:
        elements = step.fn(elements, *step.args, *side_values[at : at + step.sides])
        at += step.sides
    return elements


def _run_group_steps(
    files: list[dask_shuffle.ShuffleFile],
    partition: int,
    steps: tuple[_Step, ...],
    *side_values: list,
) -> list:
    return _run_steps(_reduce_partition(files, partition), steps, *side_values)


@dataclasses.dataclass(frozen=True)
class _Partitions:
    """A bag's partitions, which fused steps run on: each step's task applies them to one partition."""

    bag: db.Bag

    def tasks(self, steps: tuple[_Step, ...], side_values: tuple, name: str) -> db.Bag:
        return self.bag.map_partitions(_run_steps, steps, *side_values, token=name)


@dataclasses.dataclass(frozen=True)
class _Groups:
    """A file GroupByKey's partitions, each grouped inside the task of the steps that read it.

    A reduce task of its own returned its partition's groups, which stayed in the worker until the
    reader ran, and a worker ran several reduce tasks before their readers (near dedup's band buckets:
    about 1.8 KB a key, 50 MB a partition, held four or five at once). Every task here depends on the
    shuffle files' list alone, so dask spreads them over the workers as it does a read."""

    files: Any  # a Delayed: every ShuffleFile
    partitions: int

    def tasks(self, steps: tuple[_Step, ...], side_values: tuple, name: str) -> db.Bag:
        sides = tuple(v.key for v in side_values)
        key = f"{name}-{dask.base.tokenize(self.files.key, steps, *sides)}"
        layer = {
            (key, j): (_run_group_steps, self.files.key, j, steps, *sides)
            for j in range(self.partitions)
        }
        graph = HighLevelGraph.from_collections(key, layer, dependencies=[self.files, *side_values])
        return db.Bag(graph, key, self.partitions)


class _Fused(db.Bag):
    """Steps fused over a source's partitions, a task per partition. When the last step's output has one
    consumer (the builder keeps it so only then), that consumer's step joins the same tasks, as Beam
    fuses a chain of steps: a worker holds no step's output between tasks, and the scheduler and
    workers handle a task per partition, not one per step and partition (a plain preprocess had
    1,103 tasks on the benchmark corpus).

    A bag that dask derives from this one (its methods build type(self)) has no steps: a plain bag."""

    source: _Partitions | _Groups | None = None
    steps: tuple[_Step, ...] = ()
    side_values: tuple = ()

    @classmethod
    def over(
        cls, source: _Partitions | _Groups, steps: tuple[_Step, ...], side_values: tuple, name: str
    ) -> _Fused:
        bag = source.tasks(steps, side_values, name)
        fused = cls(bag.dask, bag.name, bag.npartitions)
        fused.source, fused.steps, fused.side_values = source, steps, side_values
        return fused

    def unfusable(self) -> db.Bag:
        """The same tasks as a plain bag: what its consumers get when there are several."""
        return db.Bag(self.dask, self.name, self.npartitions)


def _then(
    input_bag: db.Bag,
    step: _Step,
    side_values: list,
    applied: AppliedPTransform,
    suffix: str = "",
) -> _Fused:
    """`step` over `input_bag`: in its tasks when it is fused steps with no other consumer, else in a
    task per partition of its own (grouping a file GroupByKey's partition inside that task)."""
    name = _task_name(applied) + suffix
    if isinstance(input_bag, _Fused) and input_bag.source is not None:
        return _Fused.over(
            input_bag.source,
            (*input_bag.steps, step),
            (*input_bag.side_values, *side_values),
            name,
        )
    source = (
        _Groups(input_bag.files, input_bag.npartitions)
        if isinstance(input_bag, _GroupedBag)
        else _Partitions(input_bag)
    )
    return _Fused.over(source, (step,), tuple(side_values), name)


@dataclasses.dataclass
class _CreateOp(transform_evaluator.Create):
    """Beam's Create, with DEFAULT_ELEMENTS_PER_PARTITION unless the user sized the partitions."""

    def apply(self, input_bag=None, side_inputs=None) -> db.Bag:
        if not (self.bag_kwargs.get("npartitions") or self.bag_kwargs.get("partition_size")):
            self.bag_kwargs = dict(self.bag_kwargs, partition_size=DEFAULT_ELEMENTS_PER_PARTITION)
        return super().apply(input_bag, side_inputs)


class _QuietFallback(logging.Filter):
    """Drops Beam's note that a key type (a frozen dataclass, a NamedTuple) is encoded by its fields: that
    encoding is deterministic, and each task's new coder would log it again."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Using fallback deterministic coder")


@functools.lru_cache(maxsize=SET_UP_FNS_PER_PROCESS)
def _key_encoder(label: str):
    """Beam's deterministic encoding of a GroupByKey's keys (equal keys, equal bytes, in every process),
    made once per worker process and step."""
    logging.getLogger("apache_beam.coders.coder_impl").addFilter(_QUIET_FALLBACK)
    return coders.registry.get_coder(object).as_deterministic_coder(label).encode


_QUIET_FALLBACK = _QuietFallback()


def _write_partition(
    items: list, partitions: int, directory: str, label: str
) -> list[dask_shuffle.ShuffleFile]:
    written = dask_shuffle.write_sections(
        items, partitions=partitions, directory=directory, encode_key=_key_encoder(label)
    )
    return [] if written is None else [written]


class _Unwindowed:
    """A group's values out of the windows they were reified into (as Beam's own translation does),
    as they are iterated: a value the shuffle wrote apart is read only then."""

    def __init__(self, values: dask_shuffle.GroupValues):
        self._values = values

    def __iter__(self) -> Iterator:
        return map(transform_evaluator.defenestrate, self._values)

    def __len__(self) -> int:
        return len(self._values)


def _reduce_partition(files: list[dask_shuffle.ShuffleFile], partition: int) -> list:
    groups = dask_shuffle.read_groups(files, partition)
    return [(key, _Unwindowed(values)) for key, values in groups.items()]


@dataclasses.dataclass
class _FileGroupByKey(transform_evaluator.DaskBagOp):
    """A GroupByKey through shuffle files under `directory` (lmshards.preprocess.dask_shuffle), into as
    many partitions as its input has, as Dask's own groupby."""

    directory: str = ""

    def apply(self, input_bag: db.Bag, side_inputs=None) -> db.Bag:
        partitions = input_bag.npartitions
        step = _Step(_write_partition, (partitions, self.directory, self.applied.full_label), 0)
        written = _then(input_bag, step, [], self.applied, ".write")
        files = _all_values(written)  # every ShuffleFile: small, the data stays on disk
        reduce, name = dask.delayed(_reduce_partition), f"{_task_name(self.applied)}.read"
        reduced = db.from_delayed(
            [
                reduce(files, j, dask_key_name=f"{name}-{dask.base.tokenize(files.key, j)}")
                for j in range(partitions)
            ]
        )
        return _GroupedBag(reduced, files)


class _GroupedBag(db.Bag):
    """A file GroupByKey's output: a bag of reduce tasks for any reader, and the shuffle files' list, from
    which a ParDo groups each partition inside its own bundle's task (_grouped_bundles)."""

    def __init__(self, reduced: db.Bag, files):
        super().__init__(reduced.dask, reduced.name, reduced.npartitions)
        self.files = files


TRANSLATIONS = {**transform_evaluator.TRANSLATIONS, ParDo: _ParDo, _Create: _CreateOp}


class _LiftCombines(PTransformOverride):
    """CombinePerKey -> a combine within each bundle, the GroupByKey, then a merge of the partial
    results (Beam's LiftedCombinePerKey, as Beam's own DirectRunner does). Beam's DaskRunner groups
    every input value of a CombinePerKey: a CombineGlobally over one value per document gathered the
    whole corpus's values in one task."""

    def matches(self, applied_ptransform: AppliedPTransform) -> bool:
        return isinstance(applied_ptransform.transform, CombinePerKey)

    def get_replacement_transform_for_applied_ptransform(self, applied_ptransform):
        transform = applied_ptransform.transform
        return LiftedCombinePerKey(transform.fn, transform.args, transform.kwargs)


# ---------------------------------------------------------------- the pipeline as bags


class _Consumers(PipelineVisitor):
    """How many steps read each step's output, as a main or a side input."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def visit_transform(self, node: AppliedPTransform) -> None:
        self.counts.update(i.producer for i in node.inputs if not isinstance(i, pvalue.PBegin))
        self.counts.update(si.pvalue.producer for si in node.side_inputs)


class _BagBuilder(PipelineVisitor):
    """Visits the pipeline's primitive transforms in order and builds the Dask bag of each."""

    def __init__(self, bag_kwargs: dict, consumers: Counter, shuffle_dir: str | None = None):
        self._bag_kwargs = bag_kwargs
        self._consumers = consumers  # per step: how many steps read its output
        self._shuffle_dir = shuffle_dir
        self._bags: dict[AppliedPTransform, db.Bag] = {}
        self._steps = 0  # the steps visited so far (Beam visits a step after its inputs' steps)
        self.fns = _DoFns()  # every ParDo's pickled DoFn

    def visit_transform(self, node: AppliedPTransform) -> None:
        if len(node.outputs) > 1:
            raise NotImplementedError(
                f"DaskRunner: step {node.full_label!r} has tagged outputs, which this runner does not keep apart."
            )
        op_class = TRANSLATIONS.get(type(node.transform), transform_evaluator.NoOp)
        producers = [i.producer for i in node.inputs if not isinstance(i, pvalue.PBegin)]
        sides = [(si, self._bags[si.pvalue.producer]) for si in node.side_inputs]
        inputs = [self._bags[p] for p in producers if p in self._bags]
        if not inputs and op_class is not _CreateOp:
            raise NotImplementedError(
                f"DaskRunner: step {node.full_label!r} ({type(node.transform).__name__}) "
                "starts a pipeline branch, which this runner cannot translate."
            )
        if op_class is transform_evaluator.GroupByKey and self._shuffle_dir is not None:
            op: transform_evaluator.DaskBagOp = _FileGroupByKey(
                node, bag_kwargs=self._bag_kwargs, directory=self._shuffle_dir
            )
        elif op_class is _ParDo:
            op = _ParDo(node, bag_kwargs=self._bag_kwargs, fns=self.fns)
        else:
            op = op_class(node, bag_kwargs=self._bag_kwargs)
        # Later steps first: a worker runs what consumes data already held before it reads more.
        self._steps += 1
        with dask.annotate(priority=self._steps):
            if op_class is transform_evaluator.Flatten:
                bag = op.apply(inputs)
            elif op_class is _ParDo:
                bag = op.apply(inputs[0], sides)
            else:
                bag = op.apply(inputs[0] if inputs else None)
        # Fused into its consumer only when it has one: several would each run the steps again.
        if isinstance(bag, _Fused) and self._consumers[node] != 1:
            bag = bag.unfusable()
        self._bags[node] = bag

    def leaves(self) -> list[db.Bag]:
        """The bags nothing else reads: computing them computes the whole pipeline."""
        return [bag for node, bag in self._bags.items() if not self._consumers[node]]


# ---------------------------------------------------------------- shuffle directory


class DaskShuffleOptions(PipelineOptions):
    """How lmshards' DaskRunner moves a GroupByKey's data."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument(
            "--dask_shuffle",
            choices=SHUFFLES,
            default=FILE_SHUFFLE,
            help="DaskRunner: how a GroupByKey moves data: 'files' (default; worker memory stays flat "
            "in the corpus) or 'tasks' (Dask's task shuffle, in the workers' memory)",
        )
        parser.add_argument(
            "--dask_shuffle_dir",
            default=None,
            help="DaskRunner: a directory every worker can read and write (shared or gs://) for the "
            "shuffle files; default: a temporary directory, when every worker can read it",
        )


class ShuffleDirError(LmshardsError):
    """--dask_shuffle_dir is not readable by every worker."""


def _visible(path: str) -> bool:
    return fs.exists(path)


def shuffle_dir(options: PipelineOptions, client: ddist.Client) -> str | None:
    """Creates this job's shuffle directory, deleted when the job ends, and checks that every worker
    sees it; None: Dask's task shuffle.

    Without --dask_shuffle_dir, a new temporary directory of this machine, when the workers can read it
    (a local cluster, or one on this machine); else Dask's task shuffle, with a warning.

    Raises:
      ShuffleDirError: --dask_shuffle_dir that some worker cannot read, named with the fix.
    """
    settings = options.view_as(DaskShuffleOptions)
    if settings.dask_shuffle == TASK_SHUFFLE:
        return None
    given = settings.dask_shuffle_dir
    if given:
        path = fs.join(given, f"{SHUFFLE_DIR_PREFIX}{uuid.uuid4().hex}")
        fs.makedirs(path)
    else:
        path = tempfile.mkdtemp(prefix=SHUFFLE_DIR_PREFIX)
    marker = fs.join(path, "visible")
    fs.write_bytes_atomic(marker, b"")
    seen = client.run(_visible, marker)
    if seen and all(seen.values()):
        return path
    _remove(path)
    blind = sorted(worker for worker, ok in seen.items() if not ok)
    if given:
        raise ShuffleDirError(
            f"--dask_shuffle_dir {given!r}: the Dask workers {blind or '(none yet)'} cannot read it; pass a "
            "directory every worker can reach (a shared filesystem or gs://...), or --dask_shuffle tasks."
        )
    logging.getLogger(FORWARDED_LOGGER).warning(
        "DaskRunner: the workers cannot read this machine's temporary directory, so GroupByKeys use Dask's "
        "task shuffle, whose memory grows with the corpus; pass --dask_shuffle_dir DIR (shared or gs://)."
    )
    return None


def _remove(path: str) -> None:
    if fs.is_remote(path):
        filesystem, p = fs.filesystem(path)
        filesystem.rm(p, recursive=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- client and result


class _InfoLogs(WorkerPlugin):
    """Lets a worker's FORWARDED_LOGGER emit INFO records (a worker's loggers start at WARNING)."""

    name = "lmshards-info-logs"

    def setup(self, worker) -> None:
        logging.getLogger(FORWARDED_LOGGER).setLevel(logging.INFO)


def local_cluster(workers: int) -> ddist.LocalCluster:
    """`workers` single-threaded worker processes; the scheduler, workers and the scheduler's HTTP
    endpoint (a dashboard, with bokeh installed) listen on 127.0.0.1 only, on free ports.

    The workers' statistical profiler is off: its history (a call tree a second, kept for the last
    1000 seconds) was a worker's largest growing allocation, 15 MB after 28 s of a 64 MB preprocess
    (docs/engines.md says how to turn it off on a cluster of your own), and every server checks its
    event loop once a second instead of every 20 ms (LOCAL_TICK_INTERVAL).

    Where the platform has it, the workers are forked from a server process that imported Beam, dask
    and the pipeline's stages once (WORKER_PRELOAD): each spawned worker imported them again, about
    1 CPU s a worker."""
    settings: dict[str, Any] = {  # the nannies pass them on to their workers
        WORKER_PROFILER: False,
        EVENT_LOOP_TICK: LOCAL_TICK_INTERVAL,
    }
    forked = FORKSERVER in multiprocessing.get_all_start_methods()
    if forked:
        settings[START_METHOD] = FORKSERVER
    with dask.config.set(settings):
        if forked:  # replaces the list dask sets on first use: distributed imports the rest of it
            get_mp_context().set_forkserver_preload(list(WORKER_PRELOAD))
        return ddist.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host=LOCALHOST,
            dashboard_address=f"{LOCALHOST}:0",
        )


@dataclasses.dataclass
class DaskRunnerResult(dask_runner.DaskRunnerResult):
    """Closes the client, and a cluster started for this job, and deletes the job's shuffle files once
    the job has ended."""

    cluster: ddist.LocalCluster | None = None
    shuffle_dir: str | None = None  # the job's shuffle directory, made by shuffle_dir
    fns: str | None = None  # the job's _DoFns plugin

    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            if self.shuffle_dir is not None:
                _remove(self.shuffle_dir)
            if self.cluster is None:  # a shared cluster outlives the job: take our plugins off it
                self.client.unforward_logging(FORWARDED_LOGGER)
                self.client.unregister_worker_plugin(_InfoLogs.name)
                if self.fns is not None:
                    self.client.unregister_worker_plugin(self.fns)
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


class DaskRunner(dask_runner.DaskRunner):
    """Beam's DaskRunner with fresh ParDo bundles, side inputs computed once and a local-only cluster."""

    def run_pipeline(self, pipeline, options):
        client_options = options.view_as(dask_runner.DaskOptions).get_all_options(
            drop_default=True, current_only=True
        )
        bag_kwargs = dask_runner.DaskOptions._extract_bag_kwargs(client_options)
        # distributed logs every worker and connection at INFO; that would drown the progress lines.
        logging.getLogger("distributed").setLevel(logging.WARNING)
        # Lifted first: the replacement holds a GroupByKey, which the Dask overrides then translate.
        pipeline.replace_all([_LiftCombines(), *dask_overrides()])
        _bags(pipeline, bag_kwargs)  # refuses what cannot be translated, before any cluster starts

        cluster = None
        if not (client_options.get("address") or client_options.get("scheduler_file")):
            cluster = local_cluster(os.cpu_count() or 1)
            client_options["address"] = cluster
        client = ddist.Client(**client_options)
        client.register_plugin(_InfoLogs())
        client.forward_logging(FORWARDED_LOGGER, level=logging.INFO)
        try:
            shuffle = shuffle_dir(options, client)  # str | None
        except BaseException:
            client.close()
            if cluster is not None:
                cluster.close()
            raise
        graph, fns = _bags(pipeline, bag_kwargs, shuffle)
        client.register_plugin(fns)
        # Not optimized: dask's fusion of linear chains drops the steps' priorities.
        future = client.compute(graph, optimize_graph=False)
        return DaskRunnerResult(client, [future], cluster, shuffle, fns.name)


def _bags(pipeline, bag_kwargs: dict, shuffle_dir: str | None = None) -> tuple[db.Bag, _DoFns]:
    """The whole pipeline as one Dask bag (every leaf), its GroupByKeys through `shuffle_dir`'s files
    (None: Dask's task shuffle), and the DoFns its tasks name (for every worker before it runs)."""
    consumers = _Consumers()
    pipeline.visit(consumers)
    builder = _BagBuilder(bag_kwargs, consumers.counts, shuffle_dir)
    # Without a client yet, dask would plan each GroupByKey as a shuffle through one machine's disk.
    with dask.config.set({"dataframe.shuffle.method": TASK_SHUFFLE}):
        pipeline.visit(builder)
    # One collection: dask computes each collection handed to it with its own copy of the shared graph.
    return db.concat(builder.leaves()), builder.fns
