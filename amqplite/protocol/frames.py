"""Frame encoding, with hand-specialised paths for content-bearing replies.

Delivering a message is the broker's hottest outbound path, so
:func:`write_deliver` packs basic.deliver + content header + body frames
straight into one ``bytearray`` without building a method object.
Every ``write_*`` appends to ``out``; the ``encode_*`` twins return bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, Protocol

from amqplite.protocol.spec import (
    BASIC,
    FRAME_BODY,
    FRAME_HEARTBEAT,
    FRAME_OVERHEAD,
)
from amqplite.protocol.streamrecord import HEAD as RECORD_HEAD
from amqplite.protocol.streamrecord import HEAD_SIZE as RECORD_HEAD_SIZE

__all__ = [
    "HEARTBEAT_FRAME",
    "encode_content",
    "encode_deliver",
    "encode_frame",
    "encode_get_ok",
    "encode_return",
    "write_content",
    "write_deliver",
    "write_frame",
    "write_get_ok",
    "write_return",
    "write_stream_deliveries",
]

_FRAME_HEAD: Final = struct.Struct(">BHI")
# method frame head + class id + method id
_METHOD_HEAD: Final = struct.Struct(">BHIHH")
# header frame: type, channel, size, class, weight, body size
_HEADER_FRAME: Final = struct.Struct(">BHIHHQ")
_QB: Final = struct.Struct(">QB")
_HB: Final = struct.Struct(">H")

HEARTBEAT_FRAME: Final = bytes((FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, 0xCE))
_END: Final = b"\xce"


def _b(value: str | bytes) -> bytes:
    raw = value.encode() if type(value) is str else value
    if len(raw) > 255:
        raise ValueError(f"shortstr longer than 255 bytes ({len(raw)})")
    return raw  # type: ignore[return-value]


def write_frame(out: bytearray, frame_type: int, channel: int, payload: bytes) -> None:
    """Append one frame."""
    out += _FRAME_HEAD.pack(frame_type, channel, len(payload))
    out += payload
    out += _END


def encode_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One frame: type, channel, size, payload, frame-end."""
    return _FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + _END


def _write_header_and_body(
    out: bytearray,
    channel: int,
    class_id: int,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> None:
    size = len(body)
    out += _HEADER_FRAME.pack(2, channel, 12 + len(properties_raw), class_id, 0, size)
    out += properties_raw
    out += _END
    if not size:
        return
    chunk = frame_max - FRAME_OVERHEAD if frame_max else size
    if size <= chunk:
        out += _FRAME_HEAD.pack(FRAME_BODY, channel, size)
        out += body
        out += _END
        return
    view = memoryview(body)
    for start in range(0, size, chunk):
        piece = view[start : start + chunk]
        out += _FRAME_HEAD.pack(FRAME_BODY, channel, len(piece))
        out += piece
        out += _END


def write_content(
    out: bytearray,
    channel: int,
    method_payload: bytes,
    class_id: int,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> None:
    """Append method frame + content header + body frames (split to frame_max - 8)."""
    write_frame(out, 1, channel, method_payload)
    _write_header_and_body(out, channel, class_id, properties_raw, body, frame_max)


def encode_content(
    channel: int,
    method_payload: bytes,
    class_id: int,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Method frame + content header frame + body frames as one bytes object."""
    out = bytearray()
    write_content(out, channel, method_payload, class_id, properties_raw, body, frame_max)
    return bytes(out)


# (channel, consumer_tag, exchange, routing_key) -> the constant bytes of a
# basic.deliver frame before and after its delivery-tag/redelivered octets.
_DELIVER_CACHE: Final[dict[tuple[int, str | bytes, str | bytes, str | bytes], tuple[bytes, bytes]]] = {}
_DELIVER_CACHE_MAX: Final = 4096
_QB_END: Final = struct.Struct(">BBHI")  # frame-end of the header frame + body frame head


def _deliver_parts(
    channel: int, consumer_tag: str | bytes, exchange: str | bytes, routing_key: str | bytes
) -> tuple[bytes, bytes]:
    ct = _b(consumer_tag)
    ex = _b(exchange)
    rk = _b(routing_key)
    head = _METHOD_HEAD.pack(1, channel, 16 + len(ct) + len(ex) + len(rk), BASIC, 60)
    parts = (head + bytes((len(ct),)) + ct, bytes((len(ex),)) + ex + bytes((len(rk),)) + rk + _END)
    if len(_DELIVER_CACHE) >= _DELIVER_CACHE_MAX:
        _DELIVER_CACHE.clear()
    _DELIVER_CACHE[(channel, consumer_tag, exchange, routing_key)] = parts
    return parts


def write_deliver(
    out: bytearray,
    channel: int,
    consumer_tag: str | bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: str | bytes,
    routing_key: str | bytes,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> None:
    """Append basic.deliver with its content (strings may be pre-encoded bytes).

    The constant parts of the method frame are cached per consumer/exchange/
    routing key, and a one-frame body is packed with a single join.
    """
    parts = _DELIVER_CACHE.get((channel, consumer_tag, exchange, routing_key))
    if parts is None:
        parts = _deliver_parts(channel, consumer_tag, exchange, routing_key)
    size = len(body)
    if size and (not frame_max or size <= frame_max - FRAME_OVERHEAD):
        out += b"".join(
            (
                parts[0],
                _QB.pack(delivery_tag, 1 if redelivered else 0),
                parts[1],
                _HEADER_FRAME.pack(2, channel, 12 + len(properties_raw), BASIC, 0, size),
                properties_raw,
                _QB_END.pack(0xCE, FRAME_BODY, channel, size),
                body,
                _END,
            )
        )
        return
    out += parts[0]
    out += _QB.pack(delivery_tag, 1 if redelivered else 0)
    out += parts[1]
    _write_header_and_body(out, channel, BASIC, properties_raw, body, frame_max)


def encode_deliver(
    channel: int,
    consumer_tag: str | bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: str | bytes,
    routing_key: str | bytes,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """basic.deliver + content header + body frames."""
    out = bytearray()
    write_deliver(out, channel, consumer_tag, delivery_tag, redelivered, exchange,
                  routing_key, properties_raw, body, frame_max)
    return bytes(out)


def write_get_ok(
    out: bytearray,
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str | bytes,
    routing_key: str | bytes,
    message_count: int,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> None:
    """Append basic.get-ok with its content."""
    ex = _b(exchange)
    rk = _b(routing_key)
    out += _METHOD_HEAD.pack(1, channel, 4 + 9 + 2 + len(ex) + len(rk) + 4, BASIC, 71)
    out += _QB.pack(delivery_tag, 1 if redelivered else 0)
    out.append(len(ex))
    out += ex
    out.append(len(rk))
    out += rk
    out += message_count.to_bytes(4, "big")
    out += _END
    _write_header_and_body(out, channel, BASIC, properties_raw, body, frame_max)


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str | bytes,
    routing_key: str | bytes,
    message_count: int,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """basic.get-ok + content header + body frames."""
    out = bytearray()
    write_get_ok(out, channel, delivery_tag, redelivered, exchange, routing_key,
                 message_count, properties_raw, body, frame_max)
    return bytes(out)


def write_return(
    out: bytearray,
    channel: int,
    reply_code: int,
    reply_text: str | bytes,
    exchange: str | bytes,
    routing_key: str | bytes,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> None:
    """Append basic.return with its content."""
    rt = _b(reply_text)
    ex = _b(exchange)
    rk = _b(routing_key)
    out += _METHOD_HEAD.pack(1, channel, 4 + 2 + 3 + len(rt) + len(ex) + len(rk), BASIC, 50)
    out += _HB.pack(reply_code)
    out.append(len(rt))
    out += rt
    out.append(len(ex))
    out += ex
    out.append(len(rk))
    out += rk
    out += _END
    _write_header_and_body(out, channel, BASIC, properties_raw, body, frame_max)


def encode_return(
    channel: int,
    reply_code: int,
    reply_text: str | bytes,
    exchange: str | bytes,
    routing_key: str | bytes,
    properties_raw: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """basic.return + content header + body frames."""
    out = bytearray()
    write_return(out, channel, reply_code, reply_text, exchange, routing_key,
                 properties_raw, body, frame_max)
    return bytes(out)


class StoredEntry(Protocol):
    """What :func:`write_stream_deliveries` needs of an entry: a stream record
    (``amqplite.protocol.streamrecord``) at ``at`` in ``data``."""

    data: bytes
    at: int


_RECORD_HEAD = RECORD_HEAD.unpack_from
# frame-end of the method frame + the header frame's head, class, weight, body size
_END_HEADER = struct.Struct(">BBHIHHQ")


def write_stream_deliveries(
    out: bytearray,
    channel: int,
    consumer_tag: str | bytes,
    first_tag: int,
    entries: Sequence[StoredEntry],
    frame_max: int,
) -> None:
    """Append basic.deliver + content for stream records, delivery tags from
    ``first_tag`` up (redelivered is never set on a stream read).

    The route, properties and body go out as slices of the stored chunk: per
    entry this is a few struct packs, one tuple of parts and one join for the
    whole batch. Route and properties are short, so plain bytes slices (cheaper
    to make than views); the body is a view, so it is copied once, by the join.
    """
    ct = _b(consumer_tag)
    ctag = bytes((len(ct),)) + ct
    heads: dict[int, bytes] = {}  # method frame head by route length
    body_max = frame_max - FRAME_OVERHEAD if frame_max else 0
    parts: list[bytes | memoryview] = []
    extend = parts.extend
    qb, end_header, qb_end, unpack = _QB.pack, _END_HEADER.pack, _QB_END.pack, _RECORD_HEAD
    data: bytes | None = None
    view = memoryview(b"")
    tag = first_tag
    for e in entries:
        if e.data is not data:
            data = e.data
            view = memoryview(data)
        at = e.at
        _ts, _key, rl, pl, bl = unpack(data, at)
        r = at + RECORD_HEAD_SIZE
        p = r + rl
        b = p + pl
        head = heads.get(rl)
        if head is None:
            size = 13 + len(ctag) + rl
            head = heads[rl] = _METHOD_HEAD.pack(1, channel, size, BASIC, 60) + ctag
        if bl and (not body_max or bl <= body_max):  # the usual case: one body frame
            extend((head, qb(tag, 0), data[r:p],
                    end_header(0xCE, 2, channel, 12 + pl, BASIC, 0, bl), data[p:b],
                    qb_end(0xCE, FRAME_BODY, channel, bl), view[b : b + bl], _END))
        else:
            extend((head, qb(tag, 0), data[r:p],
                    end_header(0xCE, 2, channel, 12 + pl, BASIC, 0, bl), data[p:b], _END))
            if bl:  # larger than a frame: split (frame_max is set, or it would fit)
                for start in range(b, b + bl, body_max):
                    piece = view[start : min(start + body_max, b + bl)]
                    extend((_FRAME_HEAD.pack(FRAME_BODY, channel, len(piece)), piece, _END))
        tag += 1
    out += b"".join(parts)
