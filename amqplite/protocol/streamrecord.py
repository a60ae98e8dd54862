"""A stream entry as stored: the pieces of its basic.deliver frames, ready to send.

A record is a fixed head, ``>qqHII`` = (append time in µs, message key, route
length, properties length, body length), then the route (exchange and routing
key as the two shortstrs basic.deliver carries after ``redelivered``), the
content properties (already holding ``x-stream-offset``: the offset is known
when the broker appends) and the body. A stream chunk (``stream_chunks.data``)
is the records of consecutive offsets one after another; a record's offset is
the chunk's first offset plus its index, so the records carry none.

A Kafka record batch produced to a stream is stored as it came, as one record
that spans one offset per Kafka record (``pack_batch``): the route length is
``BATCH`` (no route, no properties), the properties length holds the number of
offsets, the body is the batch (its base offset as the producer sent it; Fetch
rebases it). Walkers advance by that span; an AMQP reader gets the batch's
records expanded (``amqplite.protocol.kafka.stored``).

Why this shape: delivering an entry then costs slicing, not a decode and
re-encode of its properties (the header used to be added at every delivery,
for every reader), and a chunk is parsed by walking fixed heads. Pure bytes
work; the broker, the store (which packs chunks and upgrades old rows), the
frame writer and the admin API share it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

__all__ = ["BATCH", "HEAD", "HEAD_SIZE", "OFFSET_HEADER", "decode", "entries", "pack",
           "pack_batch", "pack_spliced", "route", "span", "walk"]

HEAD = struct.Struct(">qqHII")
HEAD_SIZE = HEAD.size
_unpack_head = HEAD.unpack_from
_pack_head = HEAD.pack
_pack_long = struct.Struct(">q").pack
#: the route length that marks a stored Kafka record batch (a route is at most 512)
BATCH = 0xFFFF
#: the header (a long, as RabbitMQ's) each entry's properties carry its offset in; also
#: the name of the consume argument saying where a stream consumer starts
OFFSET_HEADER = "x-stream-offset"


def route(exchange: str, routing_key: str) -> bytes:
    """The route bytes of a record: exchange and routing key as shortstrs."""
    ex = exchange.encode("utf-8", "surrogateescape")
    rk = routing_key.encode("utf-8", "surrogateescape")
    if len(ex) > 255 or len(rk) > 255:
        raise ValueError("shortstr longer than 255 bytes")
    return bytes((len(ex),)) + ex + bytes((len(rk),)) + rk


def pack(ts_us: int, key: int, route_bytes: bytes, properties: bytes, body: bytes) -> bytes:
    """One record (``properties`` as they are to be delivered)."""
    return b"".join((HEAD.pack(ts_us, key, len(route_bytes), len(properties), len(body)),
                     route_bytes, properties, body))


def pack_spliced(ts_us: int, key: int, route_bytes: bytes, before: bytes, value: int,
                 after: bytes, body: bytes) -> bytes:
    """``pack`` with the properties ``before + value (>q) + after``
    (``properties.long_header_splice``): the offset header spliced in by the same
    join that builds the record, the properties' bytes copied once."""
    return b"".join((_pack_head(ts_us, key, len(route_bytes), len(before) + 8 + len(after),
                                len(body)),
                     route_bytes, before, _pack_long(value), after, body))


def pack_batch(ts_us: int, key: int, count: int, batch: bytes | memoryview) -> bytes:
    """A Kafka record batch of ``count`` records as one record spanning ``count`` offsets."""
    return _pack_head(ts_us, key, BATCH, count, len(batch)) + batch


def walk(data: bytes, first_offset: int, count: int, lo: int = 0,
         ) -> Iterator[tuple[int, int, int]]:
    """(offset, append time µs, record start) of each record at offset >= ``lo``; a
    stored batch (``BATCH``) is one record at its first offset, yielded when any of
    its offsets is at or past ``lo``."""
    at = 0
    off = first_offset
    end = first_offset + count
    while off < end:
        ts, _key, rl, pl, bl = _unpack_head(data, at)
        if rl == BATCH:
            if off + pl > lo:
                yield off, ts, at
            off += pl
            at += HEAD_SIZE + bl
            continue
        if off >= lo:
            yield off, ts, at
        off += 1
        at += HEAD_SIZE + rl + pl + bl


def span(data: bytes, at: int) -> int:
    """Offsets the record at ``at`` spans: its batch's records, else 1."""
    _ts, _key, rl, pl, _bl = _unpack_head(data, at)
    return int(pl) if rl == BATCH else 1


def decode(data: bytes, at: int) -> tuple[int, int, str, str, bytes, bytes]:
    """(append time µs, message key, exchange, routing key, properties, body) of the
    record at ``at`` (for the admin API and tests; delivery slices instead)."""
    ts, key, rl, pl, bl = _unpack_head(data, at)
    r = at + HEAD_SIZE
    n = data[r]
    exchange = data[r + 1 : r + 1 + n].decode("utf-8", "surrogateescape")
    rk = data[r + 2 + n : r + rl].decode("utf-8", "surrogateescape")
    p = r + rl
    return ts, key, exchange, rk, bytes(data[p : p + pl]), bytes(data[p + pl : p + pl + bl])


def entries(chunks: Sequence[tuple[int, int, bytes]], lo: int = 0,
            ) -> Iterator[tuple[int, bytes, int]]:
    """(offset, chunk data, record start) of every record at offset >= ``lo`` in
    ``chunks`` as ``Store.fetch_stream`` returns them (first offset, count, data); a
    stored batch comes once, at its first offset (see ``walk``, ``span``)."""
    for first, count, data in chunks:
        for off, _ts, at in walk(data, first, count, lo):
            yield off, data, at
