"""The wire contract of a shard: record features, the tf.train.Example encoding, TFRecord framing, the parse spec.

The preprocess writer and every reader (the trainer's tf.data pipeline, `lmshards inspect`, tests)
use these functions; nobody re-declares them. The bytes they produce are a promise to users who
keep shards for years: tests/schemas/test_shard_format_golden.py guards them.
"""

from __future__ import annotations

import math
import struct
from typing import Any, BinaryIO, Iterator

import google_crc32c
import numpy as np

from schemas.constants import FEATURE_DTYPE, FEATURE_NAMES

# TFRecord framing: uint64 length, masked CRC32C of the length, data, masked CRC32C of the data.
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
FRAME_OVERHEAD_BYTES = _LENGTH.size + 2 * _CRC.size
_CRC_MASK_DELTA = 0xA282EAD8


# ---------------------------------------------------------------- features and the parse spec


def feature_spec(seq_len: int) -> dict[str, dict[str, Any]]:
    """Name -> {dtype, shape} of every record feature, as recorded in the manifest."""
    return {name: {"dtype": FEATURE_DTYPE, "shape": [seq_len]} for name in FEATURE_NAMES}


def parse_spec(features: dict[str, dict[str, Any]], names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The `tf.io.parse_example` spec of records with these features (a manifest's `features()`).

    names: parse only these features (default all). TensorFlow is imported here, so that
    writers and Dataflow workers never need it.
    """
    import tensorflow as tf

    wanted = names if names is not None else tuple(sorted(features))
    missing = [name for name in wanted if name not in features]
    if missing:
        raise KeyError(f"records have no feature {missing}; they have {sorted(features)}")
    return {name: tf.io.FixedLenFeature(features[name]["shape"], tf.dtypes.as_dtype(features[name]["dtype"]))
            for name in wanted}


# ---------------------------------------------------------------- sizes


def _varint_len(value: int) -> int:
    return max(1, math.ceil(value.bit_length() / 7))


def _field_len(payload: int) -> int:
    """Bytes of a length-delimited protobuf field with a one-byte tag and `payload` bytes."""
    return 1 + _varint_len(payload) + payload


def record_bytes_upper_bound(seq_len: int, vocab_size: int, feature_names: tuple[str, ...]) -> int:
    """Exact size of the largest framed record: a tf.train.Example of int64[seq_len] features.

    Every input id is counted at the size of the largest id and every mask value at 1 byte, so
    this bounds each record; shard counts derived from it keep shards at or below the target.
    """
    id_values = seq_len * _varint_len(max(vocab_size - 1, 1))
    mask_values = seq_len * 1
    features = 0
    for name, values in zip(feature_names, (id_values, mask_values)):
        feature = _field_len(_field_len(values))  # Feature{int64_list: Int64List{packed values}}
        entry = _field_len(len(name.encode())) + _field_len(feature)
        features += _field_len(entry)
    return _field_len(features) + FRAME_OVERHEAD_BYTES


# ---------------------------------------------------------------- records


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(payload)) + payload


def _packed_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of rows [n, L] of uint32-range ints: (uint8 bytes of all rows, byte count per row)."""
    flat = values.astype(np.uint32).reshape(-1)
    width = _varint_len(int(flat.max(initial=0)))  # bytes of the longest varint
    sizes = np.ones(flat.size, dtype=np.int8)
    for k in range(1, width):
        sizes += flat >= np.uint32(1 << (7 * k))
    out = np.empty((flat.size, width), dtype=np.uint8)
    for k in range(width):
        column = (flat >> np.uint32(7 * k)) & np.uint32(0x7F)
        if k < width - 1:
            column |= (sizes > k + 1).astype(np.uint32) << np.uint32(7)  # continuation bit
        out[:, k] = column
    keep = np.arange(width, dtype=np.int8) < sizes[:, None]
    return out[keep], sizes.reshape(values.shape).sum(axis=1, dtype=np.int64)


def encode_examples(features: dict[str, np.ndarray]) -> list[bytes]:
    """Serialized tf.train.Example protos, one per row: int64 feature `name` = features[name][i].

    Byte-identical to protobuf's deterministic serialization (map keys sorted). Neither
    tf.train.Example.SerializeToString() nor tensorflow-transform's ExampleProtoCoder promise a map
    order (the coder was seen to change it between calls), and shards must be byte-reproducible.
    Varints are built for all rows at once in numpy, and no worker needs to import TensorFlow.
    """
    names = sorted(features)
    encoded = [_packed_varints(features[name]) for name in names]
    datas = [data.tobytes() for data, _ in encoded]
    ends = [np.cumsum(sizes).tolist() for _, sizes in encoded]
    keys = [_field(0x0A, name.encode()) for name in names]
    wrappers: dict[tuple[bytes, int], bytes] = {}  # (key, payload length) -> the entry's bytes before the payload

    def entry(key: bytes, payload: bytes) -> bytes:
        size = len(payload)
        if (key, size) not in wrappers:
            int64_list = 1 + len(_varint(size)) + size
            feature = 1 + len(_varint(int64_list)) + int64_list
            body = len(key) + 1 + len(_varint(feature)) + feature
            wrappers[key, size] = (b"\n" + _varint(body) + key + b"\x12" + _varint(feature)
                              + b"\x1a" + _varint(int64_list) + b"\n" + _varint(size))
        return wrappers[key, size] + payload

    records, starts = [], [0] * len(names)
    for row in range(len(ends[0])):
        body = b"".join(entry(keys[i], datas[i][starts[i]:ends[i][row]]) for i in range(len(names)))
        records.append(b"\n" + _varint(len(body)) + body)
        starts = [e[row] for e in ends]
    return records


# ---------------------------------------------------------------- TFRecord framing


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord frame around `data` (what tf.io.TFRecordWriter writes)."""
    length = _LENGTH.pack(len(data))
    return length + _CRC.pack(_masked_crc(length)) + data + _CRC.pack(_masked_crc(data))


class CorruptRecordError(ValueError):
    """A TFRecord file whose framing or checksums are wrong."""


def read_records(f: BinaryIO, *, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """Yields the records of a TFRecord stream, checking both CRCs of every frame.

    Reads `chunk_bytes` at a time: remote file objects pay a round of bookkeeping per read call.

    Raises:
      CorruptRecordError: a truncated frame or a CRC mismatch (the message gives the byte offset).
    """
    header_bytes = _LENGTH.size + _CRC.size
    buffer, pos, offset, eof = b"", 0, 0, False

    def available(n: int) -> bool:
        nonlocal buffer, pos, eof
        while len(buffer) - pos < n and not eof:
            chunk = f.read(chunk_bytes)
            eof = not chunk
            buffer, pos = buffer[pos:] + chunk, 0
        return len(buffer) - pos >= n

    while available(1):
        if not available(header_bytes):
            raise CorruptRecordError(f"truncated record header at byte {offset}")
        length_bytes = buffer[pos:pos + _LENGTH.size]
        if _CRC.unpack_from(buffer, pos + _LENGTH.size)[0] != _masked_crc(length_bytes):
            raise CorruptRecordError(f"length checksum mismatch at byte {offset}")
        (length,) = _LENGTH.unpack(length_bytes)
        if not available(header_bytes + length + _CRC.size):
            raise CorruptRecordError(f"truncated record at byte {offset}")
        start = pos + header_bytes
        data = buffer[start:start + length]
        if _CRC.unpack_from(buffer, start + length)[0] != _masked_crc(data):
            raise CorruptRecordError(f"data checksum mismatch in the record at byte {offset}")
        pos = start + length + _CRC.size
        offset += FRAME_OVERHEAD_BYTES + length
        yield data
