"""Resuming on another number of devices: the same global batch gives the same sequences, masks and losses.

In-process checks of the input plan (every replica count gives each step the same rows, masked the same
way, in train and in eval; a one-replica run keeps the masks runs have always had), the refusals of a
resume with another global batch or another number of hosts, and, marked slow, whole runs stopped on
4 devices and resumed on 2 (and 2 -> 4) on both backends (and ModernBERT on JAX), compared with uninterrupted
ones.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from lmshards.plumbing.errors import LmshardsError  # noqa: E402
from lmshards.train.inputs import data, mixture  # noqa: E402
from lmshards.train.inputs.input_plan import InputPlan  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

SEQ_LEN = 32
GLOBAL_BATCH = 8
STEPS = 5


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=SEQ_LEN, max_lines_per_file=60)
    return str(out)


def plan(shards: str, replicas: int, *, recipe: str = "token", tokenizer=None) -> InputPlan:
    mix = mixture.open_mixture([shards])
    masking = data.masking_spec(
        mix.manifest, recipe=recipe, mlm_probability=0.15, tokenizer=tokenizer
    )
    return InputPlan.create(
        mix,
        masking=masking,
        per_replica_batch=GLOBAL_BATCH // replicas,
        seed=3,
        shuffle_buffer=64,
        replicas=replicas,
    )


def train_steps(inputs: InputPlan, *, start_step: int, steps: int) -> list[dict[str, np.ndarray]]:
    """The global batches of `steps` steps from start_step, each the replicas' batches joined in order."""
    batches = inputs.numpy_batches(inputs.train_dataset(pipeline_id=0, start_step=start_step))
    return [next(batches) for _ in range(steps)]


def assert_same_batches(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for step, (a, b) in enumerate(zip(got, want)):
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"step {step}: {name}")


def test_every_replica_count_gives_each_step_the_same_rows_and_masks(shards):
    one = train_steps(plan(shards, 1), start_step=0, steps=STEPS)
    assert any(b["mask_weights"].sum() > 0 for b in one)
    for replicas in (2, 4):
        assert_same_batches(train_steps(plan(shards, replicas), start_step=0, steps=STEPS), one)
    # Stopped on 4 replicas at step 2 and resumed on 2: the steps after it are those of any run.
    assert_same_batches(train_steps(plan(shards, 2), start_step=2, steps=STEPS - 2), one[2:])


def test_word_recipes_mask_the_same_words_on_every_replica_count(shards, sample_tokenizer):
    from lmshards.schemas.tokenizer_info import locate_tokenizer

    tokenizer = locate_tokenizer(str(sample_tokenizer))
    one = train_steps(plan(shards, 1, recipe="span", tokenizer=tokenizer), start_step=0, steps=3)
    four = train_steps(plan(shards, 4, recipe="span", tokenizer=tokenizer), start_step=0, steps=3)
    assert_same_batches(four, one)


def test_a_one_replica_run_keeps_the_masks_it_always_had(shards):
    """One replica: step k's batch is masked as a whole with the seed (seed, 2 * 1_000_003 * k), as it always was."""
    inputs = plan(shards, 1)
    mix = inputs.mixture
    ds = data.train_dataset(
        mixture.pipeline_streams(mix, inputs.pass_records, num_pipelines=1, pipeline_id=0),
        block_counts=mix.block_counts(),
        features=mix.manifest.features(),
        batch_size=GLOBAL_BATCH,
        shuffle_buffer=64,
        seed=3,
        start_step=1,
        masking=inputs.masking,
        with_segment_ids=False,
    )
    batch = next(iter(ds))
    redone = data.mask_batch(
        _unmasked(batch),
        batch["padding_mask"],
        inputs.masking,
        tf.constant([3, 2 * 1_000_003], tf.int64),
    )
    for name in ("token_ids", "mask_positions", "mask_ids", "mask_weights"):
        np.testing.assert_array_equal(redone[name].numpy(), batch[name].numpy(), err_msg=name)


def _unmasked(batch) -> tf.Tensor:
    """The records a masked batch came from: mask_ids put back at mask_positions."""
    ids = batch["token_ids"].numpy().copy()
    w = batch["mask_weights"].numpy() > 0
    rows = np.nonzero(w)[0]
    ids[rows, batch["mask_positions"].numpy()[w]] = batch["mask_ids"].numpy()[w]
    return tf.constant(ids)


def eval_rows(inputs: InputPlan, limit: int | None) -> dict[str, np.ndarray]:
    (shard_set,) = inputs.eval_sets
    batches = list(inputs.numpy_batches(inputs.eval_dataset(shard_set, pipeline_id=0, limit=limit)))
    assert len(batches) == inputs.eval_batches(shard_set, limit)
    return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


@pytest.mark.parametrize("limit", [None, 1])
def test_eval_masks_and_batches_are_the_same_on_every_replica_count(shards, limit):
    want = eval_rows(plan(shards, 1), limit)
    for replicas in (2, 4):
        got = eval_rows(plan(shards, replicas), limit)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_a_resume_with_another_global_batch_is_refused_naming_the_fix(shards):
    inputs = plan(shards, 2)
    inputs.check_resume(None)
    inputs.check_resume(plan(shards, 4).resolved())  # 4 devices -> 2: the same global batch
    with pytest.raises(LmshardsError) as e:
        inputs.check_resume({"global_batch": 16, "input_pipelines": 1})
    assert "global batch of 16" in str(e.value) and "--per_replica_batch 8" in str(e.value)
    with pytest.raises(LmshardsError, match="does not divide over these 2 replicas"):
        inputs.check_resume({"global_batch": 9})


def test_a_resume_on_another_number_of_hosts_is_refused(shards):
    with pytest.raises(LmshardsError, match="with 2 input pipelines .* Resume it on 2 hosts"):
        plan(shards, 2).check_resume({"global_batch": GLOBAL_BATCH, "input_pipelines": 2})


# ---------------------------------------------------------------- whole runs, stopped and resumed elsewhere

RUN_STEPS = 6
CHECKPOINT_EVERY = 2


def train_argv(
    shards: str, run: Path, *, backend: str, devices: int, family: str = "roberta"
) -> list[str]:
    return [
        "--backend",
        backend,
        "--model_family",
        family,
        "--shards",
        shards,
        "--output",
        str(run),
        "--steps",
        str(RUN_STEPS),
        "--per_replica_batch",
        str(GLOBAL_BATCH // devices),
        "--learning_rate",
        "1e-3",
        "--warmup_steps",
        "2",
        "--log_every",
        "1",
        "--checkpoint_every",
        str(CHECKPOINT_EVERY),
        "--eval_every",
        str(RUN_STEPS),
        "--eval_batches",
        "2",
        "--steps_per_execution",
        "1",
        "--seed",
        "3",
        "--shuffle_buffer",
        "64",
    ]


TF_DEVICES = """
import sys, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * {devices})
from lmshards.train.commands.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_train(
    shards: str, run: Path, *, backend: str, devices: int, family: str = "roberta"
) -> str:
    """Runs `lmshards train` on `devices` CPU devices; returns its stderr."""
    from tests.helpers.jax_subprocess import REPO, jax_env

    argv = train_argv(shards, run, backend=backend, devices=devices, family=family)
    if backend == "jax":
        cmd, env = [sys.executable, "-m", "lmshards", "train", *argv], jax_env(devices)
    else:
        code = TF_DEVICES.format(devices=devices)
        cmd, env = [sys.executable, "-c", code, "--strategy", "mirrored", *argv], None
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def losses(run: Path) -> dict[tuple[int, str], float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key in ("loss", "eval_loss", "final_eval_loss"):
            if key in record:
                out[record["step"], key] = record[key]
    return out


def stopped_copy(run: Path, to: Path, *, backend: str, step: int) -> Path:
    """The run as it was after its checkpoint at `step`: later checkpoints and the summary removed."""
    shutil.copytree(run, to)
    (to / "run_summary.json").unlink()
    for path in (to / "checkpoints").glob("ckpt-*"):
        if int(re.match(r"ckpt-(\d+)", path.name)[1]) > step:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    if backend == "tensorflow":
        (to / "checkpoints" / "checkpoint").write_text(
            f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n'
        )
    return to


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "family"), [("jax", "roberta"), ("tensorflow", "roberta"), ("jax", "modernbert")]
)
def test_a_run_stopped_on_4_devices_resumes_exactly_on_2_and_back(
    shards, tmp_path, backend, family
):
    """4 devices to step 2, then 2 devices to step 4, then 4 devices again: the losses of a run on 4 throughout
    (the final evaluations too, so the last weights are the same)."""
    if backend == "jax":
        pytest.importorskip("jax")
    whole = tmp_path / "whole-4"
    run_train(shards, whole, backend=backend, devices=4, family=family)
    assert json.loads((whole / "run_config.json").read_text())["model"]["family"] == family
    on_2 = stopped_copy(whole, tmp_path / "4-to-2", backend=backend, step=CHECKPOINT_EVERY)
    assert f"at step {CHECKPOINT_EVERY}." in run_train(
        shards, on_2, backend=backend, devices=2, family=family
    )
    back_on_4 = stopped_copy(on_2, tmp_path / "2-to-4", backend=backend, step=2 * CHECKPOINT_EVERY)
    assert f"at step {2 * CHECKPOINT_EVERY}." in run_train(
        shards, back_on_4, backend=backend, devices=4, family=family
    )
    want = losses(whole)
    assert len(want) > RUN_STEPS
    for resumed in (on_2, back_on_4):
        got = losses(resumed)
        assert sorted(got) == sorted(want)
        for key, value in want.items():
            assert got[key] == pytest.approx(value, abs=2e-5), (resumed.name, key)


DROPOUT_PROGRAM = """
import json, sys
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
import keras
from lmshards.train.backends import tensorflow_dropout
one_replica = {}
for shape in ([8, 5, 3], [8, 3, 3]):  # replica draws that start on and inside a counter block
    one_replica[str(shape)] = keras.random.dropout(tf.ones(shape), 0.3, seed=keras.random.SeedGenerator(5)).numpy()
tensorflow_dropout.install()
same = []
for replicas in (1, 2, 4):
    strategy = tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(replicas)], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    for shape in ([8, 5, 3], [8, 3, 3]):
        rows = 8 // replicas
        with strategy.scope():
            seeds = keras.random.SeedGenerator(5)
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.ones([rows, *shape[1:]])
        )
        step = tf.function(lambda v: strategy.run(lambda t: keras.random.dropout(t, 0.3, seed=seeds), args=(v,)))
        masks = np.concatenate([t.numpy() for t in strategy.experimental_local_results(step(values))])
        same.append(bool(np.array_equal(masks, one_replica[str(shape)])))
print(json.dumps(same))
"""


@pytest.mark.slow
def test_tensorflow_dropout_masks_of_a_row_do_not_depend_on_the_replicas():
    from tests.helpers.jax_subprocess import REPO

    done = subprocess.run(
        [sys.executable, "-c", DROPOUT_PROGRAM],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [True] * 6
