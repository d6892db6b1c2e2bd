"""The wire contract of a shard: record features, the tf.train.Example encoding, TFRecord framing, the parse spec.

The preprocess writer and every reader (the trainer's tf.data pipeline, `lmshards inspect`, tests)
use these functions; nobody re-declares them. The bytes they produce are a promise to users who
keep shards for years: tests/golden/test_shard_format_golden.py guards them.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import google_crc32c
import numpy as np

from lmshards.schemas.constants import (
    ATTENTION_MASK,
    FEATURE_DTYPE,
    FEATURE_NAMES,
    INPUT_IDS,
    PACKED_FEATURE_NAMES,
    POSITIONS,
    SEGMENT_IDS,
)

# TFRecord framing: uint64 length, masked CRC32C of the length, data, masked CRC32C of the data.
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
FRAME_OVERHEAD_BYTES = _LENGTH.size + 2 * _CRC.size
_CRC_MASK_DELTA = 0xA282EAD8


# ---------------------------------------------------------------- features and the parse spec


def feature_names(packed: bool) -> tuple[str, ...]:
    """The features of every record: PACKED_FEATURE_NAMES in a packed set, else FEATURE_NAMES."""
    return PACKED_FEATURE_NAMES if packed else FEATURE_NAMES


def feature_spec(seq_len: int, *, packed: bool = False) -> dict[str, dict[str, Any]]:
    """Name -> {dtype, shape} of every record feature, as recorded in the manifest."""
    return {name: {"dtype": FEATURE_DTYPE, "shape": [seq_len]} for name in feature_names(packed)}


def parse_spec(
    features: dict[str, dict[str, Any]], names: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The `tf.io.parse_example` spec of records with these features (a manifest's `features()`).

    names: parse only these features (default all). TensorFlow is imported here, so that
    writers and Dataflow workers never need it.
    """
    import tensorflow as tf

    wanted = names if names is not None else tuple(sorted(features))
    missing = [name for name in wanted if name not in features]
    if missing:
        raise KeyError(f"records have no feature {missing}; they have {sorted(features)}")
    return {
        name: tf.io.FixedLenFeature(
            features[name]["shape"], tf.dtypes.as_dtype(features[name]["dtype"])
        )
        for name in wanted
    }


# ---------------------------------------------------------------- sizes


def _varint_len(value: int) -> int:
    return max(1, math.ceil(value.bit_length() / 7))


def _field_len(payload: int) -> int:
    """Bytes of a length-delimited protobuf field with a one-byte tag and `payload` bytes."""
    return 1 + _varint_len(payload) + payload


def record_bytes_upper_bound(seq_len: int, vocab_size: int, feature_names: tuple[str, ...]) -> int:
    """Exact size of the largest framed record: a tf.train.Example of int64[seq_len] features.

    Every value is counted at the size of its feature's largest value (input ids below vocab_size,
    mask values 0/1, segment ids up to seq_len, positions below seq_len), so this bounds each record;
    shard counts derived from it keep shards at or below the target.
    """
    largest = {
        INPUT_IDS: max(vocab_size - 1, 1),
        ATTENTION_MASK: 1,
        SEGMENT_IDS: seq_len,
        POSITIONS: seq_len - 1,
    }
    features = 0
    for name in feature_names:
        values = seq_len * _varint_len(largest[name])
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
    if width == 1:  # every value is its own varint byte (a mask, segment ids of short rows)
        return flat.astype(np.uint8), np.full(values.shape[0], values.shape[1], dtype=np.int64)
    sizes = np.ones(flat.size, dtype=np.int8)
    for k in range(1, width):
        sizes += flat >= np.uint32(1 << (7 * k))
    out = np.empty((flat.size, width), dtype=np.uint8)
    for k in range(width):
        column = (flat >> np.uint32(7 * k)) & np.uint32(0x7F)
        if k < width - 1:
            column |= (sizes > k + 1).astype(np.uint32) << np.uint32(7)  # continuation bit
        out[:, k] = column
    # Which of each value's `width` bytes it uses, built a column at a time and applied with compress:
    # about 3x faster than a broadcast comparison and 2-D boolean indexing.
    keep = np.empty((flat.size, width), dtype=bool)
    keep[:, 0] = True
    for k in range(1, width):
        np.greater(sizes, k, out=keep[:, k])
    packed = np.compress(keep.reshape(-1), out.reshape(-1))
    return packed, sizes.reshape(values.shape).sum(axis=1, dtype=np.int64)


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
    wrappers: dict[
        tuple[bytes, int], bytes
    ] = {}  # (key, payload length) -> the entry's bytes before the payload

    def entry(key: bytes, payload: bytes) -> bytes:
        size = len(payload)
        if (key, size) not in wrappers:
            wrappers[key, size] = _entry_header(key, size)
        return wrappers[key, size] + payload

    records, starts = [], [0] * len(names)
    for row in range(len(ends[0])):
        body = b"".join(
            entry(keys[i], datas[i][starts[i] : ends[i][row]]) for i in range(len(names))
        )
        records.append(b"\n" + _varint(len(body)) + body)
        starts = [e[row] for e in ends]
    return records


def frame_examples(features: dict[str, np.ndarray]) -> bytes:
    """The TFRecord frames of encode_examples(features), one row a record, built for all rows at once.

    The same bytes as b"".join(map(frame_record, encode_examples(features))) (a test keeps them
    equal): each piece of every record (its varints, each entry's key and lengths, the frame's length
    and checksums) is placed into one buffer by array operations, and the only Python call per record
    is its data checksum, where the record-at-a-time path made about a dozen."""
    names = sorted(features)
    rows = len(features[names[0]]) if names else 0
    if rows == 0:
        return b""
    parts: list[
        tuple[np.ndarray, np.ndarray]
    ] = []  # (bytes, bytes per row) of each piece, in order
    body = np.zeros(rows, dtype=np.int64)
    for name in names:
        data, sizes = _packed_varints(features[name])
        parts += [_entry_headers(_field(0x0A, name.encode()), sizes), (data, sizes)]
        body += parts[-2][1] + sizes
    prefix_data, prefix_sizes = _packed_varints(body.reshape(-1, 1))  # b"\n" + varint(len(body))
    prefix = _with_tag(0x0A, prefix_data, prefix_sizes)
    record = prefix[1] + body
    frame = _LENGTH.size + _CRC.size + record + _CRC.size
    starts = np.cumsum(frame) - frame
    out = np.empty(int(frame.sum()), dtype=np.uint8)
    lengths = record.astype("<u8")
    _place_rows(out, starts, lengths.view(np.uint8).reshape(rows, _LENGTH.size))
    distinct, inverse = np.unique(lengths, return_inverse=True)  # few: one checksum each
    length_crcs = _masked_crcs([_LENGTH.pack(int(n)) for n in distinct])[inverse]
    _place_rows(out, starts + _LENGTH.size, length_crcs.view(np.uint8).reshape(rows, _CRC.size))
    record_starts = starts + _LENGTH.size + _CRC.size
    at = record_starts
    for data, sizes in [prefix, *parts]:
        _place(out, at, data, sizes)
        at = at + sizes
    flat = out.tobytes()  # the checksum takes bytes, not a view
    crcs = _masked_crcs([flat[a:b] for a, b in zip(record_starts.tolist(), at.tolist())])
    _place_rows(out, at, crcs.view(np.uint8).reshape(rows, _CRC.size))
    return out.tobytes()


def _entry_headers(key: bytes, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's bytes before its packed payload of `sizes` bytes in a Features map entry under `key`
    (encode_examples' entry wrapper), and their lengths: one header per distinct size, then gathered."""
    distinct, inverse = np.unique(sizes, return_inverse=True)
    headers = [_entry_header(key, int(size)) for size in distinct]
    widths = np.array([len(h) for h in headers], dtype=np.int64)
    table = np.zeros((len(headers), int(widths.max())), dtype=np.uint8)
    for i, header in enumerate(headers):
        table[i, : len(header)] = np.frombuffer(header, dtype=np.uint8)
    lengths = widths[inverse]
    keep = np.arange(table.shape[1]) < lengths[:, None]
    return table[inverse][keep], lengths


def _entry_header(key: bytes, size: int) -> bytes:
    """A Features map entry's bytes before a packed payload of `size` bytes."""
    int64_list = 1 + len(_varint(size)) + size
    feature = 1 + len(_varint(int64_list)) + int64_list
    body = len(key) + 1 + len(_varint(feature)) + feature
    return (
        b"\n"
        + _varint(body)
        + key
        + b"\x12"
        + _varint(feature)
        + b"\x1a"
        + _varint(int64_list)
        + b"\n"
        + _varint(size)
    )


def _with_tag(tag: int, data: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's bytes (data, sizes) with a one-byte tag before them."""
    out = np.empty(data.size + sizes.size, dtype=np.uint8)
    starts = np.cumsum(sizes + 1) - (sizes + 1)
    out[starts] = tag
    _place(out, starts + 1, data, sizes)
    return out, sizes + 1


def _place(out: np.ndarray, starts: np.ndarray, data: np.ndarray, sizes: np.ndarray) -> None:
    """Copies row i's `sizes[i]` bytes of `data` (the rows' bytes back to back) to out[starts[i]:]."""
    sources = np.cumsum(sizes) - sizes
    # int32 positions where they fit (a batch of records): half the memory traffic of int64.
    index = np.int32 if out.size < 1 << 31 else np.int64
    shift = (starts - sources).astype(index)
    out[np.repeat(shift, sizes) + np.arange(data.size, dtype=index)] = data


def _place_rows(out: np.ndarray, starts: np.ndarray, rows: np.ndarray) -> None:
    """Copies each row of the [n, width] `rows` to out[starts[i]:]."""
    out[starts[:, None] + np.arange(rows.shape[1])] = rows


def _masked_crcs(chunks: list[bytes]) -> np.ndarray:
    """Little-endian uint32 masked CRC32C of each chunk (_masked_crc, masked in numpy)."""
    crc = np.fromiter(map(google_crc32c.value, chunks), dtype=np.uint64, count=len(chunks))
    masked = (
        ((crc >> np.uint64(15)) | (crc << np.uint64(17))) + np.uint64(_CRC_MASK_DELTA)
    ) & np.uint64(0xFFFFFFFF)
    return masked.astype("<u4")


class MalformedExampleError(ValueError):
    """A record that is not a tf.train.Example holding the expected int64 features."""


# Protobuf wire types.
_WIRE_VARINT, _WIRE_64BIT, _WIRE_LENGTH, _WIRE_32BIT = 0, 1, 2, 5
# Field numbers in tensorflow/core/example/{example,feature}.proto.
_EXAMPLE_FEATURES = 1  # Example.features
_FEATURES_FEATURE = 1  # Features.feature, a map<string, Feature>: entries of key = 1, value = 2
_ENTRY_KEY, _ENTRY_VALUE = 1, 2
_FEATURE_INT64_LIST = 3  # Feature.int64_list (bytes_list = 1, float_list = 2)
_INT64_LIST_VALUE = 1  # Int64List.value, packed


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


def _field_at(data: bytes, pos: int, end: int) -> tuple[int, int, int, int]:
    """(field number, wire type, start, stop) of the field at data[pos] of a message that ends at `end`.

    start:stop spans a length-delimited field's payload, or a scalar's bytes; stop is where the next field starts.
    """
    # Keys fit one byte and lengths one or two in the records we read: those are read inline.
    key, start = (data[pos], pos + 1) if pos < end and data[pos] < 0x80 else _read_varint(data, pos)
    wire = key & 7
    if wire == _WIRE_LENGTH:
        if start < end and data[start] < 0x80:
            size, start = data[start], start + 1
        elif start + 1 < end and data[start + 1] < 0x80:
            size, start = (data[start] & 0x7F) | (data[start + 1] << 7), start + 2
        else:
            size, start = _read_varint(data, start)
        stop = start + size
    elif wire == _WIRE_VARINT:
        stop = _read_varint(data, start)[1]
    elif wire in (_WIRE_64BIT, _WIRE_32BIT):
        stop = start + (8 if wire == _WIRE_64BIT else 4)
    else:
        raise MalformedExampleError(f"unsupported protobuf wire type {wire}")
    if stop > end:
        raise MalformedExampleError("a field runs past the end of its message")
    return key >> 3, wire, start, stop


def _submessages(data: bytes, start: int, end: int, number: int) -> list[tuple[int, int]]:
    """(start, stop) of each length-delimited field `number` of the message in data[start:end]."""
    found, pos = [], start
    while pos < end:
        field, wire, value_start, pos = _field_at(data, pos, end)
        if field == number and wire == _WIRE_LENGTH:
            found.append((value_start, pos))
    return found


def _int64_list(record: bytes, start: int, end: int, name: str) -> bytes:
    """The packed varints of the tf.train.Feature in record[start:end], which must hold an int64_list."""
    packed, pos = [], start
    while pos < end:
        field, wire, list_pos, pos = _field_at(record, pos, end)
        if field != _FEATURE_INT64_LIST or wire != _WIRE_LENGTH:
            raise MalformedExampleError(f"feature {name!r} is not an int64 list")
        while list_pos < pos:
            number, value_wire, value_start, list_pos = _field_at(record, list_pos, pos)
            if number != _INT64_LIST_VALUE:
                continue
            if value_wire != _WIRE_LENGTH:
                raise MalformedExampleError(
                    f"feature {name!r} is an unpacked int64 list; only packed ones are read"
                )
            packed.append(record[value_start:list_pos])
    return b"".join(packed)


def _int64_features(record: bytes, names: dict[bytes, str]) -> dict[str, bytes]:
    """Feature name -> packed varints of its int64_list, for the wanted names (encoded name -> name)."""
    found = {}
    for features_start, features_stop in _submessages(record, 0, len(record), _EXAMPLE_FEATURES):
        for entry_start, entry_stop in _submessages(
            record, features_start, features_stop, _FEATURES_FEATURE
        ):
            key, value, pos = b"", (entry_stop, entry_stop), entry_start
            while pos < entry_stop:
                field, wire, value_start, pos = _field_at(record, pos, entry_stop)
                if field == _ENTRY_KEY and wire == _WIRE_LENGTH:
                    key = record[value_start:pos]
                elif field == _ENTRY_VALUE and wire == _WIRE_LENGTH:
                    value = (value_start, pos)
            if key in names:
                found[names[key]] = _int64_list(record, *value, names[key])
    return found


def _decode_varints(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, index of each one's last byte) of the back-to-back varints in uint8 `data`.

    Values are two's complement, as protobuf's int64. data must end with a complete varint.
    """
    ends = np.flatnonzero(data < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))[: ends.size]
    lengths = ends - starts + 1
    width = int(lengths.max(initial=0))
    dtype = np.uint32 if width <= 4 else np.uint64  # 4 varint bytes hold 28 bits: token ids fit
    values: np.ndarray = (data[starts] & 0x7F).astype(dtype)
    for k in range(1, width):
        byte = (data[np.minimum(starts + k, data.size - 1)] & 0x7F).astype(dtype)
        values |= np.where(lengths > k, byte << dtype(7 * k), dtype(0))
    return (values.astype(np.int64) if dtype is np.uint32 else values.view(np.int64)), ends


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
            if found[name] and found[name][-1] >= 0x80:
                raise MalformedExampleError(f"record {index}: truncated varint in feature {name!r}")
            payloads[name].append(found[name])
    decoded = {}
    for name in names:
        values, ends = _decode_varints(np.frombuffer(b"".join(payloads[name]), dtype=np.uint8))
        record_ends = np.cumsum([len(payload) for payload in payloads[name]], dtype=np.int64)
        lengths = np.diff(np.searchsorted(ends, record_ends), prepend=0)  # varints in each record
        if lengths.size and (lengths != lengths[0]).any():
            raise MalformedExampleError(
                f"feature {name!r} has {lengths.min()}-{lengths.max()} values per record; expected one length"
            )
        decoded[name] = values.reshape(len(records), int(lengths[0]) if lengths.size else 0)
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
        length_bytes = buffer[pos : pos + _LENGTH.size]
        if _CRC.unpack_from(buffer, pos + _LENGTH.size)[0] != _masked_crc(length_bytes):
            raise CorruptRecordError(f"length checksum mismatch at byte {offset}")
        (length,) = _LENGTH.unpack(length_bytes)
        if not available(header_bytes + length + _CRC.size):
            raise CorruptRecordError(f"truncated record at byte {offset}")
        start = pos + header_bytes
        data = buffer[start : start + length]
        if _CRC.unpack_from(buffer, start + length)[0] != _masked_crc(data):
            raise CorruptRecordError(f"data checksum mismatch in the record at byte {offset}")
        pos = start + length + _CRC.size
        offset += FRAME_OVERHEAD_BYTES + length
        yield data
