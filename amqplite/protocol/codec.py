"""AMQP 0-9-1 field types and lossless field tables.

Why lossless: the broker forwards message headers and rewrites ``x-death``;
a consumer must see exactly the types the publisher sent (an ``int8`` stays
an ``int8``), so every decoded value remembers its wire tag.

Tag table (RabbitMQ's, ``rabbit_binary_parser``)::

    t bool      b int8     B uint8    s int16    u uint16
    I int32     i uint32   l int64    L int64    f float32   d float64
    D decimal   S longstr  x bytes    A array    T timestamp F table   V void

Representation rules (decode side):

* ``S`` decodes to ``str`` when the bytes are valid UTF-8, else to ``bytes``;
  either way the tag stays ``S``, so the bytes come back unchanged.
* ``T`` decodes to :class:`Timestamp`, an ``int`` subclass holding the
  seconds, so every uint64 value survives (a ``datetime`` could not).
* ``t`` decodes to ``False``/``True`` for octets 0/1; any other non-zero
  octet decodes to that ``int`` (still tagged ``t``) so it re-encodes as is.
* ``D`` decodes to a :class:`decimal.Decimal` whose exponent is ``-scale``
  (``Decimal("1.50")`` keeps scale 2); the value is read as uint32 like
  RabbitMQ and pamqp do.
* Duplicate keys in one table keep the last value (Python dicts cannot hold
  both); this is the only lossy case and no real client produces it.
* Tables and arrays nest at most :data:`MAX_NESTING` levels deep. Deeper input
  is a syntax error rather than a ``RecursionError`` waiting to happen later,
  in whatever code walks the decoded value next (dead-lettering re-encodes
  headers inside a timer).

Tags are remembered by identity: a value keeps its tag while the very same
object stays under that key/position. Assigning a new plain value therefore
drops the tag and the encoder infers one (bool→t, int→I or l, float→d,
str→S, bytes→x, Decimal→D, datetime/Timestamp→T, dict→F, list/tuple→A,
None→V). Use :meth:`FieldTable.set` / :meth:`FieldArray.append_tagged` to
choose a tag explicitly.
"""

from __future__ import annotations

import copy as _copy
import datetime as _dt
import decimal as _decimal
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from mypy_extensions import mypyc_attr

from amqplite.protocol.errors import FrameSyntaxError

__all__ = [
    "FieldArray", "FieldTable", "Timestamp", "check_table", "decode_array", "decode_long",
    "decode_longlong", "decode_longstr", "decode_octet", "decode_short", "decode_shortstr",
    "decode_table", "decode_value", "encode_array", "encode_bits", "encode_long",
    "encode_longlong", "encode_longstr", "encode_octet", "encode_short", "encode_shortstr",
    "encode_table", "encode_value", "infer_tag", "to_plain", "unpack_bits",
]

_b = struct.Struct(">b")
_B = struct.Struct(">B")
_h = struct.Struct(">h")
_H = struct.Struct(">H")
_i = struct.Struct(">i")
_I = struct.Struct(">I")
_q = struct.Struct(">q")
_Q = struct.Struct(">Q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_BI = struct.Struct(">BI")

_UTC = _dt.UTC

# Fixed-size numeric tags: tag byte -> Struct.
_FIXED: dict[int, struct.Struct] = {
    ord("b"): _b,
    ord("B"): _B,
    ord("s"): _h,
    ord("u"): _H,
    ord("I"): _i,
    ord("i"): _I,
    ord("l"): _q,
    ord("L"): _q,
    ord("f"): _f,
    ord("d"): _d,
}
_FIXED_STR: dict[str, struct.Struct] = {chr(k): v for k, v in _FIXED.items()}

VALID_TAGS = frozenset("tbBsuIilLfdDSxATFV")

#: Deepest nesting of tables/arrays a decode accepts (a top-level table is 1).
MAX_NESTING = 64


@mypyc_attr(native_class=False)  # a native class cannot subclass it
class Timestamp(int):
    """AMQP timestamp: whole seconds since the epoch (uint64), kept as an int."""

    __slots__ = ()

    @classmethod
    def from_datetime(cls, value: _dt.datetime) -> Timestamp:
        """Seconds of ``value``; a naive datetime is taken as UTC."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=_UTC)
        return cls(int(value.timestamp()))

    @property
    def datetime(self) -> _dt.datetime:
        """The instant as an aware UTC datetime (raises for out-of-range values)."""
        return _dt.datetime.fromtimestamp(int(self), tz=_UTC)

    def __repr__(self) -> str:
        return f"Timestamp({int(self)})"


@mypyc_attr(native_class=False)  # a native class cannot subclass it
class FieldTable(dict):  # type: ignore[type-arg]
    """A ``dict`` that remembers each value's AMQP type tag (see module doc)."""

    __slots__ = ("_tags",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tags: dict[str, tuple[str, Any]] = {}

    @property
    def tags(self) -> dict[str, str]:
        """Current key -> remembered tag (keys without one are absent)."""
        out: dict[str, str] = {}
        for key, (tag, value) in self._tags.items():
            if key in self and dict.__getitem__(self, key) is value:
                out[key] = tag
        return out

    def tag_of(self, key: str) -> str | None:
        """The remembered tag of ``key``, or None if the encoder would infer one."""
        entry = self._tags.get(key)
        if entry is not None and key in self and dict.__getitem__(self, key) is entry[1]:
            return entry[0]
        return None

    def set(self, key: str, value: Any, tag: str | None = None) -> None:
        """Set ``key`` and pin its wire tag (``None`` lets the encoder infer)."""
        if tag is not None and tag not in VALID_TAGS:
            raise ValueError(f"unknown field tag {tag!r}")
        dict.__setitem__(self, key, value)
        if tag is None:
            self._tags.pop(key, None)
        else:
            self._tags[key] = (tag, value)

    def copy(self) -> FieldTable:
        new = FieldTable(self)
        new._tags = dict(self._tags)
        return new

    def __copy__(self) -> FieldTable:  # a method: compiled, the class body cannot alias one
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> FieldTable:
        new = FieldTable()
        memo[id(self)] = new
        for key, value in self.items():
            new.set(key, _copy.deepcopy(value, memo), self.tag_of(key))
        return new

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_table, ([(k, v, self.tag_of(k)) for k, v in self.items()],))

    def __repr__(self) -> str:
        return f"FieldTable({dict.__repr__(self)})"


@mypyc_attr(native_class=False)  # a native class cannot subclass it
class FieldArray(list):  # type: ignore[type-arg]
    """A ``list`` that remembers each element's AMQP type tag (see module doc)."""

    __slots__ = ("_tags",)

    def __init__(self, iterable: Iterable[Any] = ()) -> None:
        super().__init__(iterable)
        self._tags: list[tuple[str, Any] | None] = []

    @property
    def tags(self) -> list[str | None]:
        """Per element: remembered tag, or None where the encoder would infer."""
        return [self.tag_at(i) for i in range(len(self))]

    def tag_at(self, index: int) -> str | None:
        """The remembered tag at ``index`` (None if it would be inferred)."""
        if 0 <= index < len(self._tags):
            entry = self._tags[index]
            if entry is not None and list.__getitem__(self, index) is entry[1]:
                return entry[0]
        return None

    def append_tagged(self, value: Any, tag: str | None) -> None:
        """Append ``value`` with a pinned wire tag."""
        if tag is not None and tag not in VALID_TAGS:
            raise ValueError(f"unknown field tag {tag!r}")
        index = len(self)
        list.append(self, value)
        tags = self._tags
        if len(tags) < index:
            tags.extend([None] * (index - len(tags)))
        del tags[index:]
        tags.append(None if tag is None else (tag, value))

    def copy(self) -> FieldArray:
        new = FieldArray(self)
        new._tags = list(self._tags)
        return new

    def __copy__(self) -> FieldArray:  # a method: compiled, the class body cannot alias one
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> FieldArray:
        new = FieldArray()
        memo[id(self)] = new
        for i, value in enumerate(self):
            new.append_tagged(_copy.deepcopy(value, memo), self.tag_at(i))
        return new

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_array, ([(v, self.tag_at(i)) for i, v in enumerate(self)],))

    def __repr__(self) -> str:
        return f"FieldArray({list.__repr__(self)})"


def _restore_table(items: list[tuple[str, Any, str | None]]) -> FieldTable:
    table = FieldTable()
    for key, value, tag in items:
        table.set(key, value, tag)
    return table


def _restore_array(items: list[tuple[Any, str | None]]) -> FieldArray:
    array = FieldArray()
    for value, tag in items:
        array.append_tagged(value, tag)
    return array


def to_plain(value: Any) -> Any:
    """Strip tags: FieldTable -> dict, FieldArray -> list, Timestamp -> int (recursively).

    Scalars other than Timestamp are returned as they are (bytes stay bytes).
    """
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, Timestamp):
        return int(value)
    return value


# --------------------------------------------------------------------------
# primitives used by method and property codecs


def decode_octet(buf: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Read an octet; returns (value, new_offset)."""
    try:
        return buf[offset], offset + 1
    except IndexError:
        raise FrameSyntaxError("truncated octet") from None


def _unpack(st: struct.Struct, buf: Any, offset: int, what: str) -> tuple[Any, int]:
    try:
        return st.unpack_from(buf, offset)[0], offset + st.size
    except struct.error:
        raise FrameSyntaxError(f"truncated {what}") from None


def decode_short(buf: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Read a uint16."""
    return _unpack(_H, buf, offset, "short")  # type: ignore[no-any-return]


def decode_long(buf: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Read a uint32."""
    return _unpack(_I, buf, offset, "long")  # type: ignore[no-any-return]


def decode_longlong(buf: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Read a uint64."""
    return _unpack(_Q, buf, offset, "longlong")  # type: ignore[no-any-return]


def decode_shortstr(buf: bytes | bytearray | memoryview, offset: int) -> tuple[str, int]:
    """Read a shortstr as UTF-8 text (invalid UTF-8 is a syntax error)."""
    try:
        n = buf[offset]
    except IndexError:
        raise FrameSyntaxError("truncated shortstr") from None
    end = offset + 1 + n
    if end > len(buf):
        raise FrameSyntaxError("truncated shortstr")
    try:
        return str(buf[offset + 1 : end], "utf-8"), end
    except UnicodeDecodeError:
        raise FrameSyntaxError("malformed UTF-8 in shortstr") from None


def decode_longstr(buf: bytes | bytearray | memoryview, offset: int) -> tuple[bytes, int]:
    """Read a longstr as raw bytes."""
    n, offset = decode_long(buf, offset)
    end = offset + n
    if end > len(buf):
        raise FrameSyntaxError("truncated longstr")
    return bytes(buf[offset:end]), end


def encode_octet(value: int) -> bytes:
    return _B.pack(value)


def encode_short(value: int) -> bytes:
    return _H.pack(value)


def encode_long(value: int) -> bytes:
    return _I.pack(value)


def encode_longlong(value: int) -> bytes:
    return _Q.pack(value)


def encode_shortstr(value: str | bytes) -> bytes:
    """Length-prefixed (1 octet) string; more than 255 bytes is a ValueError."""
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if len(raw) > 255:
        raise ValueError(f"shortstr longer than 255 bytes ({len(raw)})")
    return _B.pack(len(raw)) + raw


def encode_longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    return _I.pack(len(raw)) + raw


def encode_bits(*flags: bool) -> bytes:
    """Pack up to 8 consecutive bit fields into one octet (first flag = bit 0)."""
    octet = 0
    for i, flag in enumerate(flags):
        if flag:
            octet |= 1 << i
    return _B.pack(octet)


def unpack_bits(octet: int, count: int) -> tuple[bool, ...]:
    """Inverse of :func:`encode_bits`."""
    return tuple(bool(octet & (1 << i)) for i in range(count))


# --------------------------------------------------------------------------
# field values: decoding


def _decode_value(buf: Any, tag: int, off: int, stop: int, depth: int) -> tuple[Any, int]:
    """Decode one value of type ``tag`` at ``off``; never reads past ``stop``.

    ``depth`` counts the tables/arrays around the value (for MAX_NESTING).
    """
    if tag == 0x53:  # S
        if off + 4 > stop:
            raise FrameSyntaxError("truncated longstr")
        n = _I.unpack_from(buf, off)[0]
        off += 4
        end = off + n
        if end > stop:
            raise FrameSyntaxError("truncated longstr")
        raw = bytes(buf[off:end])
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError:
            return raw, end
    st = _FIXED.get(tag)
    if st is not None:
        end = off + st.size
        if end > stop:
            raise FrameSyntaxError("truncated field value")
        return st.unpack_from(buf, off)[0], end
    if tag == 0x74:  # t
        if off >= stop:
            raise FrameSyntaxError("truncated bool")
        octet = buf[off]
        return (octet == 1 if octet <= 1 else octet), off + 1
    if tag == 0x46:  # F
        if depth >= MAX_NESTING:
            raise FrameSyntaxError("field table nested too deeply")
        if off + 4 > stop:
            raise FrameSyntaxError("truncated field table")
        end = off + 4 + _I.unpack_from(buf, off)[0]
        if end > stop:
            raise FrameSyntaxError("field table length exceeds available data")
        table = FieldTable()
        _decode_table_body(buf, off + 4, end, table, depth + 1)
        return table, end
    if tag == 0x41:  # A
        if depth >= MAX_NESTING:
            raise FrameSyntaxError("field array nested too deeply")
        if off + 4 > stop:
            raise FrameSyntaxError("truncated field array")
        end = off + 4 + _I.unpack_from(buf, off)[0]
        if end > stop:
            raise FrameSyntaxError("field array length exceeds available data")
        return _decode_array_body(buf, off + 4, end, depth + 1), end
    if tag == 0x54:  # T
        if off + 8 > stop:
            raise FrameSyntaxError("truncated timestamp")
        return Timestamp(_Q.unpack_from(buf, off)[0]), off + 8
    if tag == 0x56:  # V
        return None, off
    if tag == 0x78:  # x
        if off + 4 > stop:
            raise FrameSyntaxError("truncated byte array")
        n = _I.unpack_from(buf, off)[0]
        off += 4
        end = off + n
        if end > stop:
            raise FrameSyntaxError("truncated byte array")
        return bytes(buf[off:end]), end
    if tag == 0x44:  # D
        if off + 5 > stop:
            raise FrameSyntaxError("truncated decimal")
        # not ``raw``: compiled, that local is bytes (tag S above) and an int fails
        scale, digits = _BI.unpack_from(buf, off)
        return _decimal.Decimal(digits).scaleb(-scale), off + 5
    raise FrameSyntaxError(f"unknown field type tag {tag!r}")


def _decode_table_body(buf: Any, off: int, stop: int, table: FieldTable, depth: int) -> None:
    tags = table._tags
    setitem = dict.__setitem__
    while off < stop:
        klen = buf[off]
        kstart = off + 1
        off = kstart + klen
        if off >= stop:
            raise FrameSyntaxError("truncated field table entry")
        try:
            key = str(buf[kstart:off], "utf-8")
        except UnicodeDecodeError:
            raise FrameSyntaxError("malformed UTF-8 in field table key") from None
        tag = buf[off]
        value, off = _decode_value(buf, tag, off + 1, stop, depth)
        setitem(table, key, value)
        tags[key] = (chr(tag), value)


def _decode_array_body(buf: Any, off: int, stop: int, depth: int) -> FieldArray:
    array = FieldArray()
    values: list[Any] = []
    tags: list[tuple[str, Any] | None] = []
    while off < stop:
        tag = buf[off]
        value, off = _decode_value(buf, tag, off + 1, stop, depth)
        values.append(value)
        tags.append((chr(tag), value))
    list.extend(array, values)
    array._tags = tags
    return array


def _limit(buf: Any, end: int | None) -> int:
    n = len(buf)
    return n if end is None or end > n else end


def decode_table(
    buf: bytes | bytearray | memoryview, offset: int = 0, end: int | None = None
) -> tuple[FieldTable, int]:
    """Decode a length-prefixed field table at ``offset``; returns (table, new_offset).

    ``end`` bounds the read (defaults to ``len(buf)``). Malformed input raises
    :class:`FrameSyntaxError`.
    """
    stop = _limit(buf, end)
    try:
        if offset + 4 > stop:
            raise FrameSyntaxError("truncated field table")
        table_end = offset + 4 + _I.unpack_from(buf, offset)[0]
        if table_end > stop:
            raise FrameSyntaxError("field table length exceeds available data")
        table = FieldTable()
        _decode_table_body(buf, offset + 4, table_end, table, 1)
    except (IndexError, struct.error, ValueError) as exc:
        if isinstance(exc, FrameSyntaxError):
            raise
        raise FrameSyntaxError(f"malformed field table: {exc}") from None
    except RecursionError:
        raise FrameSyntaxError("field table nested too deeply") from None
    return table, table_end


# Per tag octet: the value's size when fixed, else one of these markers.
_LONGSTR, _TABLE, _ARRAY, _UNKNOWN = -1, -2, -3, -4
_SIZE_OF: list[int] = [_UNKNOWN] * 256
for _tag, _st in _FIXED.items():
    _SIZE_OF[_tag] = _st.size
for _c, _size in (("t", 1), ("T", 8), ("D", 5), ("V", 0), ("S", _LONGSTR), ("x", _LONGSTR),
                  ("F", _TABLE), ("A", _ARRAY)):
    _SIZE_OF[ord(_c)] = _size


def _check_body(buf: Any, off: int, stop: int, depth: int, keyed: bool, utf8: bool) -> None:
    """Walk a table (``keyed``) or array body as _decode_*_body would, building nothing.

    ``utf8``: keys need checking (False when the whole buffer is ASCII).
    """
    size_of = _SIZE_OF
    while off < stop:
        if keyed:
            kstart = off + 1
            off = kstart + buf[off]
            if off >= stop:
                raise FrameSyntaxError("truncated field table entry")
            if utf8 and not (key := buf[kstart:off]).isascii():
                try:
                    str(key, "utf-8")
                except UnicodeDecodeError:
                    raise FrameSyntaxError("malformed UTF-8 in field table key") from None
        tag = buf[off]
        size = size_of[tag]
        off += 1
        if size >= 0:
            off += size
            if off > stop:
                raise FrameSyntaxError("truncated field value")
        elif size == _LONGSTR:
            if off + 4 > stop:
                raise FrameSyntaxError("truncated longstr")
            off += 4 + _I.unpack_from(buf, off)[0]
            if off > stop:
                raise FrameSyntaxError("truncated longstr")
        elif size != _UNKNOWN:
            if depth >= MAX_NESTING:
                raise FrameSyntaxError("field table nested too deeply")
            if off + 4 > stop:
                raise FrameSyntaxError("truncated field table")
            end = off + 4 + _I.unpack_from(buf, off)[0]
            if end > stop:
                raise FrameSyntaxError("field table length exceeds available data")
            _check_body(buf, off + 4, end, depth + 1, size == _TABLE, utf8)
            off = end
        else:
            raise FrameSyntaxError(f"unknown field type tag {tag!r}")


def check_table(
    buf: bytes | bytearray | memoryview, offset: int = 0, end: int | None = None
) -> int:
    """The offset after the field table at ``offset``, which is checked but not built.

    Accepts exactly what :func:`decode_table` accepts (a test holds the two to
    that) at a fraction of its cost, since no value is built. Publish uses it
    to validate headers it will only decode if it must.
    """
    stop = _limit(buf, end)
    try:
        if offset + 4 > stop:
            raise FrameSyntaxError("truncated field table")
        table_end = offset + 4 + _I.unpack_from(buf, offset)[0]
        if table_end > stop:
            raise FrameSyntaxError("field table length exceeds available data")
        # one C-level scan usually spares a slice per key: small lengths and
        # numbers are ASCII bytes too
        utf8 = not isinstance(buf, bytes | bytearray) or not buf.isascii()
        _check_body(buf, offset + 4, table_end, 1, True, utf8)
    except (IndexError, struct.error) as exc:  # pragma: no cover - bounds are checked above
        raise FrameSyntaxError(f"malformed field table: {exc}") from None
    return table_end


def decode_array(
    buf: bytes | bytearray | memoryview, offset: int = 0, end: int | None = None
) -> tuple[FieldArray, int]:
    """Decode a length-prefixed field array at ``offset``; returns (array, new_offset)."""
    value, new_offset = decode_value(buf, offset, end, tag="A")
    return value, new_offset


def decode_value(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    end: int | None = None,
    tag: str | None = None,
) -> tuple[Any, int]:
    """Decode one tagged value (tag octet first unless ``tag`` is given)."""
    stop = _limit(buf, end)
    try:
        if tag is None:
            if offset >= stop:
                raise FrameSyntaxError("truncated field value")
            tag_byte = buf[offset]
            offset += 1
        else:
            tag_byte = ord(tag)
        return _decode_value(buf, tag_byte, offset, stop, 0)
    except (IndexError, struct.error, ValueError) as exc:
        if isinstance(exc, FrameSyntaxError):
            raise
        raise FrameSyntaxError(f"malformed field value: {exc}") from None
    except RecursionError:
        raise FrameSyntaxError("field value nested too deeply") from None


# --------------------------------------------------------------------------
# field values: encoding

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def infer_tag(value: Any) -> str:
    """The tag the encoder uses for a plain Python value."""
    if value is None:
        return "V"
    if isinstance(value, bool):
        return "t"
    if isinstance(value, Timestamp):
        return "T"
    if isinstance(value, int):
        if _INT32_MIN <= value <= _INT32_MAX:
            return "I"
        if _INT64_MIN <= value <= _INT64_MAX:
            return "l"
        raise ValueError(f"integer {value} does not fit a signed 64-bit field")
    if isinstance(value, float):
        return "d"
    if isinstance(value, str):
        return "S"
    if isinstance(value, bytes | bytearray | memoryview):
        return "x"
    if isinstance(value, _decimal.Decimal):
        return "D"
    if isinstance(value, _dt.datetime):
        return "T"
    if isinstance(value, Mapping):
        return "F"
    if isinstance(value, list | tuple):
        return "A"
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def _encode_decimal(value: _decimal.Decimal) -> bytes:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"cannot encode decimal {value}")
    raw = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        raw *= 10**exponent
        exponent = 0
    scale = -exponent
    if sign:
        raw = -raw
    if not 0 <= scale <= 255 or not _INT32_MIN <= raw <= 0xFFFFFFFF:
        raise ValueError(f"decimal {value} does not fit AMQP decimal (scale octet + 32 bits)")
    return _B.pack(scale) + _I.pack(raw & 0xFFFFFFFF)


def _encode_value(out: bytearray, tag: str, value: Any) -> None:
    """Append tag octet and encoded ``value`` to ``out``."""
    if tag == "S":
        # surrogateescape: text decoded from a non-UTF-8 shortstr property (say an
        # expiration copied into x-death) goes back out as the bytes it came from
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
        out += b"S"
        out += _I.pack(len(raw))
        out += raw
        return
    st = _FIXED_STR.get(tag)
    if st is not None:
        try:
            packed = st.pack(value)
        except struct.error as exc:
            raise ValueError(f"value {value!r} does not fit field type {tag!r}: {exc}") from None
        out += tag.encode()
        out += packed
        return
    if tag == "t":
        if value is True or value is False:
            octet = 1 if value else 0
        elif isinstance(value, int) and 0 <= value <= 255:
            octet = value
        else:
            octet = 1 if value else 0
        out += b"t"
        out.append(octet)
        return
    if tag == "F":
        out += b"F\x00\x00\x00\x00"
        start = len(out)
        _encode_table_body(out, value)
        _I.pack_into(out, start - 4, len(out) - start)
        return
    if tag == "A":
        out += b"A\x00\x00\x00\x00"
        start = len(out)
        _encode_array_body(out, value)
        _I.pack_into(out, start - 4, len(out) - start)
        return
    if tag == "T":
        if isinstance(value, _dt.datetime):
            value = Timestamp.from_datetime(value)
        try:
            packed = _Q.pack(value)
        except struct.error as exc:
            raise ValueError(f"timestamp {value!r} out of range: {exc}") from None
        out += b"T"
        out += packed
        return
    if tag == "V":
        out += b"V"
        return
    if tag == "x":
        raw = value.encode() if isinstance(value, str) else bytes(value)
        out += b"x"
        out += _I.pack(len(raw))
        out += raw
        return
    if tag == "D":
        out += b"D"
        out += _encode_decimal(value)
        return
    raise ValueError(f"unknown field tag {tag!r}")


def _encode_table_body(out: bytearray, mapping: Mapping[str, Any]) -> None:
    tags = mapping._tags if isinstance(mapping, FieldTable) else None
    for key, value in mapping.items():
        raw_key = key.encode() if isinstance(key, str) else bytes(key)
        if len(raw_key) > 255:
            raise ValueError(f"field table key longer than 255 bytes: {key!r}")
        out.append(len(raw_key))
        out += raw_key
        tag = None
        if tags:
            entry = tags.get(key)
            if entry is not None and entry[1] is value:
                tag = entry[0]
        _encode_value(out, tag or infer_tag(value), value)


def _encode_array_body(out: bytearray, values: Iterable[Any]) -> None:
    tags = values._tags if isinstance(values, FieldArray) else None
    ntags = len(tags) if tags else 0
    for i, value in enumerate(values):
        tag = None
        if i < ntags:
            entry = tags[i]  # type: ignore[index]
            if entry is not None and entry[1] is value:
                tag = entry[0]
        _encode_value(out, tag or infer_tag(value), value)


def encode_table(mapping: Mapping[str, Any] | None) -> bytes:
    """Encode a field table including its 4-byte length prefix (None -> empty table)."""
    if not mapping:
        return b"\x00\x00\x00\x00"
    out = bytearray(b"\x00\x00\x00\x00")
    _encode_table_body(out, mapping)
    _I.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_array(values: Iterable[Any]) -> bytes:
    """Encode a field array including its 4-byte length prefix."""
    out = bytearray(b"\x00\x00\x00\x00")
    _encode_array_body(out, values)
    _I.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_value(value: Any, tag: str | None = None) -> bytes:
    """Encode one value with its tag octet (tag inferred when None)."""
    out = bytearray()
    _encode_value(out, tag or infer_tag(value), value)
    return bytes(out)
