"""The network: a keras-hub RobertaMaskedLM or BertMaskedLM built from configuration only (no downloads)."""

from __future__ import annotations

import json
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras_hub  # noqa: E402  (the backend must be chosen before keras is imported)
import tensorflow as tf  # noqa: E402

from schemas import fs  # noqa: E402
from schemas.errors import LmshardsError  # noqa: E402
from train.config import CHECKPOINTS_DIR, RUN_CONFIG_JSON, ModelConfig, model_config_from_dict  # noqa: E402

_CLASSES = {
    "roberta": (keras_hub.models.RobertaBackbone, keras_hub.models.RobertaMaskedLM),
    "bert": (keras_hub.models.BertBackbone, keras_hub.models.BertMaskedLM),
}


def build_masked_lm(model_config: ModelConfig) -> keras_hub.models.MaskedLM:
    """A freshly initialised masked LM (backbone + MLM head, preprocessor=None).

    Inputs: `token_ids`, `padding_mask` (int32 [batch, seq]; int32 because a bool mask fails under
    MirroredStrategy), `segment_ids` for BERT, and `mask_positions` (int32 [batch, max_predictions]).
    Output: logits [batch, max_predictions, vocabulary_size].
    """
    backbone_cls, task_cls = _CLASSES[model_config.family]
    backbone = backbone_cls(
        vocabulary_size=model_config.vocabulary_size,
        num_layers=model_config.num_layers,
        num_heads=model_config.num_heads,
        hidden_dim=model_config.hidden_dim,
        intermediate_dim=model_config.intermediate_dim,
        dropout=model_config.dropout,
        max_sequence_length=model_config.max_sequence_length,
    )
    masked_lm = task_cls(backbone=backbone, preprocessor=None)
    if model_config.family == "bert":
        match_head_to_encoder(masked_lm)
    return masked_lm


def match_head_to_encoder(masked_lm: keras_hub.models.MaskedLM) -> None:
    """Makes BertMaskedLM's head use the encoder's activation and layer-norm epsilon, as BERT does.

    keras-hub's BERT encoder uses tanh-approximate GELU and epsilon 1e-12 but builds its MLM head with
    exact GELU and 1e-5; transformers' BertForMaskedLM (like the original BERT) uses the encoder's for
    both. Matching them lets `lmshards export` reproduce the trained model's logits exactly. Both are
    read at call time, so setting them before the first step changes no weight shape.
    """
    encoder = masked_lm.backbone.transformer_layers[0]
    head = masked_lm.masked_lm_head
    head.intermediate_activation = head._intermediate_dense.activation = encoder.activation
    head.layer_norm_epsilon = head._intermediate_layer_norm.epsilon = encoder.layer_norm_epsilon


def checkpoint_root(model: keras_hub.models.MaskedLM, **extra) -> tf.train.Checkpoint:
    """The object graph every run checkpoint uses: `model` plus the trainer's `extra` objects.

    keras layers do not track their dropout SeedGenerator states, so they are saved explicitly:
    without them a resumed run would draw different dropout masks than an uninterrupted one.
    """
    seeds = [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]
    return tf.train.Checkpoint(model=model, dropout_seeds=seeds, **extra)


def read_run_config(run_dir: str) -> dict:
    path = fs.join(run_dir, RUN_CONFIG_JSON)
    if not fs.exists(path):
        raise LmshardsError(f"No {RUN_CONFIG_JSON} in {run_dir!r}: not a training run directory (`lmshards train --output DIR`).")
    return json.loads(fs.read_text(path))


def load_model_from_run(run_dir: str, checkpoint: str | None = None) -> tuple[keras_hub.models.MaskedLM, ModelConfig]:
    """Rebuilds a run's model and restores its weights (not the optimizer) from a checkpoint.

    `checkpoint` is a checkpoint prefix (e.g. `RUN_DIR/checkpoints/ckpt-3`); None means the latest.

    Raises:
      LmshardsError: not a run directory, or it holds no complete checkpoint.
    """
    model_config = model_config_from_dict(read_run_config(run_dir)["model"], source=fs.join(run_dir, RUN_CONFIG_JSON))
    if checkpoint is None:
        checkpoint = tf.train.latest_checkpoint(fs.join(run_dir, CHECKPOINTS_DIR))
        if checkpoint is None:
            raise LmshardsError(f"No complete checkpoint under {fs.join(run_dir, CHECKPOINTS_DIR)!r}; train longer than --checkpoint_every steps.")
    elif not tf.io.gfile.exists(checkpoint + ".index"):
        raise LmshardsError(f"Checkpoint {checkpoint!r} is missing or incomplete (no {checkpoint}.index).")
    model = build_masked_lm(model_config)
    checkpoint_root(model).restore(checkpoint).expect_partial().assert_existing_objects_matched()
    return model, model_config
