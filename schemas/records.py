"""The wire contract of a shard: record features, the tf.train.Example encoding, TFRecord framing, the parse spec.

The preprocess writer and every reader (the trainer's tf.data pipeline, `lmshards inspect`, tests)
use these functions; nobody re-declares them. The bytes they produce are a promise to users who
keep shards for years: tests/schemas/test_shard_format_golden.py guards them.
"""

from __future__ import annotations

import math
import struct
from typing import Any, BinaryIO, Iterator, Sequence

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


class MalformedExampleError(ValueError):
    """A record that is not a tf.train.Example holding the expected int64 features."""


_WIRE_VARINT, _WIRE_64BIT, _WIRE_LENGTH, _WIRE_32BIT = 0, 1, 2, 5
# Field numbers of tf.train.Example and what it holds (tensorflow/core/example/{example,feature}.proto).
_EXAMPLE_FEATURES = _FEATURES_FEATURE = _ENTRY_KEY = _INT64_LIST_VALUE = 1
_ENTRY_VALUE = 2
_FEATURE_INT64_LIST = 3


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the varint at data[pos]."""
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
    raise MalformedExampleError("truncated varint")


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each field of the message in data[start:end].

    start:end spans a length-delimited field's payload, or a varint's bytes.
    """
    pos = start
    while pos < end:
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        value_start = pos
        if wire == _WIRE_VARINT:
            _, pos = _read_varint(data, pos)
        elif wire in (_WIRE_64BIT, _WIRE_32BIT):
            pos += 8 if wire == _WIRE_64BIT else 4
        elif wire == _WIRE_LENGTH:
            size, value_start = _read_varint(data, pos)
            pos = value_start + size
        else:
            raise MalformedExampleError(f"unsupported protobuf wire type {wire}")
        if pos > end:
            raise MalformedExampleError("a field runs past the end of its message")
        yield field, wire, value_start, pos


def _submessages(data: bytes, start: int, end: int, field: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each length-delimited `field` of the message in data[start:end]."""
    for number, wire, s, e in _fields(data, start, end):
        if number == field and wire == _WIRE_LENGTH:
            yield s, e


def _int64_list(record: bytes, start: int, end: int, name: str) -> bytes:
    """The packed varints of a tf.train.Feature (record[start:end]) that must hold an int64_list."""
    packed = []
    for list_start, list_end in _submessages(record, start, end, _FEATURE_INT64_LIST):
        for number, wire, s, e in _fields(record, list_start, list_end):
            if number == _INT64_LIST_VALUE and wire != _WIRE_LENGTH:
                raise MalformedExampleError(f"feature {name!r} is an unpacked int64 list; only packed is read")
            packed.append(record[s:e])
    if not packed and any(True for _ in _fields(record, start, end)):
        raise MalformedExampleError(f"feature {name!r} is not an int64 list")
    return b"".join(packed)


def _int64_features(record: bytes, names: dict[bytes, str]) -> dict[str, bytes]:
    """Feature name -> packed varints of its int64_list, for the wanted names (encoded name -> name)."""
    found = {}
    for features_start, features_end in _submessages(record, 0, len(record), _EXAMPLE_FEATURES):
        for entry_start, entry_end in _submessages(record, features_start, features_end, _FEATURES_FEATURE):
            key, value = b"", (entry_end, entry_end)
            for number, wire, s, e in _fields(record, entry_start, entry_end):
                if number == _ENTRY_KEY and wire == _WIRE_LENGTH:
                    key = record[s:e]
                elif number == _ENTRY_VALUE and wire == _WIRE_LENGTH:
                    value = (s, e)
            if key in names:
                found[names[key]] = _int64_list(record, *value, names[key])
    return found


def _decode_varints(data: np.ndarray) -> np.ndarray:
    """int64 values of the back-to-back varints in uint8 `data` (two's complement, as protobuf's int64)."""
    ends = np.flatnonzero(data < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    values = np.zeros(ends.size, dtype=np.uint64)
    for k in range(int(lengths.max(initial=0))):
        rows = np.flatnonzero(lengths > k)
        values[rows] |= (data[starts[rows] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return values.view(np.int64)


def decode_examples(records: Sequence[bytes], names: Sequence[str]) -> dict[str, np.ndarray]:
    """The int64 features `names` of serialized tf.train.Examples, as int64 arrays [len(records), length].

    What `tf.io.parse_example(records, parse_spec(...))` returns for fixed-length int64 features, without
    TensorFlow: the message structure is walked in Python, the values decoded in numpy all at once.

    Raises:
      MalformedExampleError: a record that is not an Example, lacks a feature, holds it as another type or
        unpacked, or a feature whose length differs between records.
    """
    wanted = {name.encode(): name for name in names}
    payloads: dict[str, list[bytes]] = {name: [] for name in names}
    for index, record in enumerate(records):
        found = _int64_features(record, wanted)
        for name in names:
            if name not in found:
                raise MalformedExampleError(f"record {index} has no int64 feature {name!r}")
            if found[name][-1:] >= b"\x80":
                raise MalformedExampleError(f"record {index}: truncated varint in feature {name!r}")
            payloads[name].append(found[name])
    decoded = {}
    for name in names:
        data = np.frombuffer(b"".join(payloads[name]), dtype=np.uint8)
        # Varints ended before each record's end: one varint ends at each byte < 0x80.
        ended = np.concatenate(([0], np.cumsum(data < 0x80)))
        record_ends = np.cumsum([0] + [len(p) for p in payloads[name]])
        lengths = np.diff(ended[record_ends])
        if lengths.size and (lengths != lengths[0]).any():
            raise MalformedExampleError(
                f"feature {name!r} has {lengths.min()}-{lengths.max()} values per record; expected one length"
            )
        decoded[name] = _decode_varints(data).reshape(len(records), int(lengths[0]) if lengths.size else 0)
    return decoded


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
