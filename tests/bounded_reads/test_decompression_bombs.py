"""Decompression is bounded by its output, for every codec: a small file that expands to far more than
memory is read in flat memory, and its over-long record is counted and skipped, never held whole.

Each bomb is read in a fresh Python process, whose peak resident memory (VmHWM) is reset just before
the read (/proc/self/clear_refs) and compared after it with its resident memory before. (getrusage's
ru_maxrss would not do: a child started by exec carries its parent's peak over, and the imports' peak
would hide the read's.)
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import subprocess
import sys
import textwrap

import pytest
import zstandard

from lmshards.plumbing.units import MIB

# What a bomb expands to, and what reading it may add to the reader's peak memory: the old zstandard
# reader expanded a whole 64 KiB of input per call (here: the whole bomb) at once.
BOMB_BYTES = 128 * MIB
MAX_GROWTH_BYTES = 48 * MIB
# A JSON line longer than this is skipped; lowered from its default so that the line held up to the
# limit is small beside MAX_GROWTH_BYTES.
JSON_LINE_LIMIT = 4 * MIB
MEMBER_BYTES = 16 * MIB
AFTER = "after the bomb"
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/status"
)


# Each codec's compressor; its files may hold members one after another, as the readers take them.
COMPRESSORS = {
    ".gz": lambda data: gzip.compress(data, compresslevel=1),
    ".bz2": lambda data: bz2.compress(data, compresslevel=1),
    ".xz": lambda data: lzma.compress(data, preset=0),
    ".zst": zstandard.ZstdCompressor().compress,
}


def _bomb(suffix: str, head: bytes, tail: bytes) -> bytes:
    """head, BOMB_BYTES of zeros, then tail, compressed.

    zstd: one frame, as the `zstd` command streams it (what one decompressor call could expand whole).
    The others: members one after another, the zeros' member compressed once, which keeps making the
    bomb fast (their readers bound each read's output, member or not).
    """
    if suffix == ".zst":
        out = io.BytesIO()
        with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as writer:
            writer.write(head)
            for _ in range(BOMB_BYTES // MEMBER_BYTES):
                writer.write(bytes(MEMBER_BYTES))
            writer.write(tail)
        return out.getvalue()
    compress = COMPRESSORS[suffix]
    zeros = compress(bytes(MEMBER_BYTES))
    return compress(head) + zeros * (BOMB_BYTES // MEMBER_BYTES) + compress(tail)


_READ = textwrap.dedent(
    r"""
    import json, re, sys
    from lmshards.preprocess.sources import ReadOptions, ReadStats, iter_documents
    from lmshards.preprocess.sources.formats import jsonl

    jsonl.MAX_JSON_LINE_BYTES = int(sys.argv[2])
    stats = ReadStats()

    def status(field):
        with open("/proc/self/status") as f:
            return int(re.search(field + r":\s+(\d+) kB", f.read())[1]) * 1024

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident memory starts again from now
    before = status("VmRSS")
    documents = list(iter_documents([sys.argv[1]], ReadOptions(), stats))
    growth = status("VmHWM") - before
    print(json.dumps({"documents": documents, "stats": stats.as_dict(), "growth": growth}))
    """
)


def _read_in_a_fresh_process(path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _READ, str(path), str(JSON_LINE_LIMIT)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
@linux_only
def test_a_json_lines_bomb_is_read_in_flat_memory_and_its_line_skipped(tmp_path, suffix):
    path = tmp_path / f"bomb.jsonl{suffix}"
    head, tail = b'{"text": "', b'"}\n' + json.dumps({"text": AFTER}).encode()
    path.write_bytes(_bomb(suffix, head, tail))
    assert path.stat().st_size < BOMB_BYTES // 100
    read = _read_in_a_fresh_process(path)
    assert read["documents"] == [AFTER]
    assert read["stats"]["documents_json_too_long"] == 1 and read["stats"]["documents"] == 1
    assert read["stats"]["bytes_read"] == len(head) + BOMB_BYTES + len(tail)
    assert read["growth"] < MAX_GROWTH_BYTES, read["growth"]


@linux_only
def test_a_zstd_text_bomb_of_zeros_is_read_in_flat_memory(tmp_path):
    """The bomb as it was found: a .zst of zeros, read as text (its NULs removed, one empty document)."""
    path = tmp_path / "zeros.txt.zst"
    path.write_bytes(_bomb(".zst", b"", f"\n{AFTER}\n".encode()))
    read = _read_in_a_fresh_process(path)
    assert read["documents"] == [AFTER]
    assert read["stats"]["documents_nul"] == 1 and read["stats"]["documents_empty"] == 1
    assert read["growth"] < MAX_GROWTH_BYTES, read["growth"]
