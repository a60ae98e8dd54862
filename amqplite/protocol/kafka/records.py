"""Kafka record batches (magic v2): decode with CRC-32C and decompression, encode, re-base.

Layout (61-byte header, then the records, compressed as a whole)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordCount int32 | records...

The CRC covers ``attributes`` to the end; ``baseOffset`` and the leader epoch lie
outside it, so a stored batch is served by Fetch with only those two patched
(:func:`rebase_batch`) and never re-encoded. Message sets v0/v1 (magic 0/1)
raise :class:`CodecError`: Produce v3+ requires v2, so the clients served
never send them, and the session answers such a partition with Kafka's
UNSUPPORTED_FOR_MESSAGE_FORMAT (43) as a broker would for a batch it cannot
store; any other refusal here (CRC, lengths, decompression) is CORRUPT_MESSAGE (2).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import cramjam
import crc32c

from amqplite.protocol.kafka.primitives import CodecError, read_uvarint, read_varint, varint

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
#: the bound on one batch's decompressed records (a decompression bomb stops here)
DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_PREFIX = struct.Struct(">qiib")  # up to magic: what rebase and the CRC-less checks read
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount: the CRC'd header part
_REBASE = struct.Struct(">qii")
_INT32 = struct.Struct(">i")
_CRC_START = 21  # attributes
_LENGTH_BASE = 12  # batchLength counts from partitionLeaderEpoch: total = batchLength + 12
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
_XERIAL_BLOCK = 32 * 1024


class Record:
    """One record of a batch; its offset is the batch's base offset plus ``offset_delta``."""

    __slots__ = ("attributes", "headers", "key", "offset_delta", "timestamp_delta", "value")

    def __init__(self, offset_delta: int, timestamp_delta: int, key: bytes | None,
                 value: bytes | None, headers: Sequence[tuple[str, bytes | None]] = (),
                 attributes: int = 0) -> None:
        self.attributes = attributes
        self.timestamp_delta = timestamp_delta
        self.offset_delta = offset_delta
        self.key = key
        self.value = value
        self.headers = list(headers)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and all(
            getattr(self, a) == getattr(other, a) for a in self.__slots__)

    def __repr__(self) -> str:
        return (f"Record(offset_delta={self.offset_delta}, timestamp_delta="
                f"{self.timestamp_delta}, key={self.key!r}, value={self.value!r}, "
                f"headers={self.headers!r})")


class RecordBatch:
    """A batch's header fields, and its records once decoded (``records`` is None before)."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "record_count",
        "records",
    )

    def __init__(self, fields: tuple) -> None:
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
         self.crc, self.attributes, self.last_offset_delta, self.base_timestamp,
         self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
         self.record_count) = fields
        self.records: list[Record] | None = None

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> int:
        """0: CreateTime (the producer's clock), 1: LogAppendTime (the broker's)."""
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def size(self) -> int:
        """Bytes of the whole batch on the wire."""
        return self.batch_length + _LENGTH_BASE

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


# ---- reading --------------------------------------------------------------------------

def read_batch_header(buf: Any, pos: int = 0, *, check_crc: bool = True) -> RecordBatch:
    """The header of the batch at ``buf[pos:]``, checked (magic, lengths, CRC-32C), records
    not read: enough to validate a Produce and store the batch as it came."""
    if len(buf) - pos < HEADER_SIZE:
        if len(buf) - pos >= 17 and _PREFIX.unpack_from(buf, pos)[3] != 2:
            raise CodecError(f"record batch magic {_PREFIX.unpack_from(buf, pos)[3]}, "
                             "only v2 is served")
        raise CodecError(f"record batch of {len(buf) - pos} bytes is shorter than a header")
    batch = RecordBatch(_HEADER.unpack_from(buf, pos))
    if batch.magic != 2:
        raise CodecError(f"record batch magic {batch.magic}: only v2 is served")
    end = pos + batch.size
    if batch.batch_length < HEADER_SIZE - _LENGTH_BASE or end > len(buf):
        raise CodecError(f"record batch length {batch.batch_length} disagrees with the "
                         f"{len(buf) - pos} bytes there")
    if batch.record_count < 0 or batch.last_offset_delta < 0:
        raise CodecError("negative record count or offset delta")
    if check_crc:
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        if crc32c.crc32c(view[pos + _CRC_START:end]) != batch.crc:
            raise CodecError("record batch CRC-32C mismatch")
    return batch


def split_batches(data: Any, *, allow_partial: bool = False) -> list[memoryview]:
    """The batches of a ``records`` field, each a view of its exact bytes.

    Produce must carry whole batches (a short tail is an error); a Fetch
    response may end in a partial batch, which a reader drops (``allow_partial``).
    """
    view = data if isinstance(data, memoryview) else memoryview(data)
    out = []
    pos, n = 0, len(view)
    while pos < n:
        if n - pos < _LENGTH_BASE:
            if allow_partial:
                break
            raise CodecError(f"{n - pos} stray bytes after the last record batch")
        size = _INT32.unpack_from(view, pos + 8)[0] + _LENGTH_BASE
        if size < HEADER_SIZE:
            raise CodecError(f"record batch length {size - _LENGTH_BASE} is below a header")
        if pos + size > n:
            if allow_partial:
                break
            raise CodecError("record batch length runs past the records field")
        out.append(view[pos:pos + size])
        pos += size
    return out


def decode_batch(buf: Any, *, check_crc: bool = True,
                 max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> RecordBatch:
    """A whole batch, records included (``buf`` holds exactly one batch)."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    batch = read_batch_header(view, 0, check_crc=check_crc)
    if batch.size != len(view):
        raise CodecError(f"record batch length {batch.batch_length} disagrees with the "
                         f"{len(view)} bytes given")
    body = view[HEADER_SIZE:]
    codec = batch.compression
    if codec != NONE:
        body = decompress(codec, body, max_uncompressed)
    batch.records = _read_records(body, batch.record_count)
    return batch


def _read_records(data: Any, count: int) -> list[Record]:
    """The records section. One copy to ``bytes`` first: indexing and slicing bytes is
    cheaper than a memoryview, and the slices are the keys and values handed out.
    One-byte varints (most lengths, deltas and counts) are decoded inline."""
    buf = bytes(data)
    n = len(buf)
    if count > n:  # every record takes at least 7 bytes; refuse before looping
        raise CodecError(f"record count {count} exceeds the {n} bytes of records")
    records: list[Record] = []
    append = records.append
    pos = 0
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = read_varint(buf, pos)
            end = pos + length
            if length < 6 or end > n:
                raise CodecError(f"record length {length} disagrees with the batch")
            attributes = buf[pos]
            b = buf[pos + 1]
            if b < 0x80:
                ts, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts, pos = read_varint(buf, pos + 1)
            b = buf[pos]
            if b < 0x80:
                off, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                off, pos = read_varint(buf, pos)
            key, pos = _read_blob(buf, pos, end)
            value, pos = _read_blob(buf, pos, end)
            b = buf[pos]
            if b == 0:
                headers: list[tuple[str, bytes | None]] = []
                pos += 1
            else:
                headers, pos = _read_headers(buf, pos, end)
            if pos != end:
                raise CodecError(f"record length {length} disagrees with its fields")
            append(Record(off, ts, key, value, headers, attributes))
    except (IndexError, UnicodeDecodeError) as e:
        raise CodecError(f"record: {e}") from None
    if pos != n:
        raise CodecError(f"{n - pos} bytes after the batch's {count} records")
    return records


def _read_headers(buf: bytes, pos: int, end: int) -> tuple[list, int]:
    hcount, pos = read_varint(buf, pos)
    if hcount < 0 or hcount > end - pos:
        raise CodecError(f"record header count {hcount}")
    headers = []
    for _h in range(hcount):
        hkey, pos = _read_blob(buf, pos, end)
        if hkey is None:
            raise CodecError("record header with a null key")
        hval, pos = _read_blob(buf, pos, end)
        headers.append((str(hkey, "utf-8"), hval))
    return headers, pos


def _read_blob(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    b = buf[pos]
    if b < 0x80:
        size, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        size, pos = read_varint(buf, pos)
    if size < 0:
        if size != -1:
            raise CodecError(f"record field length {size}")
        return None, pos
    stop = pos + size
    if stop > end:
        raise CodecError("record field runs past its record")
    return buf[pos:stop], stop


# ---- compression ----------------------------------------------------------------------

_STREAM_CODECS: dict[int, Any] = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}


def decompress(codec: int, data: Any, limit: int = DEFAULT_MAX_UNCOMPRESSED) -> memoryview:
    """Decompressed records, never more than ``limit`` bytes (a bomb is a CodecError).

    gzip, lz4 (frame format) and zstd decompress into a fixed buffer that grows
    fourfold up to ``limit``; cramjam stops at the buffer's end rather than
    allocating past it. Snappy's sizes are declared up front and checked first.
    """
    if codec == SNAPPY:
        return _snappy_decompress(bytes(data), limit)
    mod = _STREAM_CODECS.get(codec)
    if mod is None:
        raise CodecError(f"unknown compression codec {codec}")
    size = min(limit, max(64 * 1024, len(data) * 8))
    while True:
        out = bytearray(size)
        try:
            n = mod.decompress_into(bytes(data), out)
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise CodecError(f"{CODEC_NAMES[codec]}: {e}") from None
            if size >= limit:
                raise CodecError(f"{CODEC_NAMES[codec]} records decompress past "
                                 f"{limit} bytes") from None
            size = min(limit, size * 4)
            continue
        return memoryview(out)[:n]


def _snappy_raw(data: bytes, limit: int) -> bytes:
    try:
        declared, _pos = read_uvarint(data, 0)
    except IndexError:
        raise CodecError("truncated snappy block length") from None
    if declared > limit:
        raise CodecError(f"snappy block declares {declared} bytes, over {limit}")
    out = bytearray(declared)
    try:
        n = cramjam.snappy.decompress_raw_into(data, out)
    except cramjam.DecompressionError as e:
        raise CodecError(f"snappy: {e}") from None
    return bytes(out[:n])


def _snappy_decompress(data: bytes, limit: int) -> memoryview:
    """Raw snappy (librdkafka, Go clients) or xerial's framing (Java clients, kafka-python)."""
    if not data.startswith(_XERIAL_MAGIC):
        return memoryview(_snappy_raw(data, limit))
    if len(data) < len(_XERIAL_HEADER):
        raise CodecError("truncated xerial snappy header")
    parts = []
    total = 0
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if len(data) - pos < 4:
            raise CodecError("truncated xerial snappy block length")
        n = _INT32.unpack_from(data, pos)[0]
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CodecError(f"xerial snappy block length {n} runs past the data")
        chunk = _snappy_raw(data[pos:pos + n], limit - total)
        total += len(chunk)
        parts.append(chunk)
        pos += n
    return memoryview(b"".join(parts))


def compress(codec: int, data: Any) -> bytes:
    """Records compressed as Kafka's clients expect (snappy in xerial framing, which
    every client reads; lz4 in the LZ4 frame format)."""
    if codec == NONE:
        return bytes(data)
    if codec == SNAPPY:
        raw = bytes(data)
        parts = [_XERIAL_HEADER]
        for i in range(0, len(raw), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(raw[i:i + _XERIAL_BLOCK]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    mod = _STREAM_CODECS.get(codec)
    if mod is None:
        raise ValueError(f"unknown compression codec {codec}")
    return bytes(mod.compress(bytes(data)))


# ---- writing --------------------------------------------------------------------------

def _blob(value: bytes | None, out: bytearray) -> None:
    if value is None:
        out += b"\x01"  # zigzag(-1)
    else:
        out += varint(len(value))
        out += value


def encode_records(records: Sequence[Record]) -> bytearray:
    """The uncompressed records section of a batch."""
    body = bytearray()
    for r in records:
        rec = bytearray((r.attributes,))
        rec += varint(r.timestamp_delta)
        rec += varint(r.offset_delta)
        _blob(r.key, rec)
        _blob(r.value, rec)
        rec += varint(len(r.headers))
        for hkey, hval in r.headers:
            _blob(hkey.encode("utf-8"), rec)
            _blob(hval, rec)
        body += varint(len(rec))
        body += rec
    return body


def encode_batch(records: Sequence[Record], *, base_offset: int = 0,
                 base_timestamp: int = 0, compression: int = NONE,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 partition_leader_epoch: int = -1, log_append_time: bool = False,
                 transactional: bool = False, control: bool = False,
                 max_timestamp: int | None = None) -> bytes:
    """One v2 batch of ``records`` (offset and timestamp deltas taken as given)."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    attributes = compression & 0x07
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    if max_timestamp is None:
        max_timestamp = base_timestamp + max(r.timestamp_delta for r in records)
    last_delta = max(r.offset_delta for r in records)
    payload = compress(compression, encode_records(records))
    tail = _TAIL.pack(attributes, last_delta, base_timestamp, max_timestamp, producer_id,
                      producer_epoch, base_sequence, len(records)) + payload
    crc = crc32c.crc32c(tail)
    return _PREFIX.pack(base_offset, len(tail) + 9, partition_leader_epoch, 2) + \
        struct.pack(">I", crc) + tail


def rebase_batch(batch: Any, base_offset: int,
                 partition_leader_epoch: int | None = None) -> bytes:
    """A stored batch with a new base offset (and leader epoch): two fields outside the
    CRC, so the CRC, the compression and every record stay as they were."""
    view = batch if isinstance(batch, memoryview) else memoryview(batch)
    length = _INT32.unpack_from(view, 8)[0]
    epoch = _INT32.unpack_from(view, 12)[0] if partition_leader_epoch is None \
        else partition_leader_epoch
    return _REBASE.pack(base_offset, length, epoch) + view[16:]


def rebased_pieces(batch: Any, base_offset: int,
                   partition_leader_epoch: int = -1) -> tuple[bytes, memoryview]:
    """:func:`rebase_batch` without the copy: a 16-byte head and a view of the rest,
    for the Fetch encoder to join straight into the response."""
    view = batch if isinstance(batch, memoryview) else memoryview(batch)
    return (_REBASE.pack(base_offset, _INT32.unpack_from(view, 8)[0],
                         partition_leader_epoch), view[16:])


def encode_empty_batch(base_offset: int, last_offset: int, timestamp: int = 0) -> bytes:
    """A batch of no records spanning ``base_offset..last_offset``: what a Fetch answers
    for offsets that hold nothing (as Kafka after compaction), so the consumer moves
    past them instead of asking for them again."""
    tail = _TAIL.pack(0, last_offset - base_offset, timestamp, timestamp, -1, -1, -1, 0)
    return _PREFIX.pack(base_offset, len(tail) + 9, -1, 2) + \
        struct.pack(">I", crc32c.crc32c(tail)) + tail
