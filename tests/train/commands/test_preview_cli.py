"""`lmshards preview`: the first training sequences through the trainer's own pipeline, with their selected tokens shown."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tokenizers import Tokenizer  # noqa: E402

from lmshards.schemas.constants import TOKENIZER_JSON  # noqa: E402
from lmshards.schemas.tokenizer_info import locate_tokenizer  # noqa: E402
from lmshards.train.commands import preview_cli  # noqa: E402
from lmshards.train.inputs import data, mixture  # noqa: E402
from lmshards.train.inputs.shard_set_tokenizer import run_tokenizer  # noqa: E402
from tests.conftest import REPO, SAMPLE_DIR  # noqa: E402
from tests.helpers.shard_factory import carry_tokenizer, write_sample_shards  # noqa: E402

SEQ_LEN = 32
BATCH = 8
N = 20  # two and a half batches


@pytest.fixture(scope="module")
def sets(tmp_path_factory, sample_tokenizer) -> tuple[str, str]:
    """Two shard sets of the sample corpus that carry their tokenizer: English and Chinese."""
    root = tmp_path_factory.mktemp("preview")
    paths = []
    for language in ("en", "zh"):
        out = root / language
        write_sample_shards(
            out,
            sample_tokenizer,
            sorted(SAMPLE_DIR.glob(f"{language}/*.txt")),
            seq_len=SEQ_LEN,
            train_shards=4,
            validation_shards=2,
            max_lines_per_file=60,
        )
        carry_tokenizer(out, sample_tokenizer)
        paths.append(str(out))
    return tuple(paths)


def preview_json(capsys, *argv: str) -> list[dict]:
    assert (
        preview_cli.main(
            [
                *argv,
                "--json",
                "--n",
                str(N),
                "--per_replica_batch",
                str(BATCH),
                "--shuffle_buffer",
                "64",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines()]


def trainer_batches(
    shards: list[str], weights: tuple[float, ...], *, recipe: str, p: float, seed: int
) -> list[dict]:
    """What the trainer's input pipeline yields on one host for these options, built as lmshards/train/loop/trainer.py builds it."""
    mix = mixture.open_mixture(shards, weights)
    passes = mixture.pass_records(mix, num_pipelines=1, unit=BATCH)
    masking = data.masking_spec(
        mix.manifest, recipe=recipe, mlm_probability=p, tokenizer=run_tokenizer(None, mix)
    )
    ds = data.train_dataset(
        mixture.pipeline_streams(mix, passes, num_pipelines=1, pipeline_id=0),
        block_counts=mix.block_counts(),
        features=mix.manifest.features(),
        batch_size=BATCH,
        shuffle_buffer=64,
        seed=seed,
        start_step=0,
        masking=masking,
        with_segment_ids=False,
    )
    return [{k: v.numpy() for k, v in b.items()} for b in ds.take(-(-N // BATCH))]


@pytest.mark.parametrize(
    "sets_used, recipe, p, seed",
    [
        ((0,), "whole_word", 0.3, 7),
        ((0, 1), "span", 0.2, 3),  # a 0.5/0.5 mixture
    ],
)
def test_preview_shows_exactly_what_the_trainer_reads(capsys, sets, sets_used, recipe, p, seed):
    shards = [sets[i] for i in sets_used]
    rows = preview_json(
        capsys, *shards, "--masking", recipe, "--mlm_probability", str(p), "--seed", str(seed)
    )
    assert len(rows) == N and [r["index"] for r in rows] == list(range(N))
    batches = trainer_batches(shards, (1.0,) * len(shards), recipe=recipe, p=p, seed=seed)
    masked = np.concatenate([b["token_ids"] for b in batches])
    selected = np.zeros_like(masked)
    for i, b in enumerate(batches):
        rows_, slots = np.nonzero(b["mask_weights"] > 0)
        selected[rows_ + i * BATCH, b["mask_positions"][rows_, slots]] = 1
    masked, selected = masked[:N], selected[:N]
    np.testing.assert_array_equal([r["selected"] for r in rows], selected)
    np.testing.assert_array_equal([r["masked_input_ids"] for r in rows], masked)
    ids = np.array([r["input_ids"] for r in rows])
    np.testing.assert_array_equal(
        ids[selected == 0], masked[selected == 0]
    )  # only selected positions change
    assert selected.sum() > 0
    # The rows are stored records, from the set the mixture chose.
    stored = {}
    for shard_set in mixture.open_mixture(shards).sets:
        for record in tf.data.TFRecordDataset(
            list(shard_set.files("train").paths)
        ).as_numpy_iterator():
            features = tf.io.parse_single_example(
                record, {"input_ids": tf.io.FixedLenFeature([SEQ_LEN], tf.int64)}
            )
            stored[tuple(features["input_ids"].numpy())] = shard_set.name
    assert [stored[tuple(r)] for r in ids] == [r["set"] for r in rows]
    if len(shards) > 1:
        assert {r["set"] for r in rows} == {"en", "zh"}


def test_text_marks_each_run_of_selected_tokens(capsys, sets, sample_tokenizer):
    assert (
        preview_cli.main(
            [
                sets[0],
                "--masking",
                "span",
                "--mlm_probability",
                "0.4",
                "--n",
                "3",
                "--per_replica_batch",
                str(BATCH),
                "--shuffle_buffer",
                "64",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    rows = preview_json(capsys, sets[0], "--masking", "span", "--mlm_probability", "0.4")[:3]
    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    blocks = text.strip().split("\n\n")
    assert len(blocks) == 3
    for block, row in zip(blocks, rows):
        header, body = block.split("\n", 1)
        selected = np.array(row["selected"])
        assert header.startswith(
            f"sequence {row['index']} (set en): {selected.sum()} of {SEQ_LEN} tokens selected ("
        )
        runs = int(selected[0]) + int((np.diff(selected) == 1).sum())
        assert (
            body.count(preview_cli.SELECTED_OPEN) == runs == body.count(preview_cli.SELECTED_CLOSE)
        )
        plain = body.replace(preview_cli.SELECTED_OPEN, "").replace(preview_cli.SELECTED_CLOSE, "")
        assert plain == tokenizer.decode(row["input_ids"], skip_special_tokens=False)


def test_marked_text_uses_decoded_prefixes():
    def decode(ids):  # a word per id, separated by spaces, like a Metaspace or byte-level decoder
        return " ".join(f"w{i}" for i in ids)

    assert (
        preview_cli.marked_text([1, 2, 3, 4, 5], [0, 1, 1, 0, 1], decode)
        == "w1[[ w2 w3]] w4[[ w5]]"
    )
    assert preview_cli.marked_text([1, 2], [1, 1], decode) == "[[w1 w2]]"


def test_a_word_recipe_needs_a_tokenizer(capsys, sample_tokenizer, tmp_path):
    bare = tmp_path / "bare"
    write_sample_shards(
        bare,
        sample_tokenizer,
        sorted(SAMPLE_DIR.glob("en/*.txt")),
        seq_len=SEQ_LEN,
        max_lines_per_file=20,
    )
    assert preview_cli.main([str(bare), "--masking", "whole_word"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "lmshards preview: error: --masking whole_word finds words with the tokenizer"
    )
    assert "--tokenizer PATH" in err
    # Given a tokenizer, the same set previews; token-level masking needs none.
    assert (
        preview_cli.main(
            [str(bare), "--masking", "whole_word", "--tokenizer", str(sample_tokenizer), "--n", "1"]
        )
        == 0
    )
    assert preview_cli.main([str(bare), "--n", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert len(row["input_ids"]) == len(row["selected"]) == SEQ_LEN


CHECK_WITHOUT_TENSORFLOW = """
import sys
from lmshards.train.commands import preview_cli
code = preview_cli.main(sys.argv[1:])
assert "tensorflow" not in sys.modules, "TensorFlow was imported"
sys.exit(code)
"""


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--masking", "span", "--mlm_probability", "0.85"],
            "--mlm_probability 0.85 must be above 0 and below 0.79 for --masking span",
        ),
        (["--n", "0"], "argument --n: '0' is not a whole number in [1, 10000]"),
    ],
)
def test_options_are_checked_before_tensorflow_loads(sets, argv, message):
    done = subprocess.run(
        [sys.executable, "-c", CHECK_WITHOUT_TENSORFLOW, sets[0], *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"lmshards preview: error: {message}")


def test_tokenizer_of_another_fingerprint_is_refused(capsys, sets, tmp_path):
    other = json.loads(locate_tokenizer(sets[0] + "/tokenizer").json_text)
    other["model"]["vocab"]["zzz-not-in-the-original"] = len(other["model"]["vocab"])
    (tmp_path / TOKENIZER_JSON).write_text(json.dumps(other))
    assert preview_cli.main([sets[0], "--tokenizer", str(tmp_path / TOKENIZER_JSON)]) == 2
    assert "has fingerprint sha256:" in capsys.readouterr().err
