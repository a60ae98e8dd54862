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
from typing import Any

Buf = Any  # bytes | bytearray | memoryview: what ``struct.unpack_from`` accepts
Reader = Callable[[Buf, int], "tuple[Any, int]"]
Writer = Callable[[Any, "list[bytes]"], None]


class CodecError(ValueError):
    """Malformed Kafka input: the one error the codec raises for bytes it cannot read."""


INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
#: fixed widths by schema type name; bool rides on int8 with a conversion
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


def read_string(buf: Buf, pos: int) -> tuple[str, int]:
    n = INT16.unpack_from(buf, pos)[0]
    return str(_take(buf, pos + 2, n), "utf-8"), pos + 2 + n


def read_nullable_string(buf: Buf, pos: int) -> tuple[str | None, int]:
    n = INT16.unpack_from(buf, pos)[0]
    if n == -1:
        return None, pos + 2
    return str(_take(buf, pos + 2, n), "utf-8"), pos + 2 + n


def read_compact_string(buf: Buf, pos: int) -> tuple[str, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise CodecError("null compact string where the field is not nullable")
    return str(_take(buf, pos, n - 1), "utf-8"), pos + n - 1


def read_compact_nullable_string(buf: Buf, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    return str(_take(buf, pos, n - 1), "utf-8"), pos + n - 1


def read_bytes(buf: Buf, pos: int) -> tuple[bytes, int]:
    n = _U32(buf, pos)[0]
    return bytes(_take(buf, pos + 4, n)), pos + 4 + n


def read_nullable_bytes(buf: Buf, pos: int) -> tuple[bytes | None, int]:
    n = _U32(buf, pos)[0]
    if n == -1:
        return None, pos + 4
    return bytes(_take(buf, pos + 4, n)), pos + 4 + n


def read_compact_bytes(buf: Buf, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise CodecError("null compact bytes where the field is not nullable")
    return bytes(_take(buf, pos, n - 1)), pos + n - 1


def read_compact_nullable_bytes(buf: Buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    return bytes(_take(buf, pos, n - 1)), pos + n - 1


def read_records(buf: Buf, pos: int) -> tuple[memoryview | None, int]:
    """Record batches as a zero-copy view of the frame (int32 length, -1 is null)."""
    n = _U32(buf, pos)[0]
    if n == -1:
        return None, pos + 4
    return memoryview(_take(buf, pos + 4, n)), pos + 4 + n


def read_compact_records(buf: Buf, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    return memoryview(_take(buf, pos, n - 1)), pos + n - 1


def read_uuid(buf: Buf, pos: int) -> tuple[uuid.UUID, int]:
    return uuid.UUID(bytes=bytes(_take(buf, pos, 16))), pos + 16


def _utf8(value: str) -> bytes:
    return value.encode("utf-8")


def write_string(value: str, out: list[bytes]) -> None:
    raw = _utf8(value)
    if len(raw) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    out.append(INT16.pack(len(raw)))
    out.append(raw)


def write_nullable_string(value: str | None, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\xff\xff")
    else:
        write_string(value, out)


def write_compact_string(value: str, out: list[bytes]) -> None:
    raw = _utf8(value)
    out.append(uvarint(len(raw) + 1))
    out.append(raw)


def write_compact_nullable_string(value: str | None, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\x00")
    else:
        write_compact_string(value, out)


def write_bytes(value: Buf, out: list[bytes]) -> None:
    out.append(INT32.pack(len(value)))
    out.append(value)


def write_nullable_bytes(value: Buf | None, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        write_bytes(value, out)


def write_compact_bytes(value: Buf, out: list[bytes]) -> None:
    out.append(uvarint(len(value) + 1))
    out.append(value)


def write_compact_nullable_bytes(value: Buf | None, out: list[bytes]) -> None:
    if value is None:
        out.append(b"\x00")
    else:
        write_compact_bytes(value, out)


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
READERS.update({
    ("string", False, False): read_string, ("string", True, False): read_nullable_string,
    ("string", False, True): read_compact_string,
    ("string", True, True): read_compact_nullable_string,
    ("bytes", False, False): read_bytes, ("bytes", True, False): read_nullable_bytes,
    ("bytes", False, True): read_compact_bytes,
    ("bytes", True, True): read_compact_nullable_bytes,
})
WRITERS.update({
    ("string", False, False): write_string, ("string", True, False): write_nullable_string,
    ("string", False, True): write_compact_string,
    ("string", True, True): write_compact_nullable_string,
    ("bytes", False, False): write_bytes, ("bytes", True, False): write_nullable_bytes,
    ("bytes", False, True): write_compact_bytes,
    ("bytes", True, True): write_compact_nullable_bytes,
})
