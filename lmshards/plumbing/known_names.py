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
    },
}
# Where a name is set by another command than the one it was given to.
OTHER_COMMAND = {
    ("train", "--max_seq_length"): "preprocess",
    ("train", "--line_by_line"): "preprocess",
}
# command -> {run_mlm.py / TrainingArguments flag: why lmshards needs nothing in its place}
NOT_NEEDED: dict[str, dict[str, str]] = {
    "train": {
        "--do_train": "`lmshards train` always trains",
        "--do_eval": "it evaluates every --eval_every steps on each set's validation split",
        "--report_to": "it always writes TensorBoard logs (RUN_DIR/tensorboard) and RUN_DIR/metrics.jsonl",
    },
}


def name_hints(command: str) -> dict[str, str]:
    """old flag -> hint text, for CommandParser(renamed=...): lmshards' flag, or a sentence why none is needed."""
    hints = {}
    for old, new in RUN_MLM_NAMES.get(command, {}).items():
        elsewhere = OTHER_COMMAND.get((command, old))
        hints[old] = f"`lmshards {elsewhere} {new}`" if elsewhere else new
    for old, why in NOT_NEEDED.get(command, {}).items():
        hints[old] = f"{old} is not needed: {why}"
    return hints
