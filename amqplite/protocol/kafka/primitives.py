"""Kafka's wire primitives: fixed-width integers, varints, strings, bytes, UUIDs, tags.

Readers take ``(buf, pos)`` and return ``(value, new_pos)``; writers append
``bytes`` pieces to a list that the caller joins once. Fixed-width fields use
precompiled :class:`struct.Struct` objects; only varints loop per byte. A
reader never looks past ``len(buf)`` without raising :class:`CodecError`
(short ``unpack_from`` calls raise ``struct.error``, which the message layer
turns into :class:`CodecError` at its one ``try``), so hostile input costs a
clean error, not a crash.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Literal

Buf = Any  # bytes | bytearray | memoryview: what ``struct.unpack_from`` accepts
Reader = Callable[[Buf, int], "tuple[Any, int]"]
Writer = Callable[[Any, "list[bytes]"], None]


class CodecError(ValueError):
    """Malformed Kafka input: the one error the codec raises for bytes it cannot read."""


class reading:
    """Within it, the errors short or garbled input raises in ``struct``, indexing,
    UTF-8 or UUID decoding come out as one :class:`CodecError` naming ``what``."""

    __slots__ = ("what",)

    def __init__(self, *what: object) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, _tb: object) -> Literal[False]:
        if kind is not None and kind is not CodecError and issubclass(
                kind, (struct.error, IndexError, ValueError, OverflowError)):
            raise CodecError(" ".join(map(str, self.what)) + f": {exc}") from None
        return False


INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
#: struct codes of the fixed-width schema types (``?`` reads any non-zero byte as True)
FIXED: dict[str, str] = {"int8": "b", "int16": "h", "int32": "i", "int64": "q",
                         "uint16": "H", "uint32": "I", "bool": "?"}
NIL_UUID = uuid.UUID(int=0)
_U32 = INT32.unpack_from


def read_int8(buf: Buf, pos: int) -> tuple[int, int]:
    return INT8.unpack_from(buf, pos)[0], pos + 1


def read_int16(buf: Buf, pos: int) -> tuple[int, int]:
    return INT16.unpack_from(buf, pos)[0], pos + 2


def read_int32(buf: Buf, pos: int) -> tuple[int, int]:
    return _U32(buf, pos)[0], pos + 4


def read_int64(buf: Buf, pos: int) -> tuple[int, int]:
    return INT64.unpack_from(buf, pos)[0], pos + 8


def read_uint32(buf: Buf, pos: int) -> tuple[int, int]:
    return UINT32.unpack_from(buf, pos)[0], pos + 4


def read_bool(buf: Buf, pos: int) -> tuple[bool, int]:
    return buf[pos] != 0, pos + 1


# ---- varints -----------------------------------------------------------------------

def read_uvarint(buf: Buf, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most 10 bytes (Kafka's varlong bound)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    end = pos + 10
    pos += 1
    while pos < end:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise CodecError("varint longer than 10 bytes")


def read_varint(buf: Buf, pos: int) -> tuple[int, int]:
    """A zigzag signed varint (int32 or int64: the bound is checked by the caller's use)."""
    u, pos = read_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


read_varlong = read_varint


def uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned varint of a negative number")
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def varint(value: int) -> bytes:
    """Zigzag encoding of a signed 64-bit value (varint and varlong alike)."""
    return uvarint((value << 1) ^ (value >> 63))


def write_uvarint(value: int, out: list[bytes]) -> None:
    out.append(uvarint(value))


def write_varint(value: int, out: list[bytes]) -> None:
    out.append(varint(value))


# ---- strings and bytes ---------------------------------------------------------------

def _take(buf: Buf, pos: int, n: int) -> Buf:
    end = pos + n
    if n < 0 or end > len(buf):
        raise CodecError(f"length {n} runs past the end of the buffer")
    return buf[pos:end]


def _len16(buf: Buf, pos: int) -> tuple[int, int]:
    return INT16.unpack_from(buf, pos)[0], pos + 2


def _len32(buf: Buf, pos: int) -> tuple[int, int]:
    return _U32(buf, pos)[0], pos + 4


def _len_compact(buf: Buf, pos: int) -> tuple[int, int]:
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos


def _nullable_reader(length: Callable[[Buf, int], tuple[int, int]],
                     convert: Callable[[Buf], Any]) -> Reader:
    """A length-prefixed value (-1: null) read by ``length``, then ``convert``-ed."""
    def read(buf: Buf, pos: int) -> tuple[Any, int]:
        n, pos = length(buf, pos)
        if n == -1:
            return None, pos
        return convert(_take(buf, pos, n)), pos + n
    return read


def _required(reader: Reader) -> Reader:
    def read(buf: Buf, pos: int) -> tuple[Any, int]:
        value, pos = reader(buf, pos)
        if value is None:
            raise CodecError("null where the field is not nullable")
        return value, pos
    return read


def _text(raw: Buf) -> str:
    return str(raw, "utf-8")


read_nullable_string = _nullable_reader(_len16, _text)
read_string = _required(read_nullable_string)
read_compact_nullable_string = _nullable_reader(_len_compact, _text)
read_compact_string = _required(read_compact_nullable_string)
read_nullable_bytes = _nullable_reader(_len32, bytes)
read_bytes = _required(read_nullable_bytes)
read_compact_nullable_bytes = _nullable_reader(_len_compact, bytes)
read_compact_bytes = _required(read_compact_nullable_bytes)
#: record batches stay a zero-copy view of the frame
read_records = _nullable_reader(_len32, memoryview)
read_compact_records = _nullable_reader(_len_compact, memoryview)


def read_uuid(buf: Buf, pos: int) -> tuple[uuid.UUID, int]:
    return uuid.UUID(bytes=bytes(_take(buf, pos, 16))), pos + 16


def _prefix16(n: int) -> bytes:
    if n > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return INT16.pack(n)


def _prefix_compact(n: int) -> bytes:
    return uvarint(n + 1)


def _writer(prefix: Callable[[int], bytes], null: bytes | None,
            convert: Callable[[Any], Any]) -> Writer:
    """A writer of length-prefixed values; ``null`` is None where null is not allowed."""
    def write(value: Any, out: list[bytes]) -> None:
        if value is None:
            if null is None:
                raise ValueError("null where the field is not nullable")
            out.append(null)
            return
        raw = convert(value)
        out.append(prefix(len(raw)))
        out.append(raw)
    return write


def _utf8(value: str) -> bytes:
    return value.encode("utf-8")


def _same(value: Buf) -> Buf:
    return value


write_string = _writer(_prefix16, None, _utf8)
write_nullable_string = _writer(_prefix16, b"\xff\xff", _utf8)
write_compact_string = _writer(_prefix_compact, None, _utf8)
write_compact_nullable_string = _writer(_prefix_compact, b"\x00", _utf8)
write_bytes = _writer(INT32.pack, None, _same)
write_nullable_bytes = _writer(INT32.pack, b"\xff\xff\xff\xff", _same)
write_compact_bytes = _writer(_prefix_compact, None, _same)
write_compact_nullable_bytes = _writer(_prefix_compact, b"\x00", _same)


def _pieces(value: Any) -> tuple[int, list[Buf]]:
    """Records may be one buffer or a sequence of them (stored batches served as they lie)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value), [value]
    parts = list(value)
    return sum(len(p) for p in parts), parts


def write_records(value: Any, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\xff\xff\xff\xff")
        return
    n, parts = _pieces(value)
    out.append(INT32.pack(n))
    out.extend(parts)


def write_compact_records(value: Any, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\x00")
        return
    n, parts = _pieces(value)
    out.append(uvarint(n + 1))
    out.extend(parts)


def write_uuid(value: uuid.UUID, out: list[bytes]) -> None:
    out.append(value.bytes)


# ---- tagged fields -------------------------------------------------------------------

def skip_tagged_fields(buf: Buf, pos: int) -> int:
    """Read a tagged-field section whose tags this codec does not know, and skip it."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        _take(buf, pos, size)
        pos += size
    return pos


EMPTY_TAGS = b"\x00"

#: reader and writer per (type, nullable, flexible); arrays and structs are built by the schema
READERS: dict[tuple[str, bool, bool], Reader] = {}
WRITERS: dict[tuple[str, bool, bool], Writer] = {}
for _flex in (False, True):
    for _null in (False, True):
        READERS["uuid", _null, _flex] = read_uuid
        WRITERS["uuid", _null, _flex] = write_uuid
        READERS["records", _null, _flex] = read_compact_records if _flex else read_records
        WRITERS["records", _null, _flex] = write_compact_records if _flex else write_records
# (plain, plain nullable, compact, compact nullable), indexed by flexible * 2 + nullable
for _type, _readers, _writers in (
        ("string", (read_string, read_nullable_string, read_compact_string,
                    read_compact_nullable_string),
         (write_string, write_nullable_string, write_compact_string,
          write_compact_nullable_string)),
        ("bytes", (read_bytes, read_nullable_bytes, read_compact_bytes,
                   read_compact_nullable_bytes),
         (write_bytes, write_nullable_bytes, write_compact_bytes,
          write_compact_nullable_bytes))):
    for _flex in (False, True):
        for _null in (False, True):
            READERS[_type, _null, _flex] = _readers[_flex * 2 + _null]
            WRITERS[_type, _null, _flex] = _writers[_flex * 2 + _null]
