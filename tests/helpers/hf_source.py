"""Tiny transformers models made by transformers itself (no downloads), and the logits of a model that starts
from one (`lmshards train --init_from`), for the continued-pretraining tests.

torch and transformers are imported inside the functions: the JAX subprocess that imports this module to
build its backend's model needs neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# The bundled sample tokenizer's (tests/conftest.py): <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4, 2000 tokens.
VOCAB = 2000
PAD, BOS, EOS = 1, 0, 2
POSITIONS = 64  # tokens the tiny models take
SEQ_LEN = 16  # tokens of the test batch
# (transformers class, family, has an MLM head)
HF_CLASSES = {
    "RobertaForMaskedLM": ("roberta", True),
    "BertForMaskedLM": ("bert", True),
    "RobertaModel": ("roberta", False),
    "BertModel": ("bert", False),
}


def hf_config_kwargs(family: str, **overrides: Any) -> dict[str, Any]:
    """A tiny RobertaConfig/BertConfig: the sample tokenizer's ids, transformers' own defaults otherwise
    (exact GELU, layer_norm_eps 1e-12, which are not keras-hub's)."""
    kwargs: dict[str, Any] = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        pad_token_id=PAD,
    )
    if family == "roberta":
        kwargs.update(
            bos_token_id=BOS, eos_token_id=EOS, max_position_embeddings=POSITIONS + PAD + 1
        )
        kwargs["type_vocab_size"] = 1
    else:
        kwargs.update(max_position_embeddings=POSITIONS)
    return {**kwargs, **overrides}


def save_hf_model(class_name: str, directory: Path, *, seed: int = 0, **overrides: Any) -> Path:
    """Builds `class_name` from a tiny config, moves every weight by seeded noise and saves it with save_pretrained."""
    import torch
    import transformers

    family, _ = HF_CLASSES[class_name]
    config_cls = transformers.RobertaConfig if family == "roberta" else transformers.BertConfig
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(config_cls(**hf_config_kwargs(family, **overrides)))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "decoder" not in name:  # tied to the word embeddings
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    model.eval()
    model.save_pretrained(directory)
    return directory


def sample_batch(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """ids [3, SEQ_LEN] of real tokens (5 and up) and their attention mask; two rows right-padded with PAD."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, (3, SEQ_LEN)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = PAD
    return ids, mask


def hf_outputs(model_dir: Path, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """{"sequence": last hidden states, "logits": MLM logits when the model has a head} of the saved model."""
    import torch
    import transformers

    architecture = transformers.AutoConfig.from_pretrained(model_dir).architectures[0]
    auto = (
        transformers.AutoModelForMaskedLM
        if architecture.endswith("ForMaskedLM")
        else transformers.AutoModel
    )
    model = auto.from_pretrained(model_dir)
    model.eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            output_hidden_states=True,
        )
    result = {"sequence": out.hidden_states[-1].numpy()}
    if hasattr(out, "logits"):
        result["logits"] = out.logits.numpy()
    return result


def keras_outputs(masked_lm: Any, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """{"sequence", "logits" at every position} of a keras-hub masked LM, as hf_outputs gives them."""
    inputs = {"token_ids": ids, "padding_mask": mask}
    if "segment_ids" in masked_lm.backbone.input:
        inputs["segment_ids"] = np.zeros_like(ids)
    sequence = masked_lm.backbone(inputs, training=False)
    if isinstance(sequence, dict):  # backbones with a pooler also return its output
        sequence = sequence["sequence_output"]
    positions = np.tile(np.arange(ids.shape[1], dtype="int32"), (ids.shape[0], 1))
    logits = masked_lm({**inputs, "mask_positions": positions}, training=False)
    return {"sequence": np.asarray(sequence), "logits": np.asarray(logits)}


def initial_model(source: str, *, backend: str, checkpoint_dir: str) -> Any:
    """The model a new `--init_from source` run of `backend` trains from, before its first update
    (preflight's reading of the source, the trainer's load and build_model, on this machine's CPU)."""
    from lmshards.train.backends.base import BuildSpec
    from lmshards.train.backends.registry import load_backend
    from lmshards.train.config import TrainConfig
    from lmshards.train.export.init_source import inspect_init_source, load_init_weights
    from lmshards.train.loop.trainer import build_model
    from lmshards.train.optim import WarmupDecay

    init = inspect_init_source(source)
    weights = load_init_weights(init, backend=backend)
    config = TrainConfig(
        shards=(), output="", backend=backend, strategy="cpu", precision="float32", init_from=source
    )
    runner = load_backend(backend)
    runner.connect(config)
    schedule = WarmupDecay(peak=1e-3, warmup_steps=1, total_steps=10, decay="linear")
    spec = BuildSpec.for_run(
        config, init.model_config, schedule=schedule, checkpoint_dir=checkpoint_dir
    )
    build_model(runner, spec, weights)
    return runner.model  # type: ignore[attr-defined]
