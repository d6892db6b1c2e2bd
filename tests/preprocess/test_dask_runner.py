"""--runner DaskRunner on a dask.distributed cluster of 2 worker processes: the same shard bytes and
manifest as the default runner, and the gaps of Beam's own DaskRunner closed."""

from __future__ import annotations

import json
import os
import pickle
import time
import uuid
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from lmshards.command.cli import main as lmshards_main

distributed = pytest.importorskip("dask.distributed")
import dask  # noqa: E402

pytestmark = pytest.mark.slow

from lmshards.preprocess.dask_runner import (  # noqa: E402  (needs dask)
    LOCALHOST,
    SHUFFLE_DIR_PREFIX,
    WORKER_PROFILER,
    ShuffleDirError,
    local_cluster,
    shuffle_dir,
)
from lmshards.preprocess.dask_shuffle import SHUFFLE_FILE_PREFIX  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
# Several packing groups and read ranges (so both workers read, pack and write), pad, JSON Lines and text.
FLAGS = [
    "--input",
    str(GOLDEN / "docs.jsonl"),
    "--input",
    str(GOLDEN / "corpus"),
    "--tokenizer",
    str(GOLDEN / "tokenizer.json"),
    "--seq_len",
    "48",
    "--validation_fraction",
    "0.1",
    "--seed",
    "3",
    "--packing_group_tokens",
    "2000",
    "--shard_multiple",
    "4",
    "--remainder",
    "pad",
    "--range_mb",
    "0.005",
]


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        host=LOCALHOST,
        dashboard_address=f"{LOCALHOST}:0",
    ) as cluster:
        yield cluster


def _on(cluster, *flags: str) -> PipelineOptions:
    """Options that run a pipeline on lmshards' DaskRunner, on `cluster`."""
    return PipelineOptions(
        [
            "--runner",
            "lmshards.preprocess.dask_runner.DaskRunner",
            "--dask_client_address",
            cluster.scheduler_address,
            *flags,
        ]
    )


def _files(output: Path) -> dict[str, bytes]:
    return {
        p.relative_to(output).as_posix(): p.read_bytes()
        for p in sorted(output.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("shuffle", ["files", "tasks"])
def test_dask_output_is_byte_identical_to_the_default_runners(cluster, tmp_path, shuffle):
    default, dask = tmp_path / "default", tmp_path / "dask"
    assert lmshards_main(["preprocess", *FLAGS, "--output", str(default)]) == 0
    assert (
        lmshards_main(
            [
                "preprocess",
                *FLAGS,
                "--output",
                str(dask),
                "--runner",
                "DaskRunner",
                "--dask_client_address",
                cluster.scheduler_address,
                "--dask_shuffle",
                shuffle,
            ]
        )
        == 0
    )

    expected, got = _files(default), _files(dask)
    manifests = [json.loads(files.pop("manifest.json")) for files in (expected, got)]
    assert got == expected  # every shard, the tokenizer copy and schema.pbtxt, byte for byte
    assert sum(1 for name in got if name.endswith(".tfrecord")) >= 8
    for manifest in manifests:
        manifest.pop("created_at")
    assert manifests[1] == manifests[0]


class _CountRuns(beam.DoFn):
    """Leaves one file per element it processes, so runs in any worker process can be counted."""

    def __init__(self, directory: str):
        self._directory = directory

    def process(self, x):
        (Path(self._directory) / uuid.uuid4().hex).write_text(str(x))
        yield x


class _EmitLast(beam.DoFn):
    """Buffers a bundle's elements, adding the side input to each, and emits them in finish_bundle."""

    def start_bundle(self):
        self._held = []

    def process(self, x, total):
        self._held.append(x * 100 + total)

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        for value in self._held:
            yield GlobalWindows.windowed_value(value)


def _save(_, values, path):
    Path(path).write_text(json.dumps(sorted(values)))


def test_each_step_runs_once_and_finish_bundle_outputs_arrive(cluster, tmp_path):
    """Beam's DaskRunner loses finish_bundle outputs, repeats a bundle's earlier outputs, and reruns
    a side input's upstream in every task that reads it."""
    runs, result = tmp_path / "runs", tmp_path / "result.json"
    runs.mkdir()
    with beam.Pipeline(options=_on(cluster)) as pipeline:
        numbers = pipeline | beam.Create(range(6)) | beam.ParDo(_CountRuns(str(runs)))
        total = numbers | beam.CombineGlobally(sum)
        held = numbers | beam.ParDo(_EmitLast(), beam.pvalue.AsSingleton(total))
        numbers | "Again" >> beam.Map(lambda x: x)  # a second consumer, and a second leaf
        (
            pipeline
            | "Once" >> beam.Create([None])
            | beam.Map(_save, beam.pvalue.AsList(held), str(result))
        )
    assert json.loads(result.read_text()) == [x * 100 + 15 for x in range(6)]
    assert sorted(p.read_text() for p in runs.iterdir()) == [str(x) for x in range(6)]


class _SumAndPartials(beam.CombineFn):
    """Sums, and counts the partial sums the last merge received (one unless bundles combine first)."""

    def create_accumulator(self):
        return 0, 0  # (sum, partial sums merged into it)

    def add_input(self, accumulator, value):
        return accumulator[0] + value, accumulator[1]

    def merge_accumulators(self, accumulators):
        accumulators = list(accumulators)
        return (
            sum(total for total, _ in accumulators),
            sum(max(merged, 1) for _, merged in accumulators),
        )

    def extract_output(self, accumulator):
        return accumulator


def test_each_bundle_combines_its_values_before_the_grouping(cluster, tmp_path):
    """Beam's DaskRunner hands a CombineGlobally every input value in one task; lmshards' lifts the
    combine: each bundle (here one element each) sums its own values and only the partial sums are
    grouped (unlifted, the one merge sees no partial sum)."""
    result = tmp_path / "result.json"
    with beam.Pipeline(options=_on(cluster)) as pipeline:
        total = (
            pipeline
            | beam.Create(range(40)).with_output_types(int)
            | beam.CombineGlobally(_SumAndPartials())
        )
        (
            pipeline
            | "Once" >> beam.Create([None])
            | beam.Map(_save, beam.pvalue.AsList(total), str(result))
        )
    [[value, partials]] = json.loads(result.read_text())
    assert value == sum(range(40))
    assert partials == 40


def _shuffle_files_seen(key_values, directory):
    """What a grouped element's task sees of the shuffle directories under `directory`."""
    key, values = key_values
    jobs = [d for d in os.listdir(directory) if d.startswith(SHUFFLE_DIR_PREFIX)]
    files = [f for d in jobs for f in os.listdir(os.path.join(directory, d))]
    return key, sorted(values), len(jobs), sum(f.startswith(SHUFFLE_FILE_PREFIX) for f in files)


def test_a_group_by_key_goes_through_files_under_the_shuffle_dir_which_go_when_the_job_ends(
    cluster, tmp_path
):
    shuffles, result = tmp_path / "shuffles", tmp_path / "result.json"
    shuffles.mkdir()
    options = _on(cluster, "--dask_shuffle_dir", str(shuffles), "--dask_npartitions", "3")
    with beam.Pipeline(options=options) as pipeline:
        grouped = (
            pipeline
            | beam.Create([(f"k{i % 5}", i) for i in range(40)])
            | beam.GroupByKey()
            | beam.Map(_shuffle_files_seen, str(shuffles))
        )
        (
            pipeline
            | "Once" >> beam.Create([None])
            | beam.Map(_save, beam.pvalue.AsList(grouped), str(result))
        )
    seen = json.loads(result.read_text())
    assert [[key, values] for key, values, _, _ in seen] == [
        [f"k{k}", list(range(k, 40, 5))] for k in range(5)
    ]
    assert {(jobs, files) for _, _, jobs, files in seen} == {(1, 3)}  # a file per input partition
    assert list(shuffles.iterdir()) == []


class _FakeClient:
    """What shuffle_dir asks of a dask client: each worker's answer to run(fn, path)."""

    def __init__(self, sees: bool):
        self._sees = sees

    def run(self, fn, path):
        return {"tcp://10.0.0.7:4001": self._sees and fn(path)}


def test_a_shuffle_dir_some_worker_cannot_read_is_refused_and_removed(tmp_path):
    options = PipelineOptions(["--dask_shuffle_dir", str(tmp_path)])
    with pytest.raises(
        ShuffleDirError, match=r"--dask_shuffle_dir .*10\.0\.0\.7.*--dask_shuffle tasks"
    ):
        shuffle_dir(options, _FakeClient(sees=False))
    assert list(tmp_path.iterdir()) == []
    chosen = shuffle_dir(options, _FakeClient(sees=True))
    assert chosen is not None and Path(chosen).parent == tmp_path


def test_without_a_shuffle_dir_workers_that_cannot_read_ours_get_the_task_shuffle(caplog):
    with caplog.at_level("WARNING", logger="preprocess"):
        chosen = shuffle_dir(PipelineOptions([]), _FakeClient(sees=False))
    assert chosen is None
    assert "--dask_shuffle_dir" in caplog.text
    assert shuffle_dir(PipelineOptions(["--dask_shuffle", "tasks"]), _FakeClient(sees=True)) is None


def test_tagged_outputs_are_refused_before_any_cluster_starts():
    pipeline = beam.Pipeline(
        options=PipelineOptions(["--runner", "lmshards.preprocess.dask_runner.DaskRunner"])
    )
    _ = pipeline | beam.Create([1, 2]) | beam.Map(lambda x: x).with_outputs("odd", main="all")
    with pytest.raises(NotImplementedError, match="has tagged outputs"):
        pipeline.run()


def test_the_local_cluster_listens_on_localhost_only():
    psutil = pytest.importorskip("psutil")
    with local_cluster(1) as cluster:
        addresses = [
            cluster.scheduler_address,
            *(w["host"] for w in cluster.scheduler_info["workers"].values()),
        ]
        processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
        listening = {
            c.laddr.ip
            for p in processes
            for c in p.net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        }
    assert all(LOCALHOST in address for address in addresses)
    assert listening == {LOCALHOST}


def _loaded(modules):
    import sys

    return [m for m in modules if m in sys.modules]


def test_the_local_clusters_workers_start_with_beam_and_the_stages_loaded():
    """Forked from a server that imported them once: a spawned worker imported Beam, dask and the
    stages again (about 1 CPU s each)."""
    from lmshards.preprocess.dask_runner import FORKSERVER

    if FORKSERVER not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip("no fork server on this platform: workers are spawned")
    wanted = [
        "apache_beam",
        "lmshards.preprocess.stages.encode",
        "lmshards.preprocess.stages.shard",
    ]
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        assert list(client.run(_loaded, wanted).values()) == [wanted]


def _frozen_objects():
    import gc

    return gc.get_freeze_count()


def test_the_local_clusters_workers_start_with_the_imported_heap_frozen():
    """The fork server froze what its imports made (dask_preload): no worker's collector walks it
    (Beam and dask are a few hundred thousand objects)."""
    from lmshards.preprocess.dask_runner import FORKSERVER

    if FORKSERVER not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip("no fork server on this platform: workers are spawned")
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        (frozen,) = client.run(_frozen_objects).values()
    assert frozen > 100_000


def _profiler_state(dask_worker):
    return dask.config.get(WORKER_PROFILER), len(dask_worker.profile_history)


def test_the_local_clusters_workers_keep_no_profile_history():
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        client.submit(time.sleep, 2.5).result()  # the profiler would close two 1 s cycles
        assert list(client.run(_profiler_state).values()) == [(False, 0)]


def _tick_ms(dask_worker):  # client.run hands the worker by this name; the same for any server
    return dask_worker.periodic_callbacks["tick"].callback_time


def test_the_local_clusters_servers_check_their_event_loops_once_a_second():
    """Dask's 20 ms tick, in the scheduler, each nanny and each worker, cost an idle cluster of two
    0.13 CPU s every second."""
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        ticks = [
            _tick_ms(cluster.scheduler),
            *(_tick_ms(nanny) for nanny in cluster.workers.values()),
            *client.run(_tick_ms).values(),
        ]
    assert ticks == [1000.0] * 3


def test_dask_curates_like_the_default_runner(cluster, tmp_path):
    """--dedup near with --decontaminate: the same audit, shards and manifest on Dask."""
    corpus = tmp_path / "corpus.txt"
    lines = (GOLDEN / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    corpus.write_text("\n".join(texts + texts[:5]) + "\n", encoding="utf-8")  # 5 exact copies
    eval_set = tmp_path / "eval.txt"
    eval_set.write_text(max(texts, key=len) + "\n", encoding="utf-8")
    flags = [
        "--input",
        str(corpus),
        "--tokenizer",
        str(GOLDEN / "tokenizer.json"),
        "--seq_len",
        "48",
        "--range_mb",
        "0.005",
        "--dedup",
        "near",
        "--decontaminate",
        str(eval_set),
        "--decontaminate_ngram",
        "8",
    ]
    default, dask = tmp_path / "default", tmp_path / "dask"
    assert lmshards_main(["preprocess", *flags, "--output", str(default)]) == 0
    dask_flags = ["--runner", "DaskRunner", "--dask_client_address", cluster.scheduler_address]
    assert lmshards_main(["preprocess", *flags, "--output", str(dask), *dask_flags]) == 0
    expected, got = _files(default), _files(dask)
    manifests = [json.loads(files.pop("manifest.json")) for files in (expected, got)]
    assert got == expected
    assert any(name.startswith("curation/") for name in got)
    for manifest in manifests:
        manifest.pop("created_at")
    assert manifests[1] == manifests[0]
    assert manifests[0]["curation"]["removed"]["exact"]["documents"] >= 5
    assert manifests[0]["curation"]["removed"]["contaminated"]["documents"] >= 1


def test_dask_judges_the_document_steps_like_the_default_runner(cluster, tmp_path):
    """--languages en (a document step, judged in the default runner's one pass and in Dask's staged
    pipeline): the same audit, shards and manifest funnel."""
    corpus = tmp_path / "corpus.txt"
    lines = (GOLDEN / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    german = "Der Ausschuss hat am Dienstag über den neuen Haushalt der Stadtbibliothek beraten."
    corpus.write_text("\n".join([german, *texts, german]) + "\n", encoding="utf-8")
    flags = [
        "--input",
        str(corpus),
        "--tokenizer",
        str(GOLDEN / "tokenizer.json"),
        "--seq_len",
        "48",
    ]
    flags += ["--range_mb", "0.005", "--languages", "en"]
    default, dask = tmp_path / "default", tmp_path / "dask"
    assert lmshards_main(["preprocess", *flags, "--output", str(default)]) == 0
    dask_flags = ["--runner", "DaskRunner", "--dask_client_address", cluster.scheduler_address]
    assert lmshards_main(["preprocess", *flags, "--output", str(dask), *dask_flags]) == 0
    expected, got = _files(default), _files(dask)
    manifests = [json.loads(files.pop("manifest.json")) for files in (expected, got)]
    assert got == expected
    for manifest in manifests:
        manifest.pop("created_at")
    assert manifests[1] == manifests[0]
    (row,) = manifests[0]["curation"]["steps"]
    assert row["name"] == "language" and row["counts"]["de"] >= 2
    assert row["documents_in"] == len(texts) + 2


def test_a_steps_key_encoding_is_made_once_per_process_without_beams_fallback_note(caplog):
    from lmshards.preprocess.curation.audit import KeptDoc
    from lmshards.preprocess.dask_runner import _key_encoder

    with caplog.at_level("WARNING"):
        encode = _key_encoder("Step/Group")
        assert _key_encoder("Step/Group") is encode
        assert encode(KeptDoc("a.txt", 3)) == _key_encoder("Other")(KeptDoc("a.txt", 3))
        assert encode(KeptDoc("a.txt", 3)) != encode(KeptDoc("a.txt", 4))
    assert "fallback" not in caplog.text


def test_a_gcs_shuffle_dir_gets_a_checked_job_directory_removed_at_the_end(gcs_emulator):
    from lmshards.plumbing import fs
    from lmshards.preprocess.dask_runner import _remove

    given = f"{gcs_emulator}/dask"
    chosen = shuffle_dir(PipelineOptions(["--dask_shuffle_dir", given]), _FakeClient(sees=True))
    assert chosen is not None
    assert chosen.startswith(f"{given}/{SHUFFLE_DIR_PREFIX}") and fs.exists(chosen)
    _remove(chosen)
    assert not fs.exists(chosen)


class _Heavy(beam.DoFn):
    """A DoFn whose pickled form is large (a model's weights, a tokenizer)."""

    def __init__(self):
        self.payload = os.urandom(1 << 20)

    def process(self, element):
        yield element


def test_the_tasks_name_their_dofn_which_reaches_the_workers_once():
    from lmshards.preprocess.dask_runner import _bags, dask_overrides

    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create(range(8)) | beam.ParDo(_Heavy())
    pipeline.replace_all(dask_overrides())
    graph, fns = _bags(pipeline, {})
    assert graph.npartitions == 8 and max(map(len, fns.fns.values())) > 1 << 20
    tasks = dict(graph.__dask_graph__())
    # Each task as the scheduler sends it to a worker, alone: none carries the DoFn.
    assert len(tasks) > 8 and max(len(pickle.dumps(task)) for task in tasks.values()) < 1 << 19


def _task_function(task) -> str:
    func = task[0] if isinstance(task, tuple) else getattr(task, "func", None)
    return getattr(func, "__name__", "")


def test_a_pardo_reading_a_group_by_key_groups_its_partition_in_its_own_task(tmp_path):
    from lmshards.preprocess.dask_runner import _bags, dask_overrides

    pipeline = beam.Pipeline()
    _ = (
        pipeline
        | beam.Create(range(6))
        | "Key" >> beam.Map(lambda i: (i % 2, i))
        | beam.GroupByKey()
        | "Read" >> beam.Map(lambda kv: kv)
    )
    pipeline.replace_all(dask_overrides())
    graph, _ = _bags(pipeline, {}, str(tmp_path))
    functions = [_task_function(task) for task in dict(graph.__dask_graph__()).values()]
    # No task of its own returns a partition's groups (a worker kept them until their reader ran).
    assert functions.count("_run_group_steps") == 6 and "_reduce_partition" not in functions


def _steps_per_task(graph) -> list[list[str]]:
    """Each task that runs fused steps: the names of its steps' DoFns (or functions), in order."""
    out = []
    for task in dict(graph.__dask_graph__()).values():
        if _task_function(task) not in ("_run_steps", "_run_group_steps"):
            continue
        args = task[1:] if isinstance(task, tuple) else [getattr(a, "value", a) for a in task.args]
        steps = next(a for a in args if isinstance(a, tuple) and a and hasattr(a[0], "fn"))
        out.append(
            [
                s.args[0].label if s.args and hasattr(s.args[0], "label") else s.fn.__name__
                for s in steps
            ]
        )
    return out


def test_a_chain_of_steps_runs_in_one_task_per_partition_and_a_shared_step_in_its_own():
    """Beam's fusion: a step whose output has one reader runs in that reader's task; a step read by
    two runs in tasks of its own, once (test_each_step_runs_once_... runs such a pipeline)."""
    from lmshards.preprocess.dask_runner import _bags, dask_overrides

    pipeline = beam.Pipeline()
    shared = pipeline | beam.Create(range(8)) | "A" >> beam.Map(abs)
    _ = shared | "B" >> beam.Map(str) | "C" >> beam.Map(len)
    _ = shared | "D" >> beam.Map(bool)
    pipeline.replace_all(dask_overrides())
    graph, _ = _bags(pipeline, {})
    chains = sorted(_steps_per_task(graph))
    expected = [["Map(abs)"]] * 8 + [["Map(str)", "Map(len)"]] * 8 + [["Map(bool)"]] * 8
    assert chains == sorted(expected)
