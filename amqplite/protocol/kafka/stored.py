"""Kafka record batches kept as they came, read back by Kafka and by AMQP.

A Produce's batch is stored as one stream record spanning one offset per Kafka
record (``streamrecord.pack_batch``), so a Fetch serves it with only its base
offset patched (``records.rebased_pieces``): no record is decoded, converted or
encoded on either side for Kafka-to-Kafka traffic. An AMQP (or STOMP, or admin)
reader still sees each record as its own stream entry with its own
``x-stream-offset``: ``expand`` builds those entries, exactly what a produce used
to store per record (``mapping.to_amqp``), the first time such a reader reaches
the batch. The cost of the conversion moves from every produce to the readers
that need it.

Pure bytes in, bytes out (sans-I/O).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from amqplite.protocol import streamrecord
from amqplite.protocol.kafka.mapping import produced, record_time, to_amqp
from amqplite.protocol.kafka.records import (
    HEADER_SIZE,
    RecordBatch,
    decode_batch,
    read_batch_header,
)
from amqplite.protocol.properties import with_long_header
from amqplite.protocol.streamrecord import OFFSET_HEADER

_HEAD = streamrecord.HEAD
_HEAD_SIZE = streamrecord.HEAD_SIZE
BATCH = streamrecord.BATCH


def storable(batch: RecordBatch) -> bool:
    """Whether a decoded produced batch can be stored as it came: its offset deltas
    are 0..n-1 in order (so a rebased batch gives each record the offset the broker
    assigned) and every record converts to an AMQP entry (``expand`` cannot fail
    later). Otherwise the records are appended one by one, as AMQP messages."""
    records = batch.records
    if not records or batch.record_count != len(records) \
            or batch.last_offset_delta != len(records) - 1:
        return False
    for i, r in enumerate(records):
        if r.offset_delta != i:
            return False
        for name, _v in r.headers:
            if len(name) > 63 and len(name.encode("utf-8")) > 255:  # no AMQP table holds it
                return False
    return True


def batch_bytes(data: bytes, at: int) -> memoryview:
    """The Kafka batch of the stored record at ``at`` (a ``BATCH`` record)."""
    bl = _HEAD.unpack_from(data, at)[4]
    start = at + _HEAD_SIZE
    return memoryview(data)[start:start + bl]


def expand(data: bytes, at: int, base_offset: int) -> tuple[bytes, list[int]]:
    """The stream records of the stored batch at ``at`` (its first offset
    ``base_offset``): one per Kafka record, as an AMQP reader gets them, back to
    back, and where each starts."""
    ts_us, key, _rl, _count, _bl = _HEAD.unpack_from(data, at)
    batch = decode_batch(batch_bytes(data, at), check_crc=False)
    pack = streamrecord.pack
    route = streamrecord.route
    routes: dict[str, bytes] = {}
    parts: list[bytes] = []
    starts: list[int] = []
    pos = 0
    for i, r in enumerate(produced(batch)):  # storable: offset deltas are 0..n-1
        rk, props = to_amqp(r)
        rb = routes.get(rk)
        if rb is None:
            rb = routes[rk] = route("", rk)
        one = pack(ts_us, key, rb, with_long_header(props, OFFSET_HEADER, base_offset + i),
                   r.value or b"")
        starts.append(pos)
        pos += len(one)
        parts.append(one)
    return b"".join(parts), starts


def entries(chunks: Sequence[tuple[int, int, bytes]], lo: int = 0,
            ) -> Iterator[tuple[int, bytes, int]]:
    """``streamrecord.entries`` with every stored batch expanded: (offset, data, record
    start) of each entry at offset >= ``lo``, one per offset, as AMQP sees them."""
    for off, data, at in streamrecord.entries(chunks, lo):
        if _HEAD.unpack_from(data, at)[2] != BATCH:
            yield off, data, at
            continue
        exp, starts = expand(data, at, off)
        for i, s in enumerate(starts):
            if off + i >= lo:
                yield off + i, exp, s


def record_times(chunks: Sequence[tuple[int, int, bytes]], lo: int, at_least_ms: int,
                 ) -> Iterator[tuple[int, int]]:
    """(offset, the record's Kafka timestamp in ms) of each entry at offset >= ``lo``:
    its CreateTime as Fetch serves it (a stored batch's record time; an AMQP entry's
    mapped time, else its append time). A stored batch whose max timestamp is below
    ``at_least_ms`` is not decoded: it yields its last offset with -1."""
    for off, data, at in streamrecord.entries(chunks, lo):
        ts_us, _key, rl, count, _bl = _HEAD.unpack_from(data, at)
        if rl != BATCH:  # ``count`` is its properties' length: only they are read
            p = at + _HEAD_SIZE + rl
            yield off, record_time(ts_us, data[p:p + count])
            continue
        raw = batch_bytes(data, at)
        head = read_batch_header(raw, 0, check_crc=False)
        if head.base_timestamp < 0:  # a batch without times: its append time
            for i in range(max(lo - off, 0), count):
                yield off + i, ts_us // 1000
            continue
        if head.max_timestamp < at_least_ms:
            yield off + count - 1, -1
            continue
        batch = decode_batch(raw, check_crc=False)
        assert batch.records is not None
        for i, r in enumerate(batch.records):
            if off + i >= lo:
                yield off + i, batch.base_timestamp + r.timestamp_delta


__all__ = ["HEADER_SIZE", "batch_bytes", "entries", "expand", "record_times", "storable"]
