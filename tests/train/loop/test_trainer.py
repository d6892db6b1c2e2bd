"""The trainer's small pieces: the schedule a rerun trains with, readable pipeline errors, progress formatting."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from lmshards.plumbing.errors import LmshardsError  # noqa: E402
from lmshards.train.inputs import data, mixture  # noqa: E402
from lmshards.train.inputs.input_plan import InputPlan  # noqa: E402
from lmshards.train.loop.trainer import check_precision_change  # noqa: E402
from lmshards.train.optim import WarmupDecay, continue_schedule  # noqa: E402
from tests.helpers.shard_factory import tokenizer_info_for, write_shards  # noqa: E402

SCHEDULE = WarmupDecay(peak=1e-3, warmup_steps=10, total_steps=100)


def test_the_same_length_keeps_the_runs_schedule():
    assert continue_schedule(SCHEDULE, total_steps=100, start_step=40, extend=False) is SCHEDULE
    assert continue_schedule(SCHEDULE, total_steps=100, start_step=40, extend=True) is SCHEDULE


def test_another_length_needs_extend_and_more_steps():
    with pytest.raises(
        LmshardsError,
        match="trains 150 steps in all but the run's schedule, fixed by its first command, ends at step 100",
    ):
        continue_schedule(SCHEDULE, total_steps=150, start_step=40, extend=False)
    with pytest.raises(
        LmshardsError, match=r"--extend needs more steps than the run's schedule has \(100\)"
    ):
        continue_schedule(SCHEDULE, total_steps=80, start_step=40, extend=True)
    with pytest.raises(LmshardsError, match="at step 100 this run's rate has already fallen to 0"):
        continue_schedule(SCHEDULE, total_steps=150, start_step=100, extend=True)
    extended = continue_schedule(SCHEDULE, total_steps=150, start_step=40, extend=True)
    assert extended.end_step == 150 and float(extended(40)) == pytest.approx(float(SCHEDULE(40)))


def test_resuming_across_loss_scaling_is_refused():
    check_precision_change(None, "mixed_float16")
    check_precision_change({"resolved": {"precision": "float32"}}, "mixed_bfloat16")
    with pytest.raises(
        LmshardsError,
        match="trained with precision mixed_float16 .* Pass --precision mixed_float16",
    ):
        check_precision_change({"resolved": {"precision": "mixed_float16"}}, "float32")


def test_an_out_of_vocabulary_assertion_becomes_an_error_naming_the_manifest(
    tmp_path, sample_tokenizer
):
    info = tokenizer_info_for(str(sample_tokenizer))
    ids = np.full((4, 8), 7, np.int64)
    write_shards(
        tmp_path, {"train": (ids, np.ones_like(ids), 1)}, seq_len=8, tokenizer=info, inputs=()
    )
    mix = mixture.open_mixture([str(tmp_path)])
    masking = data.masking_spec(mix.manifest, recipe="token", mlm_probability=0.15, tokenizer=None)
    inputs = InputPlan.create(mix, masking=masking, per_replica_batch=2, seed=0, shuffle_buffer=4)
    with pytest.raises(LmshardsError) as error:
        with inputs.readable_errors(()):
            tf.debugging.assert_less(
                tf.constant(5000), tf.constant(2000), message=data.ID_OUT_OF_VOCABULARY
            )
    assert str(error.value).startswith(
        f"The shards hold token ids of 2000 or more, but {str(tmp_path / 'manifest.json')!r} says the tokenizer has "
        "vocab_size 2000"
    )
    with pytest.raises(tf.errors.InvalidArgumentError):  # any other error stays what it is
        with inputs.readable_errors(()):
            tf.debugging.assert_less(tf.constant(5), tf.constant(2), message="something else")


def test_a_new_rate_restarts_only_a_schedule_that_has_ended():
    with pytest.raises(LmshardsError, match="Pass a new --learning_rate"):
        continue_schedule(SCHEDULE, total_steps=150, start_step=100, extend=True)
    with pytest.raises(
        LmshardsError, match="a new rate starts only once the run's schedule has ended"
    ):
        continue_schedule(SCHEDULE, total_steps=150, start_step=40, extend=True, new_peak=2e-3)
    restarted = continue_schedule(
        SCHEDULE, total_steps=150, start_step=100, extend=True, new_peak=2e-3, warmup_steps=10
    )
    rates = [float(restarted(s)) for s in (40, 100, 105, 110, 130, 150)]
    assert rates[0] == pytest.approx(float(SCHEDULE(40)))  # the run's own steps keep their rates
    assert rates[1:] == pytest.approx([0.0, 1e-3, 2e-3, 2e-3 * 0.5, 0.0])
    again = WarmupDecay.from_config(restarted.get_config())  # what run_config.json keeps
    assert [float(again(s)) for s in range(0, 151, 5)] == [
        float(restarted(s)) for s in range(0, 151, 5)
    ]
    default_warmup = continue_schedule(
        SCHEDULE, total_steps=200, start_step=100, extend=True, new_peak=2e-3
    )
    assert default_warmup.extensions[-1].warmup_steps == 5  # 5% of the added steps
