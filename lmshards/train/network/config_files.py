"""A --model_config file: the ModelConfig fields as JSON, or a transformers config.json (RoBERTa, BERT, ModernBERT).

No Keras here: the command line reads it in its checks, before the training stack loads.
"""

from __future__ import annotations

import json
from typing import Any

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.train.config import ModelConfig, model_config_from_dict
from lmshards.train.network.hf_mapping import UnsupportedHfModel, model_fields_from_hf

# A transformers config.json says which model it describes in this key (a ModelConfig JSON has no such key).
HF_MODEL_TYPE = "model_type"


def read_model_config(path: str) -> ModelConfig:
    """Reads a --model_config JSON file (the ModelConfig fields; `family` may be omitted)."""
    if not fs.exists(path):
        raise LmshardsError(
            f"--model_config {path!r} does not exist; pass a JSON file with the ModelConfig fields."
        )
    try:
        data = bounded.read_json(path, what="--model_config")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LmshardsError(f"--model_config {path!r} is not valid JSON: {e}.") from e
    if not isinstance(data, dict):
        raise LmshardsError(f"--model_config {path!r} must hold a JSON object.")
    if HF_MODEL_TYPE in data:
        return model_config_from_hf(data, source=path)
    return model_config_from_dict(data, source=path)


def model_config_from_hf(data: dict[str, Any], *, source: str) -> ModelConfig:
    """The ModelConfig of a transformers config.json (RobertaConfig, BertConfig): its fields mapped.

    Raises:
      LmshardsError: another family (GPT-2, ...) or a variant keras-hub cannot compute exactly.
    """
    try:
        return model_config_from_dict(model_fields_from_hf(data), source=source)
    except UnsupportedHfModel as e:
        raise LmshardsError(
            f"{source!r} is a transformers config lmshards cannot build: {e}. Pass a config.json of a "
            "RobertaForMaskedLM, BertForMaskedLM or ModernBertForMaskedLM, or a JSON ModelConfig."
        ) from e
