"""Basic-class content properties (the content header's property list).

The server keeps the raw property bytes a publisher sent and forwards them
untouched; :func:`decode_properties` is for the rare cases that need fields
(headers exchange, dead-lettering), and the ``*_of`` helpers answer the
per-message questions ("persistent?", "TTL?") without building an object.

``raw`` everywhere means the property-flags word(s) followed by the property
list, i.e. a content header payload after class-id, weight and body-size.
Short strings decode with ``surrogateescape`` so arbitrary bytes survive a
decode/encode round trip instead of failing a message; :func:`printable` turns
such text into something a log row, an error reply or JSON can carry.

:func:`check_properties` is the door: the broker calls it once per publish so
that every later lazy decode (TTL, dead-lettering, headers routing, admin) of
a stored message cannot fail.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.codec import FieldTable, check_table, decode_table, encode_table
from amqplite.protocol.errors import FrameSyntaxError

__all__ = [
    "PROPERTY_NAMES",
    "BasicProperties",
    "check_properties",
    "decode_properties",
    "delivery_mode_of",
    "encode_properties",
    "expiration_of",
    "headers_of",
    "long_header_splice",
    "message_id_of",
    "printable",
    "priority_of",
    "reply_to_of",
    "user_id_of",
    "with_long_header",
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
_BIT: Final = {name: bit for name, bit, _ in _PROPS}
#: flag bits of the 14 properties (bit 1 is reserved, bit 0 the continuation flag)
_DEFINED = sum(_BIT.values())
#: How to walk a property list, filled on first use: defined flags -> the whole
#: list (check_properties), flags | target << 16 -> up to one property (_locate).
#: A layout is (steps, tail): one step per shortstr (n >= 0) or table (n < 0),
#: after n (or -n - 1) fixed-size bytes; ``tail`` fixed bytes end the walk.
#: Two steps cover a typical pika publish.
_LAYOUTS: dict[int, tuple[tuple[int, ...], int]] = {}


@mypyc_attr(native_class=False)
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


def _layout(flags: int, target: int = 0) -> tuple[tuple[int, ...], int]:
    steps: list[int] = []
    fixed = 0
    for _, bit, kind in _PROPS:
        if bit == target:
            break
        if not flags & bit:
            continue
        if kind == "s":
            steps.append(fixed)
            fixed = 0
        elif kind == "F":
            steps.append(-fixed - 1)
            fixed = 0
        else:
            fixed += 1 if kind == "o" else 8
    layout = _LAYOUTS[flags | target << 16] = (tuple(steps), fixed)
    return layout


def check_properties(raw: bytes, known_table: bytes = b"") -> bytes:
    """Raise FrameSyntaxError unless ``raw`` decodes completely; return its header table.

    Every present property must lie within ``raw`` and the headers table must
    decode (UTF-8 keys, known tags, lengths in bounds, nesting within
    MAX_NESTING). Short strings are not checked for UTF-8: like RabbitMQ we
    forward them as they came. Per publish, so cheap: no properties costs a
    flags test, otherwise one walk with the layout cached per flags word; the
    headers are checked without being built. The table's bytes (with their
    length; b"" without headers) come back: passed in again as
    ``known_table`` for the next publish, an identical table is not walked.
    """
    if len(raw) < 2:
        raise FrameSyntaxError("truncated property flags")
    flags = raw[0] << 8 | raw[1]
    if not flags:
        return b""
    off = 2
    if flags & 1:
        flags, off = _flags(raw)
    steps, tail = _LAYOUTS.get(flags & _DEFINED) or _layout(flags & _DEFINED)
    table = b""
    try:
        for step in steps:
            if step >= 0:
                off += step
                off += 1 + raw[off]
            else:
                off -= step + 1
                size = 4 + _I.unpack_from(raw, off)[0]
                if size == len(known_table) and raw.startswith(known_table, off):
                    table = known_table
                    off += size
                else:
                    end = check_table(raw, off)
                    table = raw[off:end]
                    off = end
    except (IndexError, struct.error):
        raise FrameSyntaxError("truncated content properties") from None
    if off + tail > len(raw):
        raise FrameSyntaxError("truncated content properties")
    return table


def printable(text: str) -> str:
    """``text`` that encodes as UTF-8: bytes that were not UTF-8 show as ``\\xNN``.

    Short strings decode with surrogateescape; such text cannot go into a
    database row, a JSON document or a reply text as it is.
    """
    if text.isascii():
        return text
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no decode of ours produced
        return text.encode("utf-8", "backslashreplace").decode()


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
    """Offset of the property with flag ``target`` in ``raw``, or None if absent.

    Several probes run per publish, so an absent property costs one flags
    test and a present one a walk over a cached layout.
    """
    if len(raw) < 2:
        raise FrameSyntaxError("truncated property flags")
    flags = raw[0] << 8 | raw[1]
    if not flags & target:
        return None
    off = 2
    if flags & 1:
        flags, off = _flags(raw)
    flags &= _DEFINED
    steps, tail = _LAYOUTS.get(flags | target << 16) or _layout(flags, target)
    try:
        for step in steps:
            if step >= 0:
                off += step
                off += 1 + raw[off]
            else:
                off -= step + 1
                off += 4 + _I.unpack_from(raw, off)[0]
    except (IndexError, struct.error):
        raise FrameSyntaxError("truncated content properties") from None
    return off + tail


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
    # Fast paths: only content_type/content_encoding/headers can precede it, and
    # most publishers send at most content_type before it (a shortstr to skip).
    n = len(raw)
    if n >= 3 and not raw[0] & 0x60 and not raw[1] & 1:
        if not raw[0] & 0x10:
            return None
        at = 3 + raw[2] if raw[0] & 0x80 else 2
        if at < n:
            return int(raw[at])
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


def with_header(raw: bytes, name: str, value: Any, tag: str) -> bytes:
    """Properties with one header set (``tag``: its AMQP field type)."""
    props = decode_properties(raw)
    headers = props.headers.copy() if props.headers is not None else FieldTable()
    headers.set(name, value, tag)
    props.headers = headers
    return encode_properties(props)


_Q_SIGNED = struct.Struct(">q")
#: name -> its encoded key and the long tag (a stream names one key for every entry)
_LONG_KEYS: dict[str, tuple[bytes, bytes]] = {}
_HEADERS_BIT = 1 << 13
_BEFORE_HEADERS = (1 << 15) | (1 << 14)  # content_type, content_encoding


def with_long_header(raw: bytes, name: str, value: int) -> bytes:
    """``with_header(raw, name, value, "l")`` by splicing bytes, without a decode.

    Every stream entry gets its ``x-stream-offset`` this way at append time, so
    it must be cheap; see :func:`long_header_splice`. When the key may already
    be there, or the flags are unusual (continuation words), or the bytes are
    malformed, the full decode and re-encode of :func:`with_header` decides.
    """
    parts = long_header_splice(raw, name)
    if parts is None:
        return with_header(raw, name, value, "l")
    return b"".join((parts[0], _Q_SIGNED.pack(value), parts[1]))


def long_header_splice(raw: bytes, name: str) -> tuple[bytes, bytes] | None:
    """(before, after): ``before + <value as >q> + after`` are ``raw`` with a long
    header ``name`` set to that value; None when only a full decode can tell.

    The new field is appended to the headers table (its length fixed), or a
    one-field table is inserted after content-type and content-encoding;
    everything else keeps its bytes. Apart from the value the result depends on
    ``raw`` alone, so a stream computes it once for a publisher's properties and
    splices each entry's offset in with one join.
    """
    known = _LONG_KEYS.get(name)
    if known is None:
        k = name.encode()
        known = _LONG_KEYS[name] = (k, bytes((len(k),)) + k + b"l")
    key, field_head = known
    field_size = len(field_head) + 8
    try:
        flags = raw[0] << 8 | raw[1]
        if flags & 1:
            return None
        off = 2
        if flags & (1 << 15):
            off += 1 + raw[off]
        if flags & (1 << 14):
            off += 1 + raw[off]
        if flags & _HEADERS_BIT:
            size = _I.unpack_from(raw, off)[0]
            end = off + 4 + size
            if end > len(raw) or raw.find(key, off + 4, end) >= 0:
                return None
            return (b"".join((raw[:off], _I.pack(size + field_size), raw[off + 4:end],
                              field_head)), raw[end:])
        if off > len(raw):
            return None
    except (IndexError, struct.error):
        return None
    flags |= _HEADERS_BIT
    return b"".join((_H.pack(flags), raw[2:off], _I.pack(field_size), field_head)), raw[off:]


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


def user_id_of(raw: bytes | bytearray | memoryview) -> str | None:
    """user_id without a full decode (checked against the authenticated user)."""
    return _str_of(raw, _BIT["user_id"])


def headers_of(raw: bytes | bytearray | memoryview) -> FieldTable | None:
    """Only the headers table (for the headers exchange)."""
    off = _locate(raw, _BIT["headers"])
    if off is None:
        return None
    return decode_table(raw, off)[0]
