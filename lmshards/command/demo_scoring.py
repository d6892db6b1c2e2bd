"""The demo's scorer: the exported model (PyTorch, transformers) and always-the-most-frequent-token on one seeded
masking of the validation split, every chosen position replaced by the mask token, as fill-mask sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmshards.command.report import maskable, most_frequent_token
from lmshards.plumbing.errors import LmshardsError
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS, TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.manifest import read_manifest
from lmshards.schemas.reading import read_split

# One fixed draw of positions, the same on every run.
EVAL_MASK_PROBABILITY = 0.15
EVAL_MASK_SEED = 0
EVAL_BATCH = 32
IGNORE_LABEL = -100
RATIO_TARGET = 2.0  # the model must beat always-the-most-frequent-token by this factor


@dataclass(frozen=True)
class MaskedSet:
    """Validation records with some positions replaced by the mask id: int64 [records, seq_len] each."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    labels: np.ndarray  # the original id at each masked position, IGNORE_LABEL elsewhere

    @property
    def masked(self) -> np.ndarray:
        return self.labels != IGNORE_LABEL


@dataclass(frozen=True)
class Scores:
    """The exported model and the most-frequent-token baseline on the same masked validation tokens."""

    eval_loss: float  # mean cross-entropy, nats
    eval_accuracy: float
    baseline_accuracy: float
    baseline_token_id: int
    baseline_token: str
    masked_tokens: int
    validation_records: int

    @property
    def ratio(self) -> float:
        return (
            self.eval_accuracy / self.baseline_accuracy if self.baseline_accuracy else float("inf")
        )

    @property
    def target_met(self) -> bool:
        return self.ratio >= RATIO_TARGET


def mask_records(
    records: dict[str, np.ndarray],
    *,
    special_ids: Sequence[int],
    mask_id: int,
    probability: float,
    seed: int,
) -> MaskedSet:
    """Each maskable token is masked with `probability`, from a fixed seed: the same set on every run."""
    ids, attention = records[INPUT_IDS], records[ATTENTION_MASK]
    rng = np.random.default_rng(seed)
    chosen = (rng.random(ids.shape) < probability) & maskable(ids, attention, special_ids)
    return MaskedSet(
        input_ids=np.where(chosen, mask_id, ids),
        attention_mask=attention,
        labels=np.where(chosen, ids, IGNORE_LABEL),
    )


def baseline_accuracy(masked: MaskedSet, token_id: int) -> float:
    """Accuracy of predicting token_id at every masked position."""
    return float(np.mean(masked.labels[masked.masked] == token_id))


def score_export(model_dir: Path, masked: MaskedSet) -> tuple[float, float]:
    """(mean cross-entropy in nats, accuracy) of an exported transformers model at the masked positions."""
    import torch
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(str(model_dir)).eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(masked.labels), EVAL_BATCH):
            rows = slice(start, start + EVAL_BATCH)
            logits = model(
                input_ids=torch.from_numpy(masked.input_ids[rows]),
                attention_mask=torch.from_numpy(masked.attention_mask[rows]),
            ).logits
            where = torch.from_numpy(masked.masked[rows])
            picked, labels = logits[where].float(), torch.from_numpy(masked.labels[rows])[where]
            loss_sum += float(torch.nn.functional.cross_entropy(picked, labels, reduction="sum"))
            correct += int((picked.argmax(-1) == labels).sum())
    count = int(masked.masked.sum())
    return loss_sum / count, correct / count


def score(out: Path) -> Scores:
    """The exported model and the most-frequent-train-token baseline on one seeded masking of the validation split."""
    from transformers import AutoTokenizer

    manifest = read_manifest(str(out / "shards"))
    tokenizer = manifest.tokenizer
    special = list(tokenizer.never_masked_ids)
    train = read_split(manifest, str(out / "shards"), TRAIN_SPLIT)
    top = most_frequent_token(train[INPUT_IDS], train[ATTENTION_MASK], special)
    validation = read_split(manifest, str(out / "shards"), VALIDATION_SPLIT)
    masked = mask_records(
        validation,
        special_ids=special,
        mask_id=tokenizer.special_token_ids["mask"],
        probability=EVAL_MASK_PROBABILITY,
        seed=EVAL_MASK_SEED,
    )
    if not masked.masked.any():
        raise LmshardsError(
            f"The validation split in {out / 'shards'} has no token to mask; use a larger corpus."
        )
    loss, accuracy = score_export(out / "hf_model", masked)
    top_text = str(AutoTokenizer.from_pretrained(str(out / "hf_model")).decode([top]))
    return Scores(
        eval_loss=loss,
        eval_accuracy=accuracy,
        baseline_accuracy=baseline_accuracy(masked, top),
        baseline_token_id=top,
        baseline_token=top_text,
        masked_tokens=int(masked.masked.sum()),
        validation_records=len(masked.labels),
    )
