"""Compressed inputs: `.gz`, `.bz2`, `.zst` and `.xz` files, named by their ending, checked by their
magic bytes and decompressed on the fly (streaming, in bounded memory), for every format. A
compressed file cannot be split: it is one range.

Content decides, not the name alone: a file whose name says one codec must start with that codec's
magic bytes, and a file whose name says none must not start with any codec's (see codec_by_content).
Zstandard files may hold several frames one after another (as `zstd` writes when streaming or when
files are concatenated); all are read, and a file that ends inside a frame is truncated.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import gzip
import lzma
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, cast

import zstandard

from lmshards.plumbing import fs
from lmshards.preprocess.sources.core.options import BinaryFileError, InputError

# Compressed bytes fed to the zstandard decompressor at a time, which bounds what one call can
# expand to: a block holds at most 128 KiB and takes at least 4 bytes (an RLE block), so 256 bytes of
# input gives at most about 8 MiB, even from a decompression bomb. (A zstandard decompressobj takes
# no output limit, unlike zlib's, bz2's and lzma's, whose readers the other codecs use.)
ZSTD_INPUT_BYTES = 256
# The first 4 bytes of a zstandard frame; a skippable frame's are 0x50-0x5F followed by these 3.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_SKIPPABLE_TAIL = b"\x2a\x4d\x18"


class _ZstdReader:
    """A forward reader of the decompressed bytes of a zstandard file of one or more frames.

    Seeking back restarts decompression from byte 0 (only the first 4 bytes are ever looked at again).

    Raises (from read):
      EOFError: the file ends inside a frame.
      zstandard.ZstdError: the data is not zstandard or is corrupt.
    """

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self._decompressor = zstandard.ZstdDecompressor()
        self._rewind()

    def _rewind(self) -> None:
        self._raw.seek(0)
        self._frame = self._decompressor.decompressobj()
        self._frame_fed = False  # the current frame has been given some of its bytes
        self._buffer, self._offset, self._position, self._done = b"", 0, 0, False

    def _more(self) -> bool:
        """Decompresses until some output is buffered; False at the end of the file."""
        while not self._done:
            data = b""
            if self._frame.eof:  # the frame ended: the next one starts with what it did not use
                data = self._frame.unused_data
                self._frame, self._frame_fed = self._decompressor.decompressobj(), False
            data = data or self._raw.read(ZSTD_INPUT_BYTES)
            if not data:
                if self._frame_fed:
                    raise EOFError("the data ends inside a zstandard frame")
                self._done = True
                return False
            self._frame_fed = True
            out = self._frame.decompress(data)
            if out:
                self._buffer, self._offset = out, 0
                return True
        return False

    def read(self, size: int = -1) -> bytes:
        parts, wanted = [], size if size >= 0 else None
        while wanted is None or wanted > 0:
            if self._offset == len(self._buffer) and not self._more():
                break
            end = (
                len(self._buffer)
                if wanted is None
                else min(len(self._buffer), self._offset + wanted)
            )
            parts.append(self._buffer[self._offset : end])
            if wanted is not None:
                wanted -= end - self._offset
            self._offset = end
        data = b"".join(parts)
        self._position += len(data)
        return data

    def tell(self) -> int:
        return self._position

    def seek(self, position: int, whence: int = 0) -> int:
        if whence != 0:
            raise ValueError("a zstandard stream seeks only to absolute positions")
        if position < self._position:
            self._rewind()
        while self._position < position and self.read(
            min(position - self._position, ZSTD_INPUT_BYTES)
        ):
            pass
        return self._position

    def close(self) -> None:
        self._buffer = b""

    def __enter__(self) -> _ZstdReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class _Codec:
    name: str
    magic: bytes  # every such file starts with these bytes
    open: Callable[[BinaryIO], BinaryIO]  # a decompressing reader of a raw file object
    tool: str  # the command that makes such files


_CODECS = {
    ".gz": _Codec(
        "gzip",
        b"\x1f\x8b",
        lambda raw: cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb")),
        "gzip",
    ),
    ".bz2": _Codec(
        "bzip2", b"BZh", lambda raw: cast(BinaryIO, bz2.BZ2File(raw, mode="rb")), "bzip2"
    ),
    ".zst": _Codec("zstd", _ZSTD_MAGIC, lambda raw: cast(BinaryIO, _ZstdReader(raw)), "zstd"),
    ".xz": _Codec(
        "xz", b"\xfd7zXZ\x00", lambda raw: cast(BinaryIO, lzma.LZMAFile(raw, mode="rb")), "xz"
    ),
}
# What corrupt or truncated data raises, by codec: gzip.BadGzipFile and bz2's errors are OSErrors.
_DATA_ERRORS = (EOFError, zlib.error, OSError, lzma.LZMAError, zstandard.ZstdError)
COMPRESSION_SUFFIXES = tuple(_CODECS)


def is_compressed(path: str) -> bool:
    """True for .gz/.bz2/.zst/.xz inputs: not splittable, each is read as one range."""
    return _suffix(path) is not None


def strip_compression(name: str) -> str:
    """name without a .gz/.bz2/.zst/.xz ending."""
    suffix = _suffix(name)
    return name[: -len(suffix)] if suffix else name


def codec_by_content(head: bytes) -> str | None:
    """The file-name ending (".gz", ...) of the codec whose magic bytes start `head`, or None."""
    for suffix, codec in _CODECS.items():
        if head.startswith(codec.magic):
            return suffix
    if len(head) >= 4 and 0x50 <= head[0] <= 0x5F and head[1:4] == _ZSTD_SKIPPABLE_TAIL:
        return ".zst"
    return None


def check_magic(path: str, head: bytes | None = None) -> None:
    """Checks that a file's first bytes agree with its name: its codec's magic bytes if the name
    ends in .gz/.bz2/.zst/.xz, no codec's otherwise. head: the file's first bytes, when already read.

    Raises:
      BinaryFileError: compressed bytes under a name without their codec's ending.
      InputError: naming the file, what its bytes are and the rename that fixes it.
    """
    if head is None:
        with fs.open_file(path, "rb") as f:
            head = f.read(8)
    named, found = _suffix(path), codec_by_content(head)
    if named == found:
        return
    if named is None:
        assert found is not None
        codec = _CODECS[found]
        raise BinaryFileError(
            f"{path!r} holds {codec.name}-compressed data, but its name does not end in {found}; "
            f"rename it to {path.rsplit('/', 1)[-1]}{found} (it is then decompressed) or decompress it.",
            f"{codec.name}-compressed data, its name not ending in {found}",
        )
    codec = _CODECS[named]
    what = f"{_CODECS[found].name} data" if found else f"not {codec.name} data"
    fix = f"rename it to end in {found}" if found else f"re-create it with {codec.tool}"
    raise InputError(f"{path!r} is {what} (its name ends in {named}). Rename it, or {fix}.")


@contextlib.contextmanager
def open_decompressed(path: str) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed on the fly if its name ends in .gz, .bz2, .zst or .xz.

    Raises:
      InputError: compressed data that is corrupt or truncated, found at the open or while the
        body of the `with` reads from the stream.
    """
    suffix = _suffix(path)
    try:
        with fs.open_file(path, "rb") as raw:
            if suffix is None:
                yield raw
            else:
                with _CODECS[suffix].open(raw) as f:
                    yield f
    except _DATA_ERRORS as e:
        if not suffix or isinstance(e, (FileNotFoundError, PermissionError)):
            raise
        raise InputError(
            f"{path!r}: corrupt or truncated {_CODECS[suffix].name} data ({e}); re-create or remove it "
            "(or leave it out of --input)."
        ) from e


def _suffix(path: str) -> str | None:
    lowered = path.lower()
    return next((suffix for suffix in _CODECS if lowered.endswith(suffix)), None)
