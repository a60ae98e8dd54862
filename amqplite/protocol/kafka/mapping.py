"""Kafka records <-> AMQP messages on a stream: one record is one stream entry.

Why this mapping (docs/kafka.md has the table): an entry must read well from
both sides. An AMQP consumer sees the value as the body, the record headers as
its headers, the producer's time as the ``timestamp`` property and the key as
the routing key, which is where RabbitMQ's tools (and super streams' hash
routing) look for "the key that picked the partition". A routing key is a
shortstr (UTF-8, at most 255 bytes) and Kafka keys are any bytes, so the key
also travels exactly in the ``x-kafka-key`` header (a longstr: bytes kept as
they are); a key that is not such text leaves the routing key empty. What the
AMQP model cannot say is said in reserved ``x-kafka-*`` headers: a null value
(an AMQP body is never null) and a timestamp's milliseconds (the property holds
seconds). Read back by Kafka, an entry a Kafka producer wrote is the record it
sent; one an AMQP client published has the body as value, the routing key as
key when an exchange routed it (a super stream's partition key), no key when
it came through the default exchange (whose routing key is only the stream's
name), and the publisher's headers as record headers.

Pure functions and attrs types (sans-I/O: the broker expands stored batches with it,
so it lives beside the codec): the codec's record batches adapt to ``Record``
by field name.
"""

from __future__ import annotations

import decimal
import json
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from amqplite.protocol.codec import FieldArray, FieldTable, Timestamp
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from amqplite.protocol.streamrecord import OFFSET_HEADER

if TYPE_CHECKING:
    from amqplite.protocol.kafka.records import RecordBatch

#: the key, exactly (a longstr: any bytes)
KEY_HEADER = "x-kafka-key"
#: the record's timestamp in milliseconds, when the ``timestamp`` property (seconds)
#: does not hold it exactly
TIMESTAMP_HEADER = "x-kafka-timestamp"
#: true when the record's value was null (the body is then empty)
NULL_VALUE_HEADER = "x-kafka-value-null"
#: headers the mapping owns (and the stream's offset header): never record headers
RESERVED = frozenset({KEY_HEADER, TIMESTAMP_HEADER, NULL_VALUE_HEADER, OFFSET_HEADER})

Headers = Sequence[tuple[str, bytes | None]]


@attrs.define(slots=True)
class Record:
    """One record of a produced batch, as record batch v2 carries it."""

    offset_delta: int = 0
    #: milliseconds since the epoch (the batch's base timestamp plus the delta); -1: none
    timestamp: int = -1
    key: bytes | None = None
    value: bytes | None = None
    headers: Headers = ()


def produced(batch: RecordBatch) -> list[Record]:
    """A decoded produced batch's records with their own timestamps (base plus delta;
    -1 in a batch without times), as ``to_amqp`` takes them."""
    assert batch.records is not None
    base_ts = batch.base_timestamp
    if base_ts < 0:
        return [Record(r.offset_delta, -1, r.key, r.value, r.headers) for r in batch.records]
    return [Record(r.offset_delta, base_ts + r.timestamp_delta, r.key, r.value, r.headers)
            for r in batch.records]


@attrs.define(slots=True)
class LogRecord:
    """One record read back from a stream for Fetch: its offset and what it holds."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = attrs.field(factory=list)

    @property
    def size(self) -> int:
        """About what it takes in a record batch (what max_bytes counts)."""
        n = 16 + len(self.key or b"") + len(self.value or b"")
        for k, v in self.headers:
            n += 4 + len(k) + len(v or b"")
        return n


def routing_key_of(key: bytes | None) -> str:
    """The routing key an entry gets for ``key``: its text when that is UTF-8 of at
    most 255 bytes (a shortstr), else empty."""
    if not key or len(key) > 255:
        return ""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return ""


_u32 = struct.Struct(">I").pack
_u64 = struct.Struct(">Q").pack
_i64 = struct.Struct(">q").pack
#: property flags: headers, delivery_mode, timestamp
_HEADERS, _MODE, _TIME = 1 << 13, 1 << 12, 1 << 6
_KEY_NAME = bytes((len(KEY_HEADER),)) + KEY_HEADER.encode() + b"S"
_NULL_FIELD = bytes((len(NULL_VALUE_HEADER),)) + NULL_VALUE_HEADER.encode() + b"t\x01"
_TIME_NAME = bytes((len(TIMESTAMP_HEADER),)) + TIMESTAMP_HEADER.encode() + b"l"


def to_amqp(r: Record) -> tuple[str, bytes]:
    """(routing key, properties) of the entry for ``r``; its body is ``r.value or b""``.

    The properties are written here directly (what ``encode_properties`` makes of
    ``_to_amqp_table``'s table, a test holds them equal): a produce converts every
    record, and the generic encoder took half of a Kafka append's time. A name
    given twice takes the generic way (an array)."""
    fields: list[bytes] = []
    if r.headers:
        seen: set[str] = set()
        for name, value in r.headers:
            if name in RESERVED:
                continue
            if name in seen:
                return _to_amqp_table(r)
            seen.add(name)
            k = name.encode("utf-8")
            if len(k) > 255:
                raise ValueError(f"field table key longer than 255 bytes: {name[:40]!r}...")
            fields.append(bytes((len(k),)) + k + (
                b"V" if value is None else b"S" + _u32(len(value)) + value))
    key = r.key
    if key is not None:
        fields.append(_KEY_NAME + _u32(len(key)) + key)
    if r.value is None:
        fields.append(_NULL_FIELD)
    ts = r.timestamp
    flags = _MODE
    tail = b"\x02"
    if ts >= 0:
        flags |= _TIME
        tail += _u64(ts // 1000)
        if ts % 1000:
            fields.append(_TIME_NAME + _i64(ts))
    if fields:
        flags |= _HEADERS
        table = b"".join(fields)
        return routing_key_of(key), b"".join(
            (flags.to_bytes(2, "big"), _u32(len(table)), table, tail))
    return routing_key_of(key), flags.to_bytes(2, "big") + tail


def _to_amqp_table(r: Record) -> tuple[str, bytes]:
    """``to_amqp`` through a FieldTable and ``encode_properties``."""
    table = FieldTable()
    for name, value in r.headers:
        if name in RESERVED:
            continue  # the mapping's own: a record cannot forge them
        if name in table:  # Kafka allows a name twice, a table does not: an array
            prev = table[name]
            if not isinstance(prev, FieldArray):
                arr = FieldArray()
                arr.append_tagged(prev, table.tag_of(name))
                table.set(name, arr, "A")
                prev = arr
            prev.append_tagged(value, "V" if value is None else "S")
        else:
            table.set(name, value, "V" if value is None else "S")
    if r.key is not None:
        table.set(KEY_HEADER, r.key, "S")
    if r.value is None:
        table.set(NULL_VALUE_HEADER, True, "t")
    ts = r.timestamp
    seconds: int | None = None
    if ts >= 0:
        seconds = ts // 1000
        if ts % 1000:
            table.set(TIMESTAMP_HEADER, ts, "l")
    props = BasicProperties(headers=table or None, delivery_mode=2,
                            timestamp=seconds)
    return routing_key_of(r.key), encode_properties(props)


def _as_bytes(v: Any) -> bytes | None:
    """An AMQP header value as a Kafka header value."""
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    if isinstance(v, bool):
        return b"true" if v else b"false"
    if isinstance(v, int | float | decimal.Decimal):
        return str(int(v) if isinstance(v, Timestamp) else v).encode()
    # a table or an array (x-death, say): its JSON, which any consumer can read
    return json.dumps(_plain(v), separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogateescape")


def _plain(v: Any) -> Any:
    """A field value as JSON can hold it."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    if isinstance(v, Timestamp):
        return int(v)
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)


def _generic(offset: int, appended_us: int, exchange: str, routing_key: str,
             properties: bytes, body: bytes) -> LogRecord:
    """``from_amqp`` through the generic decoder only (tests hold the two equal)."""
    p = decode_properties(properties)
    return _record(offset, appended_us, exchange, routing_key, p.headers or {}, p.timestamp,
                   body)


def _headers(table: Mapping[str, Any]) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    for name, v in table.items():
        if name in RESERVED:
            continue
        if isinstance(v, list) and all(x is None or isinstance(x, str | bytes) for x in v):
            out.extend((name, _as_bytes(x)) for x in v)  # a name repeated (see to_amqp)
        else:
            out.append((name, _as_bytes(v)))
    return out


_u32_at = struct.Struct(">I").unpack_from
_q_at = struct.Struct(">q").unpack_from
_Q_at = struct.Struct(">Q").unpack_from


def _direct(raw: bytes) -> tuple[dict[str, Any], int | None] | None:
    """(headers, timestamp seconds) of properties as ``to_amqp`` writes them (headers,
    delivery mode and timestamp only; header values longstr, void, bool or long),
    read without the generic decoder; None for any other shape. Every Kafka-produced
    entry has this shape, and a Fetch reads each."""
    # flags: headers and delivery mode in the first octet, timestamp in the second
    if len(raw) < 2 or raw[0] & ~0x30 or raw[1] & ~0x40:
        return None
    flags = raw[0] << 8 | raw[1]
    table: dict[str, Any] = {}
    at = 2
    try:
        if flags & _HEADERS:
            end = at + 4 + _u32_at(raw, at)[0]
            at += 4
            while at < end:
                n = raw[at]
                name = raw[at + 1 : at + 1 + n].decode("utf-8")
                at += 1 + n
                tag = raw[at]
                at += 1
                if tag == 0x53:  # S
                    ln = _u32_at(raw, at)[0]
                    table[name] = raw[at + 4 : at + 4 + ln]
                    at += 4 + ln
                elif tag == 0x56:  # V
                    table[name] = None
                elif tag == 0x74 and raw[at] < 2:  # t
                    table[name] = raw[at] == 1
                    at += 1
                elif tag == 0x6C:  # l
                    table[name] = _q_at(raw, at)[0]
                    at += 8
                else:
                    return None
            if at != end:
                return None
        if flags & _MODE:
            at += 1
        ts = _Q_at(raw, at)[0] if flags & _TIME else None
    except (IndexError, UnicodeDecodeError, struct.error):
        return None
    return table, ts


def from_amqp(offset: int, appended_us: int, exchange: str, routing_key: str,
              properties: bytes, body: bytes) -> LogRecord:
    """The record Fetch returns for the stream entry at ``offset``."""
    fast = _direct(properties)
    if fast is None:
        return _generic(offset, appended_us, exchange, routing_key, properties, body)
    table, seconds = fast
    return _record(offset, appended_us, exchange, routing_key, table, seconds, body)


def record_time(appended_us: int, properties: bytes) -> int:
    """The timestamp (ms) ``from_amqp`` gives an entry, without building its record:
    ListOffsets by time reads only this of each entry it scans."""
    fast = _direct(properties)
    if fast is None:
        p = decode_properties(properties)
        return _time(p.headers or {}, p.timestamp, appended_us)
    return _time(fast[0], fast[1], appended_us)


def _time(table: Mapping[str, Any], seconds: int | None, appended_us: int) -> int:
    """A record's timestamp: the header a Kafka producer's time is kept in, else the
    AMQP timestamp, else the append time."""
    ms = table.get(TIMESTAMP_HEADER)
    if isinstance(ms, int) and not isinstance(ms, bool):
        return ms
    if seconds is not None:
        return int(seconds) * 1000
    return appended_us // 1000


def _record(offset: int, appended_us: int, exchange: str, routing_key: str,
            table: Mapping[str, Any], seconds: int | None, body: bytes) -> LogRecord:
    key: bytes | None
    k = table.get(KEY_HEADER)
    if isinstance(k, bytes | str):
        key = k if isinstance(k, bytes) else k.encode("utf-8", "surrogateescape")
    elif exchange and routing_key:
        key = routing_key.encode("utf-8", "surrogateescape")
    else:
        key = None
    value = None if table.get(NULL_VALUE_HEADER) is True else body
    return LogRecord(offset, _time(table, seconds, appended_us), key, value, _headers(table))
