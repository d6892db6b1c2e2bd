"""Compressed inputs: `.gz` and `.bz2` files, recognised by name, checked by magic bytes and
decompressed on the fly, for every format. A compressed file cannot be split: it is one range."""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import gzip
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, cast

from plumbing import fs
from preprocess.sources.options import InputError


@dataclasses.dataclass(frozen=True)
class _Codec:
    name: str
    magic: bytes  # every such file starts with these bytes
    open: Callable[[BinaryIO], BinaryIO]  # a decompressing reader of a raw file object


_CODECS = {
    ".gz": _Codec(
        "gzip", b"\x1f\x8b", lambda raw: cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))
    ),
    ".bz2": _Codec("bzip2", b"BZh", lambda raw: cast(BinaryIO, bz2.BZ2File(raw, mode="rb"))),
}


def is_compressed(path: str) -> bool:
    """True for .gz/.bz2 inputs: not splittable, each is read as one range."""
    return _suffix(path) is not None


def strip_compression(name: str) -> str:
    """name without a .gz/.bz2 ending."""
    suffix = _suffix(name)
    return name[: -len(suffix)] if suffix else name


def check_magic(path: str) -> None:
    """Checks that a compressed file starts as its name says (it must not be empty).

    Raises:
      InputError: the file does not start with its codec's magic bytes.
    """
    suffix = _suffix(path)
    if suffix is None:
        return
    codec = _CODECS[suffix]
    with fs.open_file(path, "rb") as f:
        head = f.read(len(codec.magic))
    if head != codec.magic:
        raise InputError(
            f"{path!r} is not {codec.name} data (its name ends in {suffix}). Rename it, or re-create it with {codec.name}."
        )


@contextlib.contextmanager
def open_decompressed(path: str) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed on the fly if its name ends in .gz or .bz2.

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
    except (EOFError, zlib.error, OSError) as e:  # gzip.BadGzipFile and bz2's errors are OSErrors
        if not suffix or isinstance(e, (FileNotFoundError, PermissionError)):
            raise
        raise InputError(
            f"{path!r}: corrupt or truncated {_CODECS[suffix].name} data ({e}); re-create or remove it "
            "(or leave it out of --input)."
        ) from e


def _suffix(path: str) -> str | None:
    lowered = path.lower()
    return next((suffix for suffix in _CODECS if lowered.endswith(suffix)), None)
