"""The manifest: the only sign that a preprocess output is complete, and what the trainer trusts.

Written last by the pipeline (temp name, then rename); read by `lmshards inspect` and the trainer.
Every file it names (shards, the tokenizer's copy, schema.pbtxt) is relative to the output directory
and stays inside it, so a shard set can be moved or copied as a whole.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from typing import Any

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import ManifestError
from lmshards.schemas.constants import (
    ATTENTION_MASK,
    CONTINUED_POSITIONS_MANIFEST_FORMAT_VERSION,
    CURATION_DIR_NAME,
    CURATION_FORMAT_VERSION,
    INPUT_IDS,
    MANIFEST_FORMAT,
    MANIFEST_FORMAT_VERSION,
    MANIFEST_NAME,
    PACKED_MANIFEST_VERSIONS,
    PACKING_CHOICES,
    PACKING_CONCAT,
    READABLE_CURATION_VERSIONS,
    READABLE_MANIFEST_VERSIONS,
    SCHEMA_NAME,
    SPLITS,
    TOKENIZER_DIR_NAME,
    TOKENIZER_JSON,
    TOKENS_DIR_NAME,
)
from lmshards.schemas.directory_kind import SHARD_SET, wrong_kind_message
from lmshards.schemas.records import feature_spec
from lmshards.schemas.shards import parse_shard_name, shard_relpath

# Where a preprocess output keeps the copy of its tokenizer (TokenizerInfo.path), relative to the output.
TOKENIZER_RELPATH = posixpath.join(TOKENIZER_DIR_NAME, TOKENIZER_JSON)
# Manifest fields written only when set.
_OPTIONAL_KEYS = ("tokens", "repacked_from", "curation", "packing")
# Per-split counts only a packed set records (a concatenated set's manifest stays as it always was).
PACKING_TOTALS = ("documents_split", "segments")
# Keys left out when comparing two manifests for determinism.
VOLATILE_KEYS = ("created_at",)
# A URL scheme or a drive letter: `gs:`, `file:`, `C:`.
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_REWRITE_HINT = "The manifest was altered or damaged; re-run `lmshards preprocess`."


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One TFRecord file; `path` is relative to the output directory."""

    path: str
    records: int
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class SplitTotals:
    """Counts for one split. Token accounting balances: tokens_in == tokens_written + tokens_dropped."""

    documents: int = 0  # documents assigned to this split (non-empty, tokenized)
    tokens_in: int = 0  # tokens produced by the tokenizer, special tokens included
    tokens_written: int = 0  # real (non-padding) tokens in the written records
    tokens_dropped: int = 0  # tokens of a final partial block dropped by --remainder drop
    padding_tokens: int = 0  # pad tokens added by --remainder pad (attention_mask 0)
    records: int = 0
    # Packed sets only (PACKING_TOTALS): documents longer than a block, cut into block-sized pieces;
    # segments (documents or pieces) in all blocks together.
    documents_split: int = 0
    segments: int = 0

    def padding_share(self, seq_len: int) -> float:
        """Padding tokens over all the tokens of the records (0.0 for no records)."""
        slots = self.records * seq_len
        return self.padding_tokens / slots if slots else 0.0

    @property
    def segments_per_block(self) -> float:
        return self.segments / self.records if self.records else 0.0


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    shards: tuple[ShardInfo, ...]
    totals: SplitTotals

    @property
    def records(self) -> int:
        return sum(s.records for s in self.shards)


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    fingerprint: str
    vocab_size: int
    special_token_ids: dict[str, int]  # role -> id, e.g. {"pad": 1, "mask": 4}
    all_special_ids: tuple[int, ...]
    model_max_length: int | None = None
    # The copy of the tokenizer inside the output, relative to it (None in outputs of lmshards 0.1).
    path: str | None = None

    @property
    def never_masked_ids(self) -> tuple[int, ...]:
        """Ids a masked LM never selects for prediction: every special token and every role token, sorted."""
        return tuple(sorted(set(self.all_special_ids) | set(self.special_token_ids.values())))


def tokenizer_info_from_dict(tok: dict[str, Any]) -> TokenizerInfo:
    """The `tokenizer` section of a shard set's or a token store's manifest.

    Raises:
      KeyError, TypeError, ValueError: a missing or malformed field (the caller names the file).
    """
    return TokenizerInfo(
        fingerprint=tok["fingerprint"],
        vocab_size=int(tok["vocab_size"]),
        special_token_ids={k: int(v) for k, v in tok["special_token_ids"].items()},
        all_special_ids=tuple(int(i) for i in tok["all_special_ids"]),
        model_max_length=tok.get("model_max_length"),
        path=tok.get("path"),
    )


@dataclasses.dataclass(frozen=True)
class InputFileInfo:
    path: str
    bytes: int


@dataclasses.dataclass(frozen=True)
class CurationInfo:
    """What `preprocess --dedup/--decontaminate` removed before tokenizing (the manifest's `curation`).

    removed: reason ("exact", "near", "contaminated") -> {"documents": n, "bytes": n}, every reason
    listed; bytes are UTF-8 bytes of the documents as read. clusters: duplicate groups that lost a
    document (each keeps one). eval_files: {"path", "documents" (read from it), "removed" (training
    documents removed for sharing an n-gram with it)}, in --decontaminate order. audit: {"path"
    (relative to the output), "lines"} of every audit file, sorted by path.
    A document step's reasons are keyed "step:reason" in removed (see steps below).
    steps: the funnel, written when a document step ran (language, quality filters, PII): every step
    that ran, in order, as {"name", "options", "documents_in", "bytes_in", "documents_out",
    "bytes_out", "removed": {reason: {"documents", "bytes"}}, "counts": {label: n}}; bytes are UTF-8
    bytes of the documents as they entered (in, removed) or left (out) the step.
    Accounting: documents_in == documents_removed + the documents of every split; each step's
    documents_in == documents_out + its removed documents, and its in is the step before's out.
    """

    dedup: str
    options: dict[str, Any]
    documents_in: int
    bytes_in: int
    removed: dict[str, dict[str, int]]
    clusters: int
    eval_files: tuple[dict[str, Any], ...]
    audit: tuple[dict[str, Any], ...]
    version: int = CURATION_FORMAT_VERSION
    steps: tuple[dict[str, Any], ...] = ()  # written only when set: older sets keep their bytes

    @property
    def documents_removed(self) -> int:
        return sum(r["documents"] for r in self.removed.values())

    @property
    def bytes_removed(self) -> int:
        return sum(r["bytes"] for r in self.removed.values())


def curation_from_dict(data: dict[str, Any]) -> CurationInfo:
    """Builds a CurationInfo from its JSON form; checks the version and that audit paths stay inside.

    Raises:
      ManifestError: a version this release does not read, or an audit path outside curation/.
    """
    version = data.get("version")
    if version not in READABLE_CURATION_VERSIONS:
        raise ManifestError(
            f"Manifest curation version {version!r} is not supported by this version (reads "
            f"{list(READABLE_CURATION_VERSIONS)}); upgrade lmshards."
        )
    audit = tuple({"path": str(a["path"]), "lines": int(a["lines"])} for a in data["audit"])
    for entry in audit:
        path = check_file_relpath(
            str(entry["path"]),
            field="curation audit path",
            example=f"{CURATION_DIR_NAME}/removed.jsonl",
        )
        if not path.startswith(CURATION_DIR_NAME + "/"):
            raise ManifestError(
                f"Manifest curation audit path {path!r} is not in {CURATION_DIR_NAME}/. {_REWRITE_HINT}"
            )
    return CurationInfo(
        dedup=str(data["dedup"]),
        options=dict(data["options"]),
        documents_in=int(data["documents_in"]),
        bytes_in=int(data["bytes_in"]),
        removed={
            str(k): {"documents": int(v["documents"]), "bytes": int(v["bytes"])}
            for k, v in data["removed"].items()
        },
        clusters=int(data["clusters"]),
        eval_files=tuple(dict(e) for e in data["eval_files"]),
        audit=audit,
        version=int(version),
        steps=tuple(_step_row(row) for row in data.get("steps", ())),
    )


def _step_row(row: dict[str, Any]) -> dict[str, Any]:
    """One row of curation.steps, its numbers as ints."""
    return {
        "name": str(row["name"]),
        "options": dict(row["options"]),
        **{key: int(row[key]) for key in FUNNEL_KEYS},
        "removed": {
            str(k): {"documents": int(v["documents"]), "bytes": int(v["bytes"])}
            for k, v in row["removed"].items()
        },
        "counts": {str(k): int(v) for k, v in row["counts"].items()},
    }


FUNNEL_KEYS = ("documents_in", "bytes_in", "documents_out", "bytes_out")


def funnel_problems(curation: CurationInfo, *, written: int) -> list[str]:
    """Where curation's funnel (steps) does not add up: each step's documents in against out plus
    removed, each step's in against the step before's out (the first's against documents_in and
    bytes_in), the last's out against written (the documents kept, tokenized or rejected by the
    tokenizer), and the removals per step against curation.removed. None without a funnel."""
    if not curation.steps:
        return []
    problems = []
    before = ("curation", curation.documents_in, curation.bytes_in)
    removed: dict[str, dict[str, int]] = {}
    for row in curation.steps:
        name = row["name"]
        if (row["documents_in"], row["bytes_in"]) != before[1:]:
            problems.append(
                f"step {name}: in {row['documents_in']:,} documents ({row['bytes_in']:,} bytes), but "
                f"{before[0]} gave {before[1]:,} ({before[2]:,} bytes)"
            )
        gone = sum(r["documents"] for r in row["removed"].values())
        if row["documents_in"] != row["documents_out"] + gone:
            problems.append(
                f"step {name}: {row['documents_in']:,} documents in != {row['documents_out']:,} out "
                f"+ {gone:,} removed"
            )
        for reason, r in row["removed"].items():
            key = f"{name}:{reason}"  # a document step's; a corpus step's reason is its own key
            removed[key if key in curation.removed else reason] = r
        before = (f"step {name}", row["documents_out"], row["bytes_out"])
    if before[1] != written:
        problems.append(f"{before[0]} kept {before[1]:,} documents, the splits hold {written:,}")
    for key, r in curation.removed.items():
        if removed.get(key, {"documents": 0, "bytes": 0}) != r:
            problems.append(f"removed {key}: the steps say {removed.get(key)}, the totals {r}")
    return problems


@dataclasses.dataclass(frozen=True)
class Manifest:
    tool_version: str
    seq_len: int
    tokenizer: TokenizerInfo
    splits: dict[str, SplitInfo]
    inputs: tuple[InputFileInfo, ...]
    seed: int
    options: dict[str, Any]
    created_at: str = ""
    # What reading the inputs found, over all splits: the reader's counters (documents, documents_empty,
    # files_empty, bytes_read, ...), each one's name as the reader spells it.
    reading: dict[str, int] = dataclasses.field(default_factory=dict)
    # The records' TF Metadata schema, relative to the output (None in outputs of lmshards 0.1).
    schema: str | None = None
    format: str = MANIFEST_FORMAT
    format_version: int = MANIFEST_FORMAT_VERSION
    # The token store this set keeps (`preprocess --keep_tokens`), relative to the output; None without.
    tokens: str | None = None
    # The token store a `lmshards repack` output was built from, as given; None for a preprocess output.
    repacked_from: str | None = None
    # How documents were packed into blocks (lmshards.schemas.constants.PACKING_CHOICES); None: concatenated.
    packing: str | None = None
    # What curation removed before tokenizing (`preprocess --dedup/--decontaminate`); None without.
    curation: CurationInfo | None = None

    @property
    def packed(self) -> bool:
        """Records carry segment_ids and positions; a block's documents must not attend to each other."""
        return self.packing not in (None, PACKING_CONCAT)

    def features(self) -> dict[str, dict[str, Any]]:
        return feature_spec(self.seq_len, packed=self.packed)

    def shard_paths(self, output_dir: str, split: str) -> list[str]:
        """Absolute paths (local or gs://) of a split's shards, in manifest order."""
        return [fs.join(output_dir, s.path) for s in self.split(split).shards]

    def tokenizer_path(self, output_dir: str) -> str | None:
        """Path (local or gs://) of the tokenizer.json the shards were made with, when the output holds a copy."""
        return fs.join(output_dir, self.tokenizer.path) if self.tokenizer.path else None

    def split(self, name: str) -> SplitInfo:
        if name not in self.splits:
            raise ManifestError(f"Split {name!r} not in manifest; it has {sorted(self.splits)}.")
        return self.splits[name]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["features"] = self.features()
        for key in _OPTIONAL_KEYS:  # absent rather than null, so older outputs' bytes stay the same
            if data[key] is None:
                del data[key]
        if "curation" in data and not data["curation"]["steps"]:
            del data["curation"]["steps"]
        if not self.packed:
            for split in data["splits"].values():
                for key in PACKING_TOTALS:
                    del split["totals"][key]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def check_accounting(manifest: Manifest) -> None:
    """Raises ManifestError unless every split's counts are internally consistent."""
    for name, split in manifest.splits.items():
        t = split.totals
        if t.tokens_in != t.tokens_written + t.tokens_dropped:
            raise ManifestError(
                f"Split {name!r}: tokens_in {t.tokens_in} != tokens_written {t.tokens_written} "
                f"+ tokens_dropped {t.tokens_dropped}."
            )
        if t.records != split.records:
            raise ManifestError(
                f"Split {name!r}: totals say {t.records} records, shards hold {split.records}."
            )
        if t.tokens_written + t.padding_tokens != t.records * manifest.seq_len:
            raise ManifestError(
                f"Split {name!r}: {t.tokens_written} tokens + {t.padding_tokens} padding != "
                f"{t.records} records x seq_len {manifest.seq_len}."
            )
    check_curation_accounting(manifest)


# The reading counter of documents the tokenizer raised an error on (skipped after curation kept them).
TOKENIZER_REJECTED = "documents_tokenizer_error"


def check_curation_accounting(manifest: Manifest) -> None:
    """Raises ManifestError unless curation's documents in == removed + the documents of every split
    + the kept documents the tokenizer then rejected (reading's TOKENIZER_REJECTED)."""
    curation = manifest.curation
    if curation is None:
        return
    written = sum(split.totals.documents for split in manifest.splits.values())
    rejected = manifest.reading.get(TOKENIZER_REJECTED, 0)
    if curation.documents_in != curation.documents_removed + written + rejected:
        raise ManifestError(
            f"Curation: documents_in {curation.documents_in} != removed {curation.documents_removed} "
            f"+ written {written}"
            + (f" + rejected by the tokenizer {rejected}" if rejected else "")
            + f". {_REWRITE_HINT}"
        )
    problems = funnel_problems(curation, written=written + rejected)
    if problems:
        raise ManifestError(f"Curation funnel: {problems[0]}. {_REWRITE_HINT}")


def check_listing(manifest: Manifest) -> None:
    """Raises ManifestError unless each split lists each of its shards once: no path twice, and the
    indices in the names are exactly 0..N-1 of `-of-N` with N the number listed.

    A shard listed twice would be read twice by `train` and verified twice by `inspect --verify`,
    hiding a missing one; a gap means a shard is not listed at all.
    """
    seen: dict[str, str] = {}
    for name, split in manifest.splits.items():
        for shard in split.shards:
            if shard.path in seen:
                raise ManifestError(
                    f"Manifest lists shard {shard.path!r} twice (in split {seen[shard.path]!r} and {name!r}). "
                    f"{_REWRITE_HINT}"
                )
            seen[shard.path] = name
        names = [parse_shard_name(posixpath.basename(s.path)) for s in split.shards]
        indices = sorted(index for _, index, _, _ in names)
        counts = {count for _, _, count, _ in names}
        if names and (counts != {len(names)} or indices != list(range(len(names)))):
            raise ManifestError(
                f"Split {name!r} lists {len(names)} shards, but their names say indices {_ranges(indices)} "
                f"of {sorted(counts)} shards: a shard is missing from the list or listed under another name. "
                f"{_REWRITE_HINT}"
            )


def _ranges(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:8])
    return f"[{shown}{', ...' if len(indices) > 8 else ''}]"


def tokenizer_copy_problem(manifest: Manifest, output_dir: str) -> str | None:
    """Why the tokenizer copy in the shard set is not the one the manifest names (missing, unreadable,
    or another fingerprint); None when it matches, or when the output has no copy (lmshards 0.1)."""
    from lmshards.schemas.tokenizer_info import (
        fingerprint,  # tokenizer_info builds on this module's types
    )

    path = manifest.tokenizer_path(output_dir)
    if path is None:
        return None
    try:
        text = bounded.read_text(
            path, what="tokenizer file", max_bytes=bounded.MAX_TOKENIZER_JSON_BYTES
        )
        actual = fingerprint(text)
    except FileNotFoundError:
        return f"the tokenizer copy {path!r} named by the manifest is missing"
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON, over a read limit
        return f"the tokenizer copy {path!r} cannot be read as tokenizer JSON ({e})"
    if actual != manifest.tokenizer.fingerprint:
        return (
            f"the tokenizer copy {path!r} has fingerprint {actual} but the manifest says the shards were "
            f"made with {manifest.tokenizer.fingerprint}"
        )
    return None


def check_tokenizer_copy(manifest: Manifest, output_dir: str) -> None:
    """Raises ManifestError when tokenizer_copy_problem finds one; the message says how to fix it."""
    problem = tokenizer_copy_problem(manifest, output_dir)
    if problem:
        raise ManifestError(
            f"The shard set's tokenizer/ was replaced or damaged in {output_dir!r}: {problem}. Restore its "
            f"{TOKENIZER_RELPATH} from the tokenizer given to `lmshards preprocess`, or re-run preprocess."
        )


def _relpath_problem(path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return "is not a path"
    if "\0" in path:
        return "contains a NUL character"
    if "\\" in path:
        return "contains a backslash"
    if "://" in path or _SCHEME_RE.match(path):
        return "has a scheme"
    if path.startswith("/"):
        return "is absolute"
    segments = path.split("/")
    if "" in segments:
        return "has an empty segment"
    if "." in segments or ".." in segments:
        return "has a '.' or '..' segment"
    return None


def check_file_relpath(path: str, *, field: str, example: str) -> str:
    """Returns path when it is a normalised relative POSIX path that stays inside the output directory.

    field: the manifest field holding it (for the message); example: a valid value of that field.

    Raises:
      ManifestError: path is absolute, has a scheme, a `.`/`..` or empty segment, a backslash or a NUL.
    """
    problem = _relpath_problem(path)
    if problem:
        raise ManifestError(
            f"Manifest {field} {path!r} {problem}; it must be a path relative to the output directory, "
            f"like {example!r}. {_REWRITE_HINT}"
        )
    return path


def check_shard_relpath(path: str) -> str:
    """check_file_relpath for a shard's path."""
    return check_file_relpath(path, field="shard path", example=shard_relpath("train", 0, 1, 100))


def check_shard(split: str, shard: ShardInfo) -> None:
    """Checks that a shard listed under split lies at `{split}/{shard name}` and its name holds its record count.

    Raises:
      ManifestError: the path escapes the output directory, lies outside the split's directory, is not
        a shard file name, or the record count in the name differs from the manifest's.
    """
    path = check_shard_relpath(shard.path)
    directory, _, name = path.rpartition("/")
    try:
        name_split, _, _, records = parse_shard_name(name)
    except ValueError:
        raise ManifestError(
            f"Manifest shard path {path!r} is not a shard file name ({shard_relpath(split, 0, 1, 100)!r} is one). "
            f"{_REWRITE_HINT}"
        ) from None
    if directory != split or name_split != split:
        raise ManifestError(
            f"Manifest shard path {path!r} is listed under split {split!r} but is not a {split!r} shard "
            f"in {split + '/'!r}. {_REWRITE_HINT}"
        )
    if records != shard.records:
        raise ManifestError(
            f"Manifest shard {path!r}: its file name says {records} records, the manifest says {shard.records}. "
            f"{_REWRITE_HINT}"
        )


def manifest_from_dict(data: dict[str, Any]) -> Manifest:
    """Builds a Manifest from its JSON form.

    Raises:
      ManifestError: a wrong format or version, a malformed field, or a shard path that escapes the
        shard set (see check_shard).
    """
    if data.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"Not an lmshards manifest (format {data.get('format')!r}).")
    version = data.get("format_version")
    if version not in READABLE_MANIFEST_VERSIONS:
        raise ManifestError(
            f"Manifest format version {version!r} is not supported by this version "
            f"(reads {list(READABLE_MANIFEST_VERSIONS)}); re-run `lmshards preprocess` or upgrade lmshards."
        )
    try:
        tok = data["tokenizer"]
        splits = {
            name: SplitInfo(
                shards=tuple(ShardInfo(**s) for s in split["shards"]),
                totals=SplitTotals(**_totals_fields(split["totals"])),
            )
            for name, split in data["splits"].items()
        }
        for name, split in splits.items():
            for shard in split.shards:
                check_shard(name, shard)
        tokenizer_path, schema = tok.get("path"), data.get("schema")
        if tokenizer_path is not None:
            check_file_relpath(tokenizer_path, field="tokenizer.path", example=TOKENIZER_RELPATH)
        if schema is not None:
            check_file_relpath(schema, field="schema", example=SCHEMA_NAME)
        curation = data.get("curation")
        tokens = data.get("tokens")
        if tokens is not None:
            check_file_relpath(tokens, field="tokens", example=TOKENS_DIR_NAME)
        packing = _checked_packing(data.get("packing"), version)
        return Manifest(
            tool_version=data["tool_version"],
            seq_len=int(data["seq_len"]),
            tokenizer=tokenizer_info_from_dict(tok),
            splits=splits,
            inputs=tuple(InputFileInfo(**i) for i in data["inputs"]),
            seed=int(data["seed"]),
            options=dict(data["options"]),
            created_at=data.get("created_at", ""),
            reading={k: int(v) for k, v in data.get("reading", {}).items()},
            schema=schema,
            format_version=int(version),
            tokens=tokens,
            repacked_from=data.get("repacked_from"),
            packing=packing,
            curation=curation_from_dict(curation) if curation is not None else None,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ManifestError(f"Manifest is malformed: {e!r}.") from e


def _checked_packing(packing: Any, version: int) -> str | None:
    """The manifest's `packing`, which a packed set (and only a packed set) records, with version 3 or 4."""
    if packing is not None and packing not in PACKING_CHOICES:
        raise ManifestError(
            f"Manifest packing {packing!r} is not one of {list(PACKING_CHOICES)}. {_REWRITE_HINT}"
        )
    packed = packing not in (None, PACKING_CONCAT)
    if packed != (version in PACKED_MANIFEST_VERSIONS):
        raise ManifestError(
            f"Manifest format version {version} with packing {packing!r}: packed sets, and only they, "
            f"are format version {' or '.join(map(str, PACKED_MANIFEST_VERSIONS))}. {_REWRITE_HINT}"
        )
    return packing


def continued_positions(manifest: Manifest) -> bool:
    """Whether the set's records number a long document's later pieces from the document's start.

    Packed sets of format version 3 did, and so hold positions of seq_len and more (past the model's
    position table) wherever a document was longer than a block; those without such a document
    (`documents_split` 0 in every split) hold the bytes version 4 writes.
    """
    return manifest.format_version == CONTINUED_POSITIONS_MANIFEST_FORMAT_VERSION and any(
        split.totals.documents_split for split in manifest.splits.values()
    )


def check_packed_positions(manifest: Manifest, output_dir: str) -> None:
    """Raises ManifestError, in one line saying how to rewrite it, for a set of continued_positions."""
    if continued_positions(manifest):
        split = sum(s.totals.documents_split for s in manifest.splits.values())
        fix = (
            f"`lmshards repack --tokens {output_dir} --output NEW_DIR`"
            if manifest.tokens
            else "`lmshards preprocess` again"
        )
        raise ManifestError(
            f"{output_dir!r} is a packed set of manifest format_version {manifest.format_version}: its "
            f"{split:,} documents longer than a block carry positions past seq_len {manifest.seq_len}, "
            f"which this lmshards does not train on; write it again with positions restarting in every "
            f"piece: run {fix}."
        )


def require_concatenated(manifest: Manifest, output_dir: str, *, reader: str, fix: str) -> None:
    """Raises ManifestError when the set is packed and `reader` reads only concatenated records.

    A packed set's blocks hold several documents that must not see each other (segment_ids,
    positions): a reader that takes only input_ids and attention_mask would silently mix them.
    """
    if manifest.packed:
        raise ManifestError(
            f"{output_dir!r} is a {manifest.packing} packed set (manifest format_version "
            f"{manifest.format_version}: its records need {list(manifest.features())}, attention within "
            f"each segment), which {reader} cannot honour; {fix}"
        )


# Per-split counters of format_version 1 that were always 0 (reading counts live in Manifest.reading).
_V1_ONLY_TOTALS = ("documents_empty", "documents_invalid_utf8", "documents_nul")


def _totals_fields(totals: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in totals.items() if k not in _V1_ONLY_TOTALS}


def manifest_path(output_dir: str) -> str:
    return fs.join(output_dir, MANIFEST_NAME)


def write_manifest(output_dir: str, manifest: Manifest) -> str:
    """Checks the listing and the accounting, then writes manifest.json atomically. Returns its path."""
    check_listing(manifest)
    check_accounting(manifest)
    path = manifest_path(output_dir)
    fs.write_text_atomic(path, manifest.to_json())
    return path


def read_manifest(output_dir: str) -> Manifest:
    """Reads `{output_dir}/manifest.json`.

    Raises:
      ManifestError: no manifest (an incomplete output, or not a preprocess output), or a bad one.
    """
    path = manifest_path(output_dir)
    if not fs.exists(path):
        raise ManifestError(
            wrong_kind_message(output_dir, wanted=SHARD_SET)
            or f"No {MANIFEST_NAME} in {output_dir!r}: incomplete or not a preprocess output. "
            "Run `lmshards preprocess ... --output DIR` to completion (the manifest is written last)."
        )
    try:
        data = bounded.read_json(path, what="manifest", max_bytes=bounded.MAX_MANIFEST_BYTES)
    except bounded.ReadLimitError as e:
        raise ManifestError(str(e)) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(
            f"{path!r} is not valid JSON ({e}); re-run `lmshards preprocess`."
        ) from e
    if isinstance(data, dict) and data.get("format") != MANIFEST_FORMAT:
        wrong = wrong_kind_message(output_dir, wanted=SHARD_SET)
        if wrong:
            raise ManifestError(wrong)
    manifest = manifest_from_dict(data)
    unknown = set(manifest.splits) - set(SPLITS)
    if unknown:
        raise ManifestError(
            f"{path!r} names unknown splits {sorted(unknown)}; expected {list(SPLITS)}."
        )
    check_listing(manifest)
    check_accounting(manifest)
    return manifest


__all__ = [
    "ATTENTION_MASK",
    "INPUT_IDS",
    "CurationInfo",
    "InputFileInfo",
    "Manifest",
    "ShardInfo",
    "SplitInfo",
    "SplitTotals",
    "TOKENIZER_RELPATH",
    "TokenizerInfo",
    "check_accounting",
    "check_curation_accounting",
    "funnel_problems",
    "curation_from_dict",
    "check_file_relpath",
    "check_listing",
    "check_packed_positions",
    "continued_positions",
    "check_tokenizer_copy",
    "check_shard",
    "check_shard_relpath",
    "feature_spec",
    "manifest_from_dict",
    "manifest_path",
    "read_manifest",
    "require_concatenated",
    "tokenizer_copy_problem",
    "write_manifest",
]
