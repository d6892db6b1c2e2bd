"""Pure functions of the shuffle -> shard -> write stages: shard counts, the seeded permutation, TFRecord framing.

The global shuffle needs no sort: block i of N (numbered group by group) goes to position
permute(i) of a seeded bijection of [0, N), and position p to shard p * S // N, so shards hold
N // S or N // S + 1 records whatever the runner, worker count or bundle sizes.
"""

from __future__ import annotations

import math
import struct
from typing import BinaryIO, Iterator

import google_crc32c
import numpy as np

DEFAULT_TARGET_SHARD_MB = 128.0
DEFAULT_SHARD_MULTIPLE = 8
MB = 1 << 20

# TFRecord framing: uint64 length, masked CRC32C of the length, data, masked CRC32C of the data.
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
FRAME_OVERHEAD_BYTES = _LENGTH.size + 2 * _CRC.size
_CRC_MASK_DELTA = 0xA282EAD8

_FEISTEL_ROUNDS = 4
_U64 = np.uint64


# ---------------------------------------------------------------- shard counts


def num_shards_for(total_bytes: int, *, target_shard_bytes: float, multiple: int, num_shards: int | None = None) -> int:
    """Shards for a split: `num_shards` if given, else ceil(total_bytes / target), rounded up to `multiple`.

    A split with no bytes gets no shards.
    """
    if total_bytes <= 0:
        return 0
    count = num_shards if num_shards else math.ceil(total_bytes / target_shard_bytes)
    return max(multiple, math.ceil(count / multiple) * multiple)


def shard_of(positions: np.ndarray, num_records: int, num_shards: int) -> np.ndarray:
    """Shard of each shuffled position: contiguous ranges whose sizes differ by at most 1."""
    return (positions.astype(np.int64) * num_shards) // num_records



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


# ---------------------------------------------------------------- the permutation


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _feistel(x: np.ndarray, *, half_bits: int, keys: np.ndarray) -> np.ndarray:
    mask = _U64((1 << half_bits) - 1)
    left, right = x >> _U64(half_bits), x & mask
    for key in keys:
        left, right = right, left ^ (_mix64(right ^ key) & mask)
    return (left << _U64(half_bits)) | right


def permute(indices: np.ndarray, n: int, seed: int) -> np.ndarray:
    """A seeded bijection of [0, n) applied to `indices` (a Feistel network with cycle walking).

    Pure and O(1) in memory: any subset of indices can be permuted independently, on any worker.
    """
    indices = np.asarray(indices, dtype=np.uint64)
    if n <= 1:
        return indices.astype(np.int64)
    half_bits = max(1, math.ceil((n - 1).bit_length() / 2))
    with np.errstate(over="ignore"):
        keys = _mix64(np.arange(_FEISTEL_ROUNDS, dtype=np.uint64) + _U64(seed % (1 << 64)) * _U64(_FEISTEL_ROUNDS + 1))
        out = _feistel(indices, half_bits=half_bits, keys=keys)
        # Cycle walking: the network permutes [0, 4^half_bits); re-apply until inside [0, n).
        outside = out >= _U64(n)
        while outside.any():
            out[outside] = _feistel(out[outside], half_bits=half_bits, keys=keys)
            outside = out >= _U64(n)
    return out.astype(np.int64)


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
