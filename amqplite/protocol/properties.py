"""Basic-class content properties (the content header's property list).

The server keeps the raw property bytes a publisher sent and forwards them
untouched; :func:`decode_properties` is for the rare cases that need fields
(headers exchange, dead-lettering), and the ``*_of`` helpers answer the
per-message questions ("persistent?", "TTL?") without building an object.

``raw`` everywhere means the property-flags word(s) followed by the property
list, i.e. a content header payload after class-id, weight and body-size.
Short strings decode with ``surrogateescape`` so arbitrary bytes survive a
decode/encode round trip instead of failing a message.
"""

from __future__ import annotations

import struct
from typing import Any

import attrs

from amqplite.protocol.codec import FieldTable, decode_table, encode_table
from amqplite.protocol.errors import FrameSyntaxError

__all__ = [
    "PROPERTY_NAMES",
    "BasicProperties",
    "decode_properties",
    "delivery_mode_of",
    "encode_properties",
    "expiration_of",
    "headers_of",
    "message_id_of",
    "priority_of",
    "reply_to_of",
    "with_reply_to",
]

_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")

# (name, flag bit, kind) in wire order; kinds: s shortstr, F table, o octet, T uint64.
_PROPS: tuple[tuple[str, int, str], ...] = (
    ("content_type", 1 << 15, "s"),
    ("content_encoding", 1 << 14, "s"),
    ("headers", 1 << 13, "F"),
    ("delivery_mode", 1 << 12, "o"),
    ("priority", 1 << 11, "o"),
    ("correlation_id", 1 << 10, "s"),
    ("reply_to", 1 << 9, "s"),
    ("expiration", 1 << 8, "s"),
    ("message_id", 1 << 7, "s"),
    ("timestamp", 1 << 6, "T"),
    ("type", 1 << 5, "s"),
    ("user_id", 1 << 4, "s"),
    ("app_id", 1 << 3, "s"),
    ("cluster_id", 1 << 2, "s"),
)
PROPERTY_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _PROPS)
_BIT = {name: bit for name, bit, _ in _PROPS}


@attrs.define(slots=True)
class BasicProperties:
    """The 14 basic properties; ``None`` means "absent" (flag bit clear)."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: FieldTable | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None


def _shortstr(raw: Any, off: int) -> tuple[str, int]:
    n = raw[off]
    end = off + 1 + n
    if end > len(raw):
        raise FrameSyntaxError("truncated shortstr in content properties")
    return str(raw[off + 1 : end], "utf-8", "surrogateescape"), end


def _flags(raw: Any) -> tuple[int, int]:
    """First property-flags word and the offset of the first property."""
    try:
        flags = _H.unpack_from(raw, 0)[0]
        off = 2
        word = flags
        while word & 1:  # continuation: further flag words (none defined for basic)
            word = _H.unpack_from(raw, off)[0]
            off += 2
    except struct.error:
        raise FrameSyntaxError("truncated property flags") from None
    return flags, off


def decode_properties(raw: bytes | bytearray | memoryview) -> BasicProperties:
    """Decode the property flags and list; malformed input raises FrameSyntaxError."""
    flags, off = _flags(raw)
    values: dict[str, Any] = {}
    try:
        for name, bit, kind in _PROPS:
            if not flags & bit:
                continue
            if kind == "s":
                values[name], off = _shortstr(raw, off)
            elif kind == "o":
                values[name] = raw[off]
                off += 1
            elif kind == "F":
                values[name], off = decode_table(raw, off)
            else:
                values[name] = _Q.unpack_from(raw, off)[0]
                off += 8
    except (IndexError, struct.error):
        raise FrameSyntaxError("truncated content properties") from None
    return BasicProperties(**values)


def encode_properties(props: BasicProperties) -> bytes:
    """Encode flags and property list (properties that are None are omitted)."""
    flags = 0
    parts: list[bytes] = [b""]
    for name, bit, kind in _PROPS:
        value = getattr(props, name)
        if value is None:
            continue
        flags |= bit
        if kind == "s":
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
            if len(raw) > 255:
                raise ValueError(f"property {name} longer than 255 bytes")
            parts.append(bytes((len(raw),)))
            parts.append(raw)
        elif kind == "o":
            parts.append(bytes((value,)))
        elif kind == "F":
            parts.append(encode_table(value))
        else:
            parts.append(_Q.pack(int(value)))
    parts[0] = _H.pack(flags)
    return b"".join(parts)


def _locate(raw: Any, target: int) -> int | None:
    """Offset of the property with flag ``target`` in ``raw``, or None if absent."""
    flags, off = _flags(raw)
    if not flags & target:
        return None
    try:
        for _name, bit, kind in _PROPS:
            if bit == target:
                return off
            if not flags & bit:
                continue
            if kind == "s":
                off += 1 + raw[off]
            elif kind == "o":
                off += 1
            elif kind == "F":
                off += 4 + _I.unpack_from(raw, off)[0]
            else:
                off += 8
    except (IndexError, struct.error):
        raise FrameSyntaxError("truncated content properties") from None
    return None  # pragma: no cover - target is always one of _PROPS


def _octet_of(raw: Any, bit: int) -> int | None:
    off = _locate(raw, bit)
    if off is None:
        return None
    try:
        return int(raw[off])
    except IndexError:
        raise FrameSyntaxError("truncated content properties") from None


def _str_of(raw: Any, bit: int) -> str | None:
    off = _locate(raw, bit)
    if off is None:
        return None
    try:
        return _shortstr(raw, off)[0]
    except IndexError:
        raise FrameSyntaxError("truncated content properties") from None


def delivery_mode_of(raw: bytes | bytearray | memoryview) -> int | None:
    """delivery_mode (2 = persistent) without a full decode."""
    # Fast path: only content_type/content_encoding/headers can precede it.
    if len(raw) >= 3 and not raw[0] & 0xE0 and not raw[1] & 1:
        return int(raw[2]) if raw[0] & 0x10 else None
    return _octet_of(raw, _BIT["delivery_mode"])


def priority_of(raw: bytes | bytearray | memoryview) -> int | None:
    """priority without a full decode."""
    return _octet_of(raw, _BIT["priority"])


def expiration_of(raw: bytes | bytearray | memoryview) -> str | None:
    """expiration (per-message TTL, milliseconds as text) without a full decode."""
    return _str_of(raw, _BIT["expiration"])


def message_id_of(raw: bytes | bytearray | memoryview) -> str | None:
    """message_id without a full decode (used by the delivery log)."""
    return _str_of(raw, _BIT["message_id"])


def reply_to_of(raw: bytes | bytearray | memoryview) -> str | None:
    """reply_to without a full decode (direct reply-to checks every publish)."""
    if len(raw) < 2 or not raw[0] & 0x02:  # flag 1 << 9 lives in the first octet
        return None
    return _str_of(raw, _BIT["reply_to"])


def with_reply_to(raw: bytes, value: str) -> bytes:
    """``raw`` with an existing reply_to replaced by ``value``; the other fields keep
    their bytes (headers tables stay lossless, as everywhere else)."""
    off = _locate(raw, _BIT["reply_to"])
    if off is None:
        raise ValueError("no reply_to property to replace")
    new = value.encode("utf-8")
    if len(new) > 255:
        raise ValueError("reply_to longer than 255 bytes")
    return bytes(raw[:off]) + bytes((len(new),)) + new + bytes(raw[off + 1 + raw[off]:])


def headers_of(raw: bytes | bytearray | memoryview) -> FieldTable | None:
    """Only the headers table (for the headers exchange)."""
    off = _locate(raw, _BIT["headers"])
    if off is None:
        return None
    return decode_table(raw, off)[0]
