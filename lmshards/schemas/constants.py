"""Values both sides of the contract (preprocess writer, trainer reader) must agree on."""

from __future__ import annotations

# Features of every record: int64 vectors of exactly seq_len values. These are the names
# Hugging Face's TPU run_mlm example parses, so its users can switch without changes.
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
FEATURE_NAMES = (INPUT_IDS, ATTENTION_MASK)
FEATURE_DTYPE = "int64"
# Records of a packed set (`--packing best_fit`) also carry, per token, its document's number within
# the block (1, 2, ...; 0 for padding) and its position within that document (0, 1, ...; 0 for padding),
# seqio's and t5x's names for them. A token attends only to tokens of its own segment.
SEGMENT_IDS = "segment_ids"
POSITIONS = "positions"
PACKED_FEATURE_NAMES = (INPUT_IDS, ATTENTION_MASK, SEGMENT_IDS, POSITIONS)

# How documents become blocks. concat: one after another, cut every seq_len tokens (a block's tokens
# see their neighbours' documents). best_fit: whole documents packed by best-fit decreasing, padded.
PACKING_CONCAT = "concat"
PACKING_BEST_FIT = "best_fit"
PACKING_CHOICES = (PACKING_CONCAT, PACKING_BEST_FIT)

DEFAULT_SEQ_LEN = 128
# The trainer's default --per_replica_batch: preprocess warns when a validation split has fewer records.
DEFAULT_PER_REPLICA_BATCH = 32
MIN_SEQ_LEN = 8

TRAIN_SPLIT = "train"
VALIDATION_SPLIT = "validation"
SPLITS = (TRAIN_SPLIT, VALIDATION_SPLIT)

MANIFEST_NAME = "manifest.json"
# The TF Metadata schema of the records, beside the manifest (text-format schema_pb2.Schema).
SCHEMA_NAME = "schema.pbtxt"
MANIFEST_FORMAT = "lmshards.manifest"
# 2: SplitTotals lost documents_empty/_invalid_utf8/_nul (never set per split; Manifest.reading has them).
MANIFEST_FORMAT_VERSION = 2
# 3: a packed set (`packing` says how; records carry SEGMENT_IDS and POSITIONS). Concatenated sets are
# still written as version 2, so their manifests and shards are unchanged; a reader that reads only
# versions 1 and 2 refuses a packed set rather than train across its documents.
# 4: a packed set whose every piece of a document longer than a block restarts its positions at 0.
# Version 3 sets numbered a piece's positions from its document's start (up to the document's length,
# past the model's position table); `train` refuses those that cut a document (a `documents_split`).
PACKED_MANIFEST_FORMAT_VERSION = 4
CONTINUED_POSITIONS_MANIFEST_FORMAT_VERSION = 3
PACKED_MANIFEST_VERSIONS = (
    CONTINUED_POSITIONS_MANIFEST_FORMAT_VERSION,
    PACKED_MANIFEST_FORMAT_VERSION,
)
# Versions this release reads; older ones are upgraded on reading (their shards are unchanged).
READABLE_MANIFEST_VERSIONS = (1, 2, 3, 4)

# `preprocess --keep_tokens` keeps every document's token ids in this subdirectory of its output (the
# token store `lmshards repack` reads); the store's own manifest.json carries this format.
TOKENS_DIR_NAME = "tokens"
TOKENS_FORMAT = "lmshards.tokens"

# `preprocess --dedup/--decontaminate` keeps its audit (one JSON line per removed document) here.
CURATION_DIR_NAME = "curation"
# The manifest's `curation` section carries its own version (absent in outputs without curation).
CURATION_FORMAT_VERSION = 1
# ... 2 when a document step ran (language, quality filters, PII): its `steps` funnel and "step:reason"
# keys, which a release reading only 1 would not account for; --dedup/--decontaminate sets stay 1.
CURATION_STEPS_VERSION = 2
READABLE_CURATION_VERSIONS = (1, 2)
# A training run directory (`lmshards train --output`) is marked by its run_config.json.
RUN_CONFIG_JSON = "run_config.json"
# A Hugging Face model directory (`lmshards export --output`): its config.json and one of its weights files.
MODEL_CONFIG_JSON = "config.json"
MODEL_SAFETENSORS = "model.safetensors"
MODEL_PYTORCH_BIN = "pytorch_model.bin"
MODEL_WEIGHTS_FILES = (MODEL_SAFETENSORS, MODEL_PYTORCH_BIN)  # in the order a reader prefers them

TOKENIZER_JSON = "tokenizer.json"
# transformers' settings of a tokenizer, beside its tokenizer.json.
TOKENIZER_CONFIG_JSON = "tokenizer_config.json"
# A self-contained shard set (and a run directory) carries its tokenizer in this subdirectory.
TOKENIZER_DIR_NAME = "tokenizer"
# The small JSON that `lmshards tokenizer train` writes beside tokenizer.json.
TOKENIZER_INFO_JSON = "lmshards_tokenizer.json"
FINGERPRINT_PREFIX = "sha256:"

# Special-token roles recorded in the manifest; the trainer never masks these ids.
SPECIAL_ROLES = ("pad", "mask", "cls", "sep", "unk")
# Spellings of each role in BERT-style and RoBERTa-style vocabularies.
ROLE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "pad": ("[PAD]", "<pad>"),
    "mask": ("[MASK]", "<mask>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "unk": ("[UNK]", "<unk>"),
}
