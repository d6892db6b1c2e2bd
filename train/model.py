"""The network: the model family's keras-hub masked LM, built from configuration only (no downloads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras_hub

from plumbing import fs
from plumbing.errors import LmshardsError
from schemas.constants import SEGMENT_IDS
from train.backends import jax_checkpoint
from train.backends.registry import JAX
from train.config import ModelConfig, model_config_from_dict
from train.families import ModelFamily, check_packed_support, get_family
from train.run_dir import RunDir

if TYPE_CHECKING:
    import tensorflow as tf


def keras_hub_classes(family: ModelFamily) -> tuple[type, type]:
    """(backbone class, masked LM class) that `family` names in keras_hub.models."""
    return getattr(keras_hub.models, family.keras_backbone), getattr(
        keras_hub.models, family.keras_masked_lm
    )


def packed_backbone_class(family: ModelFamily) -> type:
    """The family's backbone for packed blocks (train.families.packed). Raises LmshardsError if it has none."""
    check_packed_support(family, "the shard set")
    from train.families import packed

    return getattr(packed, str(family.keras_packed_backbone))


def build_masked_lm(
    model_config: ModelConfig, *, packed: bool = False
) -> keras_hub.models.MaskedLM:
    """A freshly initialised masked LM (backbone + MLM head, preprocessor=None) of the config's family.

    Inputs: `token_ids`, `padding_mask` (int32 [batch, seq]; int32 because a bool mask fails under
    MirroredStrategy), `segment_ids` when the family uses them, and `mask_positions` (int32
    [batch, max_predictions]). Output: logits [batch, max_predictions, vocabulary_size].
    packed: for packed blocks: `attention_segment_ids` and `position_ids` instead of `padding_mask`
    (train.families.packed); the variables are the same as without.
    """
    family = get_family(model_config.family)
    backbone_cls, masked_lm_cls = keras_hub_classes(family)
    if packed:
        backbone_cls = packed_backbone_class(family)
    backbone = backbone_cls(
        vocabulary_size=model_config.vocabulary_size,
        num_layers=model_config.num_layers,
        num_heads=model_config.num_heads,
        hidden_dim=model_config.hidden_dim,
        intermediate_dim=model_config.intermediate_dim,
        dropout=model_config.dropout,
        max_sequence_length=model_config.max_sequence_length,
    )
    masked_lm = masked_lm_cls(backbone=backbone, preprocessor=None)
    set_numerics(masked_lm, model_config)
    if family.match_head_to_encoder:
        match_head_to_encoder(masked_lm)
    return masked_lm


def set_numerics(masked_lm: keras_hub.models.MaskedLM, model_config: ModelConfig) -> None:
    """Gives the encoder the config's activation and every layer norm its epsilon, where the config sets them.

    A model taken from transformers (--init_from, a config.json as --model_config) computes with its
    hidden_act and layer_norm_eps, which may not be keras-hub's defaults (keras-hub's BERT uses tanh-GELU
    where bert-base uses exact GELU). Like match_head_to_encoder, both are read at call time.
    """
    backbone = masked_lm.backbone
    if model_config.activation is not None:
        activation = _keras_activation(model_config.activation)
        for layer in backbone.transformer_layers:
            layer.activation = layer._feedforward_intermediate_dense.activation = activation
    epsilon = model_config.layer_norm_epsilon
    if epsilon is not None:
        norms = [backbone.embeddings_layer_norm, masked_lm.masked_lm_head._intermediate_layer_norm]
        for layer in backbone.transformer_layers:
            layer.layer_norm_epsilon = epsilon
            norms += [layer._self_attention_layer_norm, layer._feedforward_layer_norm]
        for norm in norms:
            norm.epsilon = epsilon
        masked_lm.masked_lm_head.layer_norm_epsilon = epsilon


def _keras_activation(name: str):
    """keras-hub's function for an activation name of train.hf_mapping.HF_ACTIVATIONS."""
    if name == "gelu_approximate":
        from keras_hub.src.utils.keras_utils import gelu_approximate

        return gelu_approximate
    import keras

    return keras.activations.get(name)


def match_head_to_encoder(masked_lm: keras_hub.models.MaskedLM) -> None:
    """Makes the MLM head use the encoder's activation and layer-norm epsilon.

    For families whose transformers head computes with the encoder's (ModelFamily.match_head_to_encoder),
    this lets `lmshards export` reproduce the trained model's logits exactly. Both are read at call
    time, so setting them before the first step changes no weight shape.
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
    import tensorflow as tf  # here, not above: building a model must not need TensorFlow (JAX backend)

    seeds = [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]
    return tf.train.Checkpoint(model=model, dropout_seeds=seeds, **extra)


def load_model_from_run(
    run_dir: str, checkpoint: str | None = None
) -> tuple[keras_hub.models.MaskedLM, ModelConfig]:
    """Rebuilds a run's model and restores its weights (not the optimizer) from a checkpoint (restore_model_from_run)."""
    model, model_config, _ = restore_model_from_run(run_dir, checkpoint)
    return model, model_config


def restore_model_from_run(
    run_dir: str, checkpoint: str | None = None
) -> tuple[keras_hub.models.MaskedLM, ModelConfig, str]:
    """Rebuilds a run's model and restores its weights (not the optimizer) from a checkpoint; returns its path too.

    Reads the checkpoints of the backend the run was trained with (run_config.json), in any Keras
    backend. A run trained on packed blocks gets its packed model back (the same variables). `checkpoint` is a checkpoint prefix (e.g. `RUN_DIR/checkpoints/ckpt-3`, or a JAX run's
    `ckpt-3.npz`); None means the newest one that restores (a damaged newer one is skipped with a warning).

    Raises:
      LmshardsError: not a run directory, a damaged run_config.json, no checkpoint that restores, or a
        named checkpoint that is missing or does not restore.
    """
    run = RunDir(run_dir)
    run_config = run.read_config()
    model_config = model_config_from_dict(run_config["model"], source=run.config_path)
    model = build_masked_lm(model_config, packed=SEGMENT_IDS in run_config.get("features", {}))
    if run_config.get("train", {}).get("backend") == JAX:
        path = _restore_jax_weights(model, run.checkpoints, checkpoint)
    else:
        path = _restore_tensorflow_weights(model, run.checkpoints, checkpoint)
    return model, model_config, path


def _no_checkpoint(directory: str) -> LmshardsError:
    return LmshardsError(
        f"No complete checkpoint under {directory!r}; train longer than --checkpoint_every steps."
    )


def _restore_jax_weights(
    model: keras_hub.models.MaskedLM, directory: str, checkpoint: str | None
) -> str:
    like = jax_checkpoint.variable_specs(model)
    if checkpoint is None:
        restored = jax_checkpoint.restore_newest(directory, like=like)
        if restored is None:
            raise _no_checkpoint(directory)
        path, arrays = restored
    else:
        path = (
            checkpoint
            if checkpoint.endswith(jax_checkpoint.SUFFIX)
            else checkpoint + jax_checkpoint.SUFFIX
        )
        if not fs.exists(path):
            raise LmshardsError(f"Checkpoint {checkpoint!r} is missing (no {path}).")
        try:
            arrays = jax_checkpoint.load(path, like=like)
        except Exception as e:  # damaged: BadZipFile, a CRC mismatch, arrays of another model, ...
            raise LmshardsError(
                f"Checkpoint {checkpoint!r} does not restore ({e}); pass another --checkpoint."
            ) from e
    jax_checkpoint.assign_arrays(model, None, arrays)
    return path


def _restore_tensorflow_weights(
    model: keras_hub.models.MaskedLM, directory: str, checkpoint: str | None
) -> str:
    import tensorflow as tf  # see checkpoint_root

    from train.checkpoint import restore_newest

    if checkpoint is None:
        path = restore_newest(checkpoint_root(model), directory, expect_partial=True)
        if path is None:
            raise _no_checkpoint(directory)
        return path
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise LmshardsError(
            f"Checkpoint {checkpoint!r} is missing or incomplete (no {checkpoint}.index)."
        )
    try:
        checkpoint_root(model).restore(
            checkpoint
        ).expect_partial().assert_existing_objects_matched()
    except Exception as e:  # damaged: DataLossError, a short read, ...
        raise LmshardsError(
            f"Checkpoint {checkpoint!r} does not restore ({e}); pass another --checkpoint."
        ) from e
    return checkpoint
