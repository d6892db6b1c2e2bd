"""Flag names people bring from Hugging Face's run_mlm.py and Trainer, and what lmshards calls them.

An unknown flag listed here is refused with a hint naming lmshards' flag; the README's table of
names is checked against this one.
"""

from __future__ import annotations

# command -> {run_mlm.py / TrainingArguments flag: the lmshards flag that does the same}
RUN_MLM_NAMES: dict[str, dict[str, str]] = {
    "preprocess": {
        "--train_file": "--input",
        "--tokenizer_name": "--tokenizer",
        "--output_dir": "--output",
        "--max_seq_length": "--seq_len",
        "--validation_split_percentage": "--validation_fraction",
        "--line_by_line": "--doc_separator",
        "--pad_to_max_length": "--remainder",
        "--preprocessing_num_workers": "--direct_num_workers",
        # The TPU example's prepare_tfrecord_shards.py.
        "--tokenizer_name_or_path": "--tokenizer",
        "--dataset_name": "--input",
        "--dataset_config": "--input",
        "--dataset_config_name": "--input",
        "--validation_file": "--validation_fraction",
        "--max_length": "--seq_len",
        "--shard_size": "--target_shard_mb",
    },
    "train": {
        "--output_dir": "--output",
        "--train_file": "--shards",
        "--tokenizer_name": "--tokenizer",
        "--config_name": "--model_config",
        "--model_name_or_path": "--init_from",
        "--model_type": "--model_family",
        "--max_steps": "--steps",
        "--num_train_epochs": "--epochs",
        "--per_device_train_batch_size": "--per_replica_batch",
        "--lr_scheduler_type": "--lr_schedule",
        "--max_grad_norm": "--clip_norm",
        "--save_steps": "--checkpoint_every",
        "--save_total_limit": "--keep",
        "--eval_steps": "--eval_every",
        "--max_eval_samples": "--eval_batches",
        "--logging_steps": "--log_every",
        "--overwrite_output_dir": "--restart",
        "--resume_from_checkpoint": "--output",
        "--bf16": "--precision",
        "--fp16": "--precision",
        "--max_seq_length": "--seq_len",
        "--line_by_line": "--doc_separator",
        "--save_strategy": "--checkpoint_every",
        "--evaluation_strategy": "--eval_every",
        "--eval_strategy": "--eval_every",
        "--warmup_ratio": "--warmup_steps",
        "--per_device_eval_batch_size": "--per_replica_batch",
        "--gradient_accumulation_steps": "--per_replica_batch",
        "--logging_dir": "--output",
        # The TPU example's train_model.py.
        "--train_dataset": "--shards",
        "--eval_dataset": "--shards",
        "--num_epochs": "--epochs",
        "--per_replica_batch_size": "--per_replica_batch",
        "--weight_decay_rate": "--weight_decay",
        "--bfloat16": "--precision",
        "--tpu_name": "--tpu",
        "--tpu_zone": "--tpu",
        "--gcp_project": "--tpu",
        "--max_length": "--seq_len",
        "--dataset_name": "--input",
        "--dataset_config_name": "--input",
        "--validation_file": "--validation_fraction",
    },
    "tokenizer train": {
        "--train_file": "--input",
        "--dataset_name": "--input",
        "--dataset_config": "--input",
        "--output_dir": "--output",
        "--limit": "--max_documents",
    },
    "export": {
        "--output_dir": "--output",
        "--hub_model_id": "--push_to_hub",
        "--tokenizer_name": "--tokenizer",
        "--resume_from_checkpoint": "--checkpoint",
    },
}
# Where a name is set by another command than the one it was given to.
OTHER_COMMAND = {
    ("train", "--max_seq_length"): "preprocess",
    ("train", "--line_by_line"): "preprocess",
    ("train", "--max_length"): "preprocess",
    ("train", "--dataset_name"): "preprocess",
    ("train", "--dataset_config_name"): "preprocess",
    ("train", "--validation_file"): "preprocess",
}
# Why a name's command cannot take it after all (a shard set fixes its sequence length).
WHY_ELSEWHERE = {
    "--seq_len": "a shard set already made fixes it; use `lmshards repack --seq_len` to change it",
}
# command -> the run_mlm.py / train_model.py names it takes as they are; other commands point at it.
SAME_NAMES: dict[str, tuple[str, ...]] = {
    "train": ("--learning_rate", "--weight_decay", "--warmup_steps", "--mlm_probability"),
    "preprocess": ("--tokenizer",),
    "export": ("--push_to_hub",),
}
# command -> {run_mlm.py / TrainingArguments flag: why lmshards needs nothing in its place}
NOT_NEEDED: dict[str, dict[str, str]] = {
    "train": {
        "--do_train": "`lmshards train` always trains",
        "--do_eval": "`lmshards train` evaluates every --eval_every steps on each set's validation split",
        "--report_to": "`lmshards train` always writes TensorBoard logs (RUN_DIR/tensorboard) and "
        "RUN_DIR/metrics.jsonl",
    },
}


def name_hints(command: str) -> dict[str, str]:
    """old flag -> hint text, for CommandParser(renamed=...): lmshards' flag, or a sentence why none is needed.

    Every command answers every name of the tables: its own entries name its flag, any other name the
    command that takes it. CommandParser drops the names the command itself declares. Commands a
    run_mlm.py user does not reach for (stats, repack, ...) get none: their unknown flags get typo hints.
    """
    if command not in RUN_MLM_NAMES:
        return {}
    hints = {}
    for old, new in RUN_MLM_NAMES.get(command, {}).items():
        elsewhere = OTHER_COMMAND.get((command, old))
        hints[old] = _elsewhere_hint(old, elsewhere, new, command) if elsewhere else new
    for other, names in RUN_MLM_NAMES.items():
        for old, new in names.items():
            home = OTHER_COMMAND.get((other, old), other)
            if home != command:
                hints.setdefault(old, _elsewhere_hint(old, home, new, command))
    for home, same in SAME_NAMES.items():
        for old in same:
            if home != command:
                hints.setdefault(old, _elsewhere_hint(old, home, old, command))
    for names in NOT_NEEDED.values():
        for old, why in names.items():
            hints.setdefault(old, f"{old} is not needed: {why}")
    return hints


def _elsewhere_hint(old: str, home: str, new: str, command: str) -> str:
    """'--max_length belongs to `lmshards preprocess --seq_len`, not lmshards train[: why]'."""
    hint = f"{old} belongs to `lmshards {home} {new}`, not lmshards {command}"
    why = WHY_ELSEWHERE.get(new) if command != home else None
    return f"{hint}: {why}" if why else hint
