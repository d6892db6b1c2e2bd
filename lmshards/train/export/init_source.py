"""`lmshards train --init_from PATH`: the weights a new run starts from, read and checked before training.

PATH is a Hugging Face model directory (config.json with model.safetensors or pytorch_model.bin, of a
family in lmshards/train/families, as transformers or `lmshards export` writes it) or an lmshards run directory.
Everything that can be checked without TensorFlow is checked in preflight (inspect_init_source,
check_model_options, check_source_fits_shards): a directory that is not a model, another family, a
sharded or missing weights file, a run without checkpoints, a tokenizer or position table that does not
fit the shards. A Hugging Face model's weights are read and mapped there too (numpy only); a run's
checkpoint is restored by the trainer once the backend has connected, before it builds the run's model
(load_init_weights).

The weights arrive named as lmshards.train.network.hf_mapping.keras_weight_names lists them, so the backends assign them
to their freshly built model the same way (lmshards.train.network.keras_weights.assign_keras_weights).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import posixpath
import re
from typing import Any

import numpy as np

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import LmshardsError, TokenizerError
from lmshards.schemas.constants import (
    MODEL_CONFIG_JSON,
    MODEL_PYTORCH_BIN,
    MODEL_SAFETENSORS,
    MODEL_WEIGHTS_FILES,
    RUN_CONFIG_JSON,
)
from lmshards.schemas.layouts import CHECKPOINTS_DIR
from lmshards.schemas.manifest import Manifest
from lmshards.schemas.tokenizer_info import (
    TokenizerSource,
    fingerprint,
    locate_tokenizer,
    special_token_ids,
)
from lmshards.train.backend_names import TENSORFLOW, entry, title
from lmshards.train.config import (
    ModelConfig,
    TrainConfig,
    model_config_from_dict,
    preset_config,
)
from lmshards.train.families import get_family
from lmshards.train.network.config_files import read_model_config
from lmshards.train.network.hf_mapping import (
    KERAS_BERT_SEGMENTS,
    MaskedLMSpec,
    UnsupportedHfModel,
    has_hf_head,
    keras_weights_from_hf,
    model_fields_from_hf,
)
from lmshards.train.run_dir import RunDir, read_json_object

log = logging.getLogger(__name__)

SHARDED_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
HUGGING_FACE = "huggingface"
RUN = "run"
# A checkpoint of either backend, by file name: TensorFlow's ckpt-N.index, JAX's ckpt-N.npz.
_CHECKPOINT_FILE_RE = re.compile(r"^ckpt-\d+\.(index|npz)$")
_EXPORT_HINT = (
    "Install the export extra to read Hugging Face weights: pip install 'lmshards[export]'."
)


@dataclasses.dataclass(frozen=True)
class InitSource:
    """What --init_from names, as far as preflight can tell without TensorFlow.

    special_token_ids: the role ids the source was trained with (its config.json's pad/bos/eos, its
    tokenizer's, or the run's); tokenizer: the tokenizer it carries, if any; weights: for a Hugging
    Face model, its weights already mapped to Keras names (None for a run: the trainer restores it).
    """

    path: str
    kind: str  # HUGGING_FACE or RUN
    model_config: ModelConfig
    special_token_ids: dict[str, int]
    tokenizer: TokenizerSource | None
    weights: InitWeights | None = None
    backend: str | None = None  # a run's backend (run_config.json)


@dataclasses.dataclass(frozen=True)
class InitWeights:
    """The source's weights named as keras_weight_names lists them (a bare model has no head.* ones)."""

    arrays: dict[str, np.ndarray]
    fingerprint: str  # weights_fingerprint(arrays)
    read_from: str  # the file or checkpoint they came from

    @property
    def has_head(self) -> bool:
        return "head.bias" in self.arrays


def weights_fingerprint(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the arrays' names, dtypes, shapes and bytes, in name order, as 'sha256:HEX'."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        digest.update(array.tobytes())
    return "sha256:" + digest.hexdigest()


def _refused(path: str, problem: str, fix: str) -> LmshardsError:
    return LmshardsError(f"--init_from {path!r} {problem}. {fix.rstrip('.')}.")


# ---------------------------------------------------------------- what the source is (preflight)


def inspect_init_source(path: str) -> InitSource:
    """Recognises PATH as a Hugging Face model directory or an lmshards run directory and reads what it is.

    Raises:
      LmshardsError: not a directory of either kind, an unsupported family, sharded or missing weights,
        weights that do not fit config.json, or a run without checkpoints.
    """
    if not fs.isdir(path):
        raise _refused(
            path,
            "is not a directory",
            "Pass a Hugging Face model directory (config.json + model.safetensors) or an lmshards run directory.",
        )
    if fs.exists(fs.join(path, RUN_CONFIG_JSON)):
        return _inspect_run(path)
    if fs.exists(fs.join(path, MODEL_CONFIG_JSON)):
        return _inspect_hf(path)
    raise _refused(
        path,
        f"is neither a Hugging Face model directory (no {MODEL_CONFIG_JSON}) nor an lmshards run directory "
        f"(no {RUN_CONFIG_JSON})",
        "Pass the directory `save_pretrained` or `lmshards export` wrote, or an `lmshards train --output`.",
    )


def _inspect_hf(path: str) -> InitSource:
    config_path = fs.join(path, MODEL_CONFIG_JSON)
    config = read_json_object(config_path, fix="Pass a directory `save_pretrained` wrote.")
    try:
        model_config = model_config_from_dict(model_fields_from_hf(config), source=config_path)
    except UnsupportedHfModel as e:
        raise _refused(
            path,
            f"is not a model lmshards can continue: {e}",
            "Pass a directory of a RobertaForMaskedLM, BertForMaskedLM or ModernBertForMaskedLM (or a bare model of one)",
        ) from e
    family = get_family(model_config.family)
    weights_file = _weights_file(path)
    state = read_hf_state_dict(weights_file)
    pad = _pad_id(config)
    try:
        arrays = keras_weights_from_hf(state, _mapping_spec(model_config), pad_token_id=pad)
    except UnsupportedHfModel as e:
        raise _refused(
            path,
            f"has weights that do not fit its {MODEL_CONFIG_JSON}: {e}",
            "Re-save the model with transformers' save_pretrained.",
        ) from e
    if not has_hf_head(state, family):
        log.info(
            "--init_from %s is a bare %s model without a masked-LM head: the head starts from random weights.",
            path,
            family.name,
        )
    roles = {"pad": pad} if config.get("pad_token_id") is not None else {}
    for alias, role in family.hf_token_aliases:
        value = config.get(f"{alias}_token_id")
        if isinstance(value, int):
            roles[role] = value
    tokenizer = _carried_tokenizer(path)
    if tokenizer is not None:
        roles.update(special_token_ids(tokenizer))
    return InitSource(
        path=path,
        kind=HUGGING_FACE,
        model_config=model_config,
        special_token_ids=roles,
        tokenizer=tokenizer,
        weights=InitWeights(arrays, weights_fingerprint(arrays), weights_file),
    )


def _mapping_spec(model_config: ModelConfig) -> MaskedLMSpec:
    """The spec keras_weights_from_hf reads the shapes from (activations and epsilons play no part there)."""
    activation = model_config.activation or "gelu"
    epsilon = model_config.layer_norm_epsilon or 1e-12
    return MaskedLMSpec(
        family=model_config.family,
        vocabulary_size=model_config.vocabulary_size,
        num_layers=model_config.num_layers,
        num_heads=model_config.num_heads,
        hidden_dim=model_config.hidden_dim,
        intermediate_dim=model_config.intermediate_dim,
        dropout=model_config.dropout,
        max_sequence_length=model_config.max_sequence_length,
        num_segments=KERAS_BERT_SEGMENTS if get_family(model_config.family).uses_segment_ids else 0,
        activation=activation,
        layer_norm_epsilon=epsilon,
        head_activation=activation,
        head_layer_norm_epsilon=epsilon,
    )


def _pad_id(config: dict[str, Any]) -> int:
    value = config.get("pad_token_id")
    return int(value) if isinstance(value, int) else 0


def _weights_file(path: str) -> str:
    for index in SHARDED_INDEXES:
        if fs.exists(fs.join(path, index)):
            raise _refused(
                path,
                f"holds sharded weights ({index})",
                "Save the model as one file: model.save_pretrained(DIR, max_shard_size='100GB').",
            )
    for name in MODEL_WEIGHTS_FILES:
        if fs.exists(fs.join(path, name)):
            return fs.join(path, name)
    raise _refused(
        path,
        f"has {MODEL_CONFIG_JSON} but no weights ({MODEL_SAFETENSORS} or {MODEL_PYTORCH_BIN})",
        "Copy the weights file beside config.json, or save the model again with save_pretrained.",
    )


def read_hf_state_dict(weights_file: str) -> dict[str, np.ndarray]:
    """The tensors of a model.safetensors (safetensors) or pytorch_model.bin (torch) as float32 numpy arrays.

    Raises:
      LmshardsError: the reader is not installed, or the file is damaged, not a regular file or too large.
    """
    bounded.check_regular_file(weights_file, "weights file", bounded.MAX_WEIGHTS_BYTES)
    data = fs.read_bytes(weights_file)
    try:
        if weights_file.endswith(".safetensors"):
            if not _has_bfloat16(data):
                from safetensors.numpy import load

                return {name: _float32(a) for name, a in load(data).items()}
            from safetensors.torch import load as load_torch  # numpy has no bfloat16

            state = load_torch(data)
        else:
            import torch

            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return {name: t.float().numpy() for name, t in state.items()}
    except ImportError as e:
        raise LmshardsError(
            f"--init_from needs {e.name} to read {weights_file!r}. {_EXPORT_HINT}"
        ) from e
    except (
        Exception
    ) as e:  # a damaged file fails in the reader's own ways (SafetensorError, UnpicklingError)
        raise LmshardsError(
            f"--init_from weights {weights_file!r} cannot be read ({type(e).__name__}: {e}). "
            "Re-save the model with transformers' save_pretrained."
        ) from e


def _has_bfloat16(data: bytes) -> bool:
    """Whether a safetensors file holds bfloat16 tensors (its header: an 8-byte length, then JSON)."""
    length = int.from_bytes(data[:8], "little")
    return b'"BF16"' in data[8 : 8 + length]


def _float32(array: np.ndarray) -> np.ndarray:
    return array if array.dtype == np.float32 else array.astype(np.float32)


def _carried_tokenizer(path: str) -> TokenizerSource | None:
    if not fs.exists(fs.join(path, "tokenizer.json")):
        return None
    try:
        return locate_tokenizer(path)
    except TokenizerError as e:
        raise _refused(
            path, f"carries a tokenizer that cannot be read ({e})", "Repair or remove it."
        ) from e


def _inspect_run(path: str) -> InitSource:
    run = RunDir(path)
    run_config = run.read_config()
    model_config = model_config_from_dict(run_config["model"], source=run.config_path)
    if not run_has_checkpoints(path):
        raise _refused(
            path,
            f"is a run without checkpoints (nothing in {CHECKPOINTS_DIR}/)",
            "Train it past --checkpoint_every steps first, or pass another run.",
        )
    tokenizer = _carried_tokenizer(run.tokenizer) if fs.isdir(run.tokenizer) else None
    return InitSource(
        path=path,
        kind=RUN,
        model_config=model_config,
        special_token_ids={k: int(v) for k, v in run_config.get("special_token_ids", {}).items()},
        tokenizer=tokenizer,
        backend=run_config.get("train", {}).get("backend"),
    )


def run_has_checkpoints(run_dir: str) -> bool:
    """Whether RUN_DIR/checkpoints holds a checkpoint file of either backend (by name; not whether it restores)."""
    directory = fs.join(run_dir, CHECKPOINTS_DIR)
    if not fs.isdir(directory):
        return False
    return any(
        _CHECKPOINT_FILE_RE.match(posixpath.basename(p.rstrip("/"))) for p in fs.listdir(directory)
    )


# ---------------------------------------------------------------- does it fit this command (preflight)


def check_model_options(source: InitSource, config: TrainConfig) -> None:
    """Refuses a --model_preset, --model_config or --model_family that describes another model than the source's.

    Raises:
      LmshardsError: naming both architectures.
    """
    ours = source.model_config
    given: ModelConfig | None = None
    flag = ""
    if config.model_config:
        given, flag = (
            read_model_config(config.model_config),
            f"--model_config {config.model_config}",
        )
    elif config.model_preset:
        given = preset_config(
            config.model_preset,
            family=config.model_family or ours.family,
            vocabulary_size=ours.vocabulary_size,
        )
        flag = f"--model_preset {config.model_preset}"
    if config.model_family and config.model_family != ours.family:
        raise _refused(
            source.path,
            f"is a {ours.family} model, and this command gives --model_family {config.model_family}",
            "Drop --model_family: the architecture comes from --init_from.",
        )
    if given is None:
        return
    keys = (
        "family",
        "num_layers",
        "num_heads",
        "hidden_dim",
        "intermediate_dim",
        "max_sequence_length",
    )
    theirs = {k: getattr(given, k) for k in keys}
    source_dims = {k: getattr(ours, k) for k in keys}
    if given.vocabulary_size not in (0, ours.vocabulary_size):
        theirs["vocabulary_size"], source_dims["vocabulary_size"] = (
            given.vocabulary_size,
            ours.vocabulary_size,
        )
    if theirs != source_dims:
        raise _refused(
            source.path,
            f"is a model of {_describe(source_dims)}, and {flag} asks for {_describe(theirs)}",
            f"Drop {flag.split()[0]}: the architecture comes from --init_from.",
        )


def _describe(dims: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in dims.items())


def check_source_fits_shards(
    source: InitSource, manifest: Manifest, shard_tokenizer: TokenizerSource | None
) -> None:
    """The shards' tokenizer must be the model's (size, special ids, vocabulary) and their sequences must fit
    its position table.

    shard_tokenizer: the tokenizer the shards were made with (lmshards.train.inputs.shard_set_tokenizer.run_tokenizer), if known.
    Raises:
      LmshardsError: naming both sides and the fix (preprocess with the model's tokenizer, or repack).
    """
    model = source.model_config
    tok = manifest.tokenizer
    remake = (
        f"Re-run `lmshards preprocess` with --tokenizer {source.tokenizer.path} so the shards use the model's tokens."
        if source.tokenizer is not None
        else "Re-run `lmshards preprocess` with the tokenizer the model was trained with (--tokenizer MODEL_DIR)."
    )
    if tok.vocab_size > model.vocabulary_size:
        raise _refused(
            source.path,
            f"has a vocabulary of {model.vocabulary_size} tokens, and the shards' tokenizer has {tok.vocab_size}",
            remake,
        )
    for role, model_id in sorted(source.special_token_ids.items()):
        shard_id = tok.special_token_ids.get(role)
        if shard_id is not None and shard_id != model_id:
            raise _refused(
                source.path,
                f"was trained with {role} token id {model_id}, and the shards' tokenizer gives it id {shard_id}",
                remake,
            )
    if source.tokenizer is not None and fingerprint(source.tokenizer.json_text) != tok.fingerprint:
        same = shard_tokenizer is not None and _vocabulary(source.tokenizer) == _vocabulary(
            shard_tokenizer
        )
        if not same:
            raise _refused(
                source.path,
                f"carries tokenizer {fingerprint(source.tokenizer.json_text)} and the shards were made with "
                f"{tok.fingerprint}{'' if shard_tokenizer else ' (the shard set carries no copy to compare tokens with)'}",
                remake,
            )
        log.info(
            "--init_from %s carries a tokenizer file that differs from the shards' but has the same tokens and ids.",
            source.path,
        )
    elif source.tokenizer is None and tok.vocab_size != model.vocabulary_size:
        raise _refused(
            source.path,
            f"has a vocabulary of {model.vocabulary_size} tokens, and the shards' tokenizer has {tok.vocab_size} "
            "(the source carries no tokenizer to compare tokens with)",
            remake,
        )
    if manifest.seq_len > model.max_sequence_length:
        raise _refused(
            source.path,
            f"has a position table of {model.max_sequence_length} positions, and the shards hold sequences of "
            f"{manifest.seq_len} tokens",
            f"Repack the shards to --seq_len {model.max_sequence_length} or less (`lmshards repack`), or start "
            "from a model with a longer position table (for a two-phase run, train the first phase with "
            "max_sequence_length as long as the second phase's --seq_len).",
        )


def _vocabulary(tokenizer: TokenizerSource) -> dict[str, int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer.json_text).get_vocab(with_added_tokens=True)


# ---------------------------------------------------------------- the weights (trainer, before any device)


def load_init_weights(source: InitSource, *, backend: str) -> InitWeights:
    """The source's weights: a Hugging Face model's as preflight read them, a run's from its newest
    checkpoint that restores (the trainer calls it after the backend connected, before it builds its model).

    Raises:
      LmshardsError: no checkpoint of the run restores, or it is a run of a backend whose checkpoints need
        another Keras backend than `backend`'s (the JAX backend and a TensorFlow run).
    """
    if source.weights is not None:
        return source.weights
    from lmshards.train.backends.weights import LiveRunError, restore_model_from_run
    from lmshards.train.network.keras_weights import keras_weights, masked_lm_spec

    # Runs recorded before the JAX backend existed name no backend: they are TensorFlow's.
    trained_by = source.backend or TENSORFLOW
    needs = entry(trained_by).checkpoints_keras
    if needs and needs != entry(backend).keras_backend:
        raise _refused(
            source.path,
            f"is a run of the {title(trained_by)} backend, whose checkpoints the {title(backend)} backend cannot read",
            f"Export it (`lmshards export {source.path} --output DIR`) and pass --init_from DIR.",
        )
    try:
        masked_lm, model_config, checkpoint = restore_model_from_run(source.path)
    except LiveRunError:  # its checkpoints rotated while read: the run is fine, retry
        raise
    except LmshardsError as e:  # each checkpoint that failed was named in a warning
        raise _refused(
            source.path,
            "does not restore: none of its checkpoints can be read into the model its run_config.json describes "
            "(damaged files, or a run of another lmshards version)",
            "Export it with the lmshards version that trained it (`lmshards export`) and pass the export",
        ) from e
    arrays = keras_weights(masked_lm, masked_lm_spec(masked_lm, family=model_config.family))
    return InitWeights(arrays, weights_fingerprint(arrays), checkpoint)


def init_record(source: InitSource, weights: InitWeights) -> dict[str, Any]:
    """run_config.json's "init_from": where the run's first weights came from."""
    return {
        "path": source.path,
        "kind": source.kind,
        "read_from": weights.read_from,
        "weights_fingerprint": weights.fingerprint,
        "with_head": weights.has_head,
    }


def check_same_source(previous_run: dict[str, Any] | None, weights: InitWeights) -> None:
    """A run restarted before its first checkpoint reads its source again: it must still be the same weights.

    Raises:
      LmshardsError: the source's weights changed since the run started.
    """
    recorded = (previous_run or {}).get("init_from") or {}
    expected = recorded.get("weights_fingerprint")
    if expected and expected != weights.fingerprint:
        raise LmshardsError(
            f"--init_from {recorded.get('path')!r} now holds other weights ({weights.fingerprint}) than when this "
            f"run started ({expected}). Restore them, or pass --restart to start the run again from these."
        )
