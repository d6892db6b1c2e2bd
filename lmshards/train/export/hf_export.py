"""Export a keras-hub masked LM to a Hugging Face transformers (PyTorch) model directory.

The directory holds config.json, model.safetensors and the tokenizer files, so
`transformers.pipeline("fill-mask", model=DIR)` and `AutoModelForMaskedLM.from_pretrained(DIR)`
work offline. Writing needs transformers and safetensors, not torch (a TPU VM exports without a torch
install); torch, which loading the model needs, makes the export check that its model loads cleanly.
transformers and huggingface_hub (the `export` extra) are imported inside the functions that need them: a
training install does not have them.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
from typing import Any

import numpy as np

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError, TokenizerError
from lmshards.plumbing.outputs import check_replaceable, check_writable, clear_owned_output
from lmshards.schemas.constants import MODEL_SAFETENSORS, TOKENIZER_DIR_NAME
from lmshards.schemas.hf_tokenizer import wrap_fast_tokenizer
from lmshards.schemas.layouts import MODEL_EXPORT_OUTPUT, OUTPUT_KINDS
from lmshards.schemas.tokenizer_info import TokenizerSource, checked_tokenizer, locate_tokenizer
from lmshards.train.divergence import DivergenceError, describe_non_finite, non_finite_names
from lmshards.train.network.hf_mapping import (
    MaskedLMSpec,
    head_differences,
    hf_config,
    hf_state_dict,
)
from lmshards.train.network.keras_weights import keras_weights, masked_lm_spec

# The step in a checkpoint's file name: TensorFlow's `ckpt-120` prefix, a JAX run's `ckpt-120.npz`.
_CHECKPOINT_STEP = re.compile(r"ckpt-(\d+)")
logger = logging.getLogger(__name__)

EXPORT_EXTRA_HINT = "Install the export extra: pip install 'lmshards[export]'."
# What transformers' save_pretrained writes for a float32 model (in MODEL_SAFETENSORS).
SAFETENSORS_METADATA = {"format": "pt"}
SAVED_DTYPE = "float32"
# Roles every exported masked LM needs: padding (and position numbering) and the mask token.
REQUIRED_ROLES = ("pad", "mask")


def export_masked_lm(
    masked_lm: Any,
    *,
    family: str,
    tokenizer_dir_or_json: str,
    special_token_ids: dict[str, int],
    output_dir: str,
    overwrite: bool = False,
) -> str:
    """Writes the HF model directory for `masked_lm` at output_dir (a local directory: new, empty, or with overwrite).

    The directory is built under a temporary name and renamed when complete. Returns output_dir.

    Raises:
      LmshardsError: output_dir is remote, a file, or not empty without overwrite; the tokenizer is
        unusable or disagrees with special_token_ids; or a role the model needs (REQUIRED_ROLES) is missing.
      DivergenceError: a weight is NaN or infinite; nothing is written.
    """
    spec = masked_lm_spec(masked_lm, family=family)
    for role in REQUIRED_ROLES:
        if role not in special_token_ids:
            raise LmshardsError(
                f"special_token_ids {special_token_ids} has no {role!r} token; the exported model needs one."
            )
    replace = check_export_output(output_dir, overwrite=overwrite)
    weights = keras_weights(masked_lm, spec)
    bad = non_finite_names(weights)
    if bad:
        raise DivergenceError(
            f"The model has {describe_non_finite(bad, len(weights))}: its training diverged, and an export of it "
            "would predict nothing. Export an earlier checkpoint (--checkpoint), or train again with a lower "
            "--learning_rate."
        )
    differences = head_differences(spec)
    if differences:
        logger.warning(
            "transformers' %s head cannot compute exactly like the keras-hub one (%s); its logits differ slightly.",
            spec.family,
            "; ".join(differences),
        )
    with fs.atomic_local_path(output_dir) as staging:
        save_hf_model(
            weights,
            spec,
            special_token_ids=special_token_ids,
            output_dir=staging,
        )
        save_tokenizer(
            tokenizer_dir_or_json,
            special_token_ids=special_token_ids,
            model_max_length=spec.max_sequence_length,
            output_dir=staging,
        )
        check_tokenizer_matches(
            staging, special_token_ids=special_token_ids, vocabulary_size=spec.vocabulary_size
        )
        if replace:  # only now that the new export is complete; refuses files added since the check
            clear_owned_output(output_dir, kind=MODEL_EXPORT_OUTPUT)
    logger.info("Exported %s model to %s", spec.family, output_dir)
    return output_dir


def check_export_output(output_dir: str, *, overwrite: bool) -> bool:
    """Checks, before any work, that output_dir can receive the export; True when it will replace a non-empty directory.

    Raises:
      LmshardsError: output_dir is remote, a file, not empty without overwrite, anything but an earlier
        export (another lmshards output, files lmshards did not write) or inside another lmshards output,
        or its directory is not writable (the export is built beside it, then renamed).
    """
    if fs.is_remote(output_dir):
        raise LmshardsError(
            f"--output {output_dir!r} is remote; export to a local directory, then copy it or use --push_to_hub."
        )
    replace = check_replaceable(
        output_dir, kind=MODEL_EXPORT_OUTPUT, overwrite=overwrite, others=OUTPUT_KINDS
    )
    check_writable(os.path.dirname(os.path.abspath(output_dir)), flag="the directory of --output")
    return replace


def save_hf_model(
    weights: dict[str, np.ndarray],
    spec: MaskedLMSpec,
    *,
    special_token_ids: dict[str, int],
    output_dir: str,
) -> None:
    """Writes config.json and model.safetensors for the family's transformers MaskedLM, without torch.

    The files are the ones transformers' `save_pretrained` writes for the model holding these weights (the
    export tests compare the bytes): float32 tensors, a tied parameter stored once under the name it is tied
    to, `{"format": "pt"}` metadata. Where torch is installed, the saved model is then loaded back and must
    fill every parameter (check_loads_cleanly).
    """
    transformers = _import_transformers()
    from safetensors.numpy import save_file

    family = spec.model_family
    config = getattr(transformers, family.hf_config_class)(**hf_config(spec, special_token_ids))
    config.dtype = SAVED_DTYPE
    config.save_pretrained(output_dir)
    state = hf_state_dict(weights, spec, pad_token_id=special_token_ids["pad"])
    saved = {name: value for name, value in state.items() if name not in family.hf_head.tied}
    save_file(saved, os.path.join(output_dir, MODEL_SAFETENSORS), metadata=SAFETENSORS_METADATA)
    check_loads_cleanly(output_dir, spec)


def check_loads_cleanly(output_dir: str, spec: MaskedLMSpec) -> None:
    """Loads the saved model with transformers where torch is installed; raises RuntimeError unless every
    parameter of the family's MaskedLM is filled from the file with its shape, and nothing is left over.

    Without torch nothing is loaded (the writer's names and shapes are checked by the export tests).
    """
    try:
        import torch  # noqa: F401  (only to know whether transformers' models can load)
    except ImportError:
        logger.debug("torch is not installed: the export is not loaded back")
        return
    transformers = _import_transformers()
    model_cls = getattr(transformers, spec.model_family.hf_masked_lm_class)
    _, info = model_cls.from_pretrained(output_dir, output_loading_info=True)
    problems = {kind: names for kind, names in info.items() if names}
    if problems:
        raise RuntimeError(f"The exported {model_cls.__name__} does not load cleanly: {problems}")


def save_tokenizer(
    tokenizer_dir_or_json: str,
    *,
    special_token_ids: dict[str, int],
    model_max_length: int,
    output_dir: str,
) -> None:
    """Puts the tokenizer files into output_dir (local or gs:// source).

    A transformers tokenizer directory (it has tokenizer_config.json) is copied as is; a bare
    tokenizer.json is wrapped as PreTrainedTokenizerFast with the role tokens filled in.
    """
    source = locate_tokenizer(tokenizer_dir_or_json)
    if source.config:
        os.makedirs(output_dir, exist_ok=True)
        for path in fs.listdir(source.path):
            if not fs.isdir(path):
                name = path.rstrip("/").rsplit("/", 1)[-1]
                with open(os.path.join(output_dir, name), "wb") as f:
                    f.write(fs.read_bytes(path))
        return
    wrap_tokenizer_json(
        source, special_token_ids=special_token_ids, model_max_length=model_max_length
    ).save_pretrained(output_dir)


def wrap_tokenizer_json(
    source: TokenizerSource, *, special_token_ids: dict[str, int], model_max_length: int
) -> Any:
    """A transformers PreTrainedTokenizerFast over the tokenizer.json, with its role tokens set.

    The mask token also takes the space before it (lstrip), as RoBERTa's does: in "is <mask>." the
    model should predict the word with its leading space ("ĠParis"), not a bare space then a word.
    """
    from tokenizers import Tokenizer

    parsed = json.loads(source.json_text)
    for added in parsed.get("added_tokens", []):
        if added["id"] == special_token_ids["mask"]:
            added["lstrip"] = True
    tokenizer = Tokenizer.from_str(json.dumps(parsed, ensure_ascii=False))
    return wrap_fast_tokenizer(
        tokenizer, special_token_ids=special_token_ids, model_max_length=model_max_length
    )


def check_tokenizer_matches(
    model_dir: str, *, special_token_ids: dict[str, int], vocabulary_size: int
) -> None:
    """Raises LmshardsError unless the saved tokenizer's role ids are the ones the model was trained with."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for role, token_id in special_token_ids.items():
        actual = getattr(tokenizer, f"{role}_token_id", None)
        if actual is not None and actual != token_id:
            raise TokenizerError(
                f"The tokenizer's {role} token has id {actual}, but the model was trained with {token_id}; "
                "pass the tokenizer the run was trained with (--tokenizer)."
            )
    if len(tokenizer) > vocabulary_size:
        raise TokenizerError(
            f"The tokenizer has {len(tokenizer)} tokens, more than the model's vocabulary of {vocabulary_size}; "
            "pass the tokenizer the run was trained with (--tokenizer)."
        )


def export_run(
    run_dir: str,
    *,
    output_dir: str,
    checkpoint: str | None = None,
    tokenizer: str | None = None,
    overwrite: bool = False,
) -> str:
    """Exports a training run (its latest checkpoint, or `checkpoint`) to output_dir. Returns output_dir.

    The tokenizer is RUN_DIR/tokenizer unless `tokenizer` is given; its fingerprint must match the
    one the run recorded.
    """
    from lmshards.train.backends.weights import restore_model_from_run
    from lmshards.train.run_dir import RunDir

    check_export_output(output_dir, overwrite=overwrite)
    run = RunDir(run_dir)
    run_config = run.read_config()
    tokenizer_path = tokenizer or run.tokenizer
    if not fs.exists(tokenizer_path):
        raise LmshardsError(
            f"The run {run_dir!r} has no {TOKENIZER_DIR_NAME}/ directory; pass --tokenizer PATH "
            "(the tokenizer.json or directory the run was trained with)."
        )
    expected = run_config.get("tokenizer_fingerprint")
    if expected:  # runs of lmshards 0.1 did not record it
        checked_tokenizer(
            tokenizer_path,
            expected=expected,
            named="Tokenizer",
            reference="the run was trained with",
            fix="Pass the run's tokenizer with --tokenizer.",
        )
    else:
        locate_tokenizer(tokenizer_path)
    masked_lm, _, restored = restore_model_from_run(run_dir, checkpoint=checkpoint)
    log_exported_step(run, run_config, restored)
    return export_masked_lm(
        masked_lm,
        family=run_config["model"]["family"],
        tokenizer_dir_or_json=tokenizer_path,
        special_token_ids={role: int(i) for role, i in run_config["special_token_ids"].items()},
        output_dir=output_dir,
        overwrite=overwrite,
    )


def checkpoint_step(path: str) -> int | None:
    """The step in a checkpoint's name (`.../ckpt-120`, `ckpt-120.npz`), None if it has none."""
    match = _CHECKPOINT_STEP.search(posixpath.basename(path))
    return int(match[1]) if match else None


def log_exported_step(run: Any, run_config: dict[str, Any], checkpoint: str) -> None:
    """Names the step being exported; warns when the run has not reached the end of its schedule.

    run: the lmshards.train.run_dir.RunDir. A run stopped early (preempted, killed) or still training has no
    run_summary.json: its export is the model of an unfinished run, which is rarely what is meant.
    """
    from lmshards.train.optim import WarmupDecay

    step = checkpoint_step(checkpoint)
    schedule = run_config.get("schedule")
    end = WarmupDecay.from_config(schedule).end_step if schedule else None
    finished = fs.exists(run.summary_path)
    if finished and (step is None or end is None or step >= end):
        logger.info("Exporting %s, the model of step %s.", checkpoint, step)
        return
    of = f" of {end}" if end is not None else ""
    logger.warning(
        "%s: exporting the model of step %s%s (%s): %s. Pass --checkpoint to choose another step.",
        run.path,
        step,
        of,
        checkpoint,
        "a checkpoint before the run's end"
        if finished
        else "the run has not finished (rerun its train command to complete it)",
    )


def push_to_hub(output_dir: str, repo_id: str) -> str:
    """Uploads the exported directory to the Hub repo (created if needed). Returns the repo URL.

    Raises:
      LmshardsError: the Hub is unreachable (offline mode, no network) or refuses the upload; the
        message says where the local export is.
    """
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(
            folder_path=output_dir, repo_id=repo_id, commit_message="Upload lmshards export"
        )
    except (OSError, httpx2.HTTPError) as e:  # offline mode and HTTP status errors are OSErrors
        raise LmshardsError(
            f"Could not push to the Hugging Face Hub repo {repo_id!r}: the Hub is unreachable or refused the upload "
            f"({type(e).__name__}: {e}). The local export is complete at {output_dir!r}; push it later with "
            f"`hf upload {repo_id} {output_dir}` once online and logged in."
        ) from e
    return str(url)


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as e:
        raise LmshardsError(f"Export needs transformers ({e}). {EXPORT_EXTRA_HINT}") from e
    return transformers
