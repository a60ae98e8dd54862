"""One generic codec for every Kafka message, driven by a compact text schema.

A schema is indented text, one field a line::

    name type [versions] [null[=versions]] [tag=N] [default=X]

``type`` is a primitive (int8 int16 int32 int64 uint16 uint32 bool string bytes
records uuid), ``[]int32``-style arrays of a primitive, ``[]`` (an array of the
struct whose fields follow, indented) or ``{}`` (one such struct). ``versions``
is ``3+``, ``1-7`` or ``5`` (absent: every version); ``null`` makes the field
nullable in those versions; ``tag=N`` makes it a tagged field (flexible
versions only). The facts (order, types, version ranges) follow Kafka's
``clients/src/main/resources/common/message/*.json``.

Each (message, version) compiles once into closures: runs of fixed-width fields
become one precompiled :class:`struct.Struct`, so decoding a Produce or Fetch
costs a handful of calls per struct, not one per field. Decoded messages are
plain dicts keyed by snake_case field names; a field absent at the version
decodes as its default so session code reads every field the same way at
every version. Encoders take such dicts; a missing key writes the default, a
key for a field absent at the version is ignored.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from amqplite.protocol.kafka import primitives as p

Reader = Callable[[Any, int], "tuple[Any, int]"]
Writer = Callable[[Any, "list[bytes]"], None]
MAX_VERSION = 0x7FFF


def _range(text: str) -> tuple[int, int]:
    if text.endswith("+"):
        return int(text[:-1]), MAX_VERSION
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


class Field:
    """One field of a schema; ``fields`` holds a struct's (or a struct array's) members."""

    __slots__ = ("default", "fields", "hi", "lo", "name", "nhi", "nlo", "tag", "type")

    def __init__(self, line: str) -> None:
        words = line.split()
        self.name, self.type = words[0], words[1]
        self.lo, self.hi = 0, MAX_VERSION
        self.nlo, self.nhi = 1, 0  # empty range: never nullable
        self.tag: int | None = None
        self.default: str | None = None
        self.fields: list[Field] = []
        for w in words[2:]:
            if w[0].isdigit():
                self.lo, self.hi = _range(w)
            elif w == "null":
                self.nlo, self.nhi = self.lo, self.hi
            elif w.startswith("null="):
                self.nlo, self.nhi = _range(w[5:])
            elif w.startswith("tag="):
                self.tag = int(w[4:])
            elif w.startswith("default="):
                self.default = w[8:]
            else:
                raise ValueError(f"schema: cannot read {w!r} in {line!r}")

    def exists(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def nullable(self, version: int) -> bool:
        return self.nlo <= version <= self.nhi

    def default_value(self) -> Any:
        """The value a field takes when the version lacks it or a writer leaves it out."""
        t, d = self.type, self.default
        if d == "null":
            return None
        if t == "bool":
            return d == "true"
        if t in p.FIXED:
            return int(d, 0) if d else 0
        if t == "string":
            return d or ""
        if t == "bytes":
            return b""
        if t == "uuid":
            return p.NIL_UUID
        if t == "records" or t == "{}":
            return None
        return ()  # arrays


def parse(text: str) -> list[Field]:
    """Indented schema text to a field tree."""
    root: list[Field] = []
    stack: list[tuple[int, list[Field]]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        while indent <= stack[-1][0]:
            stack.pop()
        field = Field(line)
        stack[-1][1].append(field)
        if field.type in ("[]", "{}"):
            stack.append((indent, field.fields))
    return root


# ---- compiling a struct at one version into a reader and a writer --------------------

def _read_count(buf: Any, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n, pos = p.read_uvarint(buf, pos)
        return n - 1, pos
    return p.INT32.unpack_from(buf, pos)[0], pos + 4


def _count(n: int, flexible: bool) -> bytes:
    return p.uvarint(n + 1) if flexible else p.INT32.pack(n)


def _array_count(buf: Any, pos: int, nullable: bool, flexible: bool,
                 item_size: int) -> tuple[int, int]:
    """An array's element count (-1: null), refused when the bytes left cannot hold it."""
    n, pos = _read_count(buf, pos, flexible)
    if n < 0:
        if nullable and n == -1:
            return -1, pos
        raise p.CodecError(f"array count {n}")
    if n * item_size > len(buf) - pos:
        raise p.CodecError(f"array count {n} exceeds the bytes left")
    return n, pos


def _array_head(value: Any, out: list[bytes], nullable: bool, flexible: bool) -> bool:
    """Write an array's count (or its null); True when elements are to follow."""
    if value is None:
        if not nullable:
            raise ValueError("null for a non-nullable array")
        out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
        return False
    out.append(_count(len(value), flexible))
    return True


def _array_reader(elem: Reader, nullable: bool, flexible: bool) -> Reader:
    def read(buf: Any, pos: int) -> tuple[Any, int]:
        n, pos = _array_count(buf, pos, nullable, flexible, 1)
        if n < 0:
            return None, pos
        out: list[Any] = []
        append = out.append
        for _ in range(n):
            item, pos = elem(buf, pos)
            append(item)
        return out, pos
    return read


def _fixed_array_reader(code: str, nullable: bool, flexible: bool) -> Reader:
    size = struct.calcsize(">" + code)

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        n, pos = _array_count(buf, pos, nullable, flexible, size)
        if n < 0:
            return None, pos
        return list(struct.unpack_from(f">{n}{code}", buf, pos)), pos + n * size
    return read


def _array_writer(elem: Writer, nullable: bool, flexible: bool) -> Writer:
    def write(value: Any, out: list[bytes]) -> None:
        if _array_head(value, out, nullable, flexible):
            for item in value:
                elem(item, out)
    return write


def _fixed_array_writer(code: str, nullable: bool, flexible: bool) -> Writer:
    def write(value: Any, out: list[bytes]) -> None:
        if _array_head(value, out, nullable, flexible):
            out.append(struct.pack(f">{len(value)}{code}", *value))
    return write


def _scalar(f: Field, v: int, flexible: bool) -> tuple[Reader, Writer]:
    """Reader and writer of one value of a non-fixed-width field (or an array element)."""
    t = f.type
    null = f.nullable(v)
    if t == "[]" or t == "{}":
        r, w = compile_struct(f.fields, v, flexible)
        if t == "{}":
            return r, w
        return _array_reader(r, null, flexible), _array_writer(w, null, flexible)
    if t.startswith("[]"):
        inner = t[2:]
        if inner in p.FIXED:
            code = p.FIXED[inner]
            return (_fixed_array_reader(code, null, flexible),
                    _fixed_array_writer(code, null, flexible))
        er, ew = p.READERS[inner, False, flexible], p.WRITERS[inner, False, flexible]
        return _array_reader(er, null, flexible), _array_writer(ew, null, flexible)
    if t in p.FIXED:
        s = struct.Struct(">" + p.FIXED[t])
        unpack, size, pack = s.unpack_from, s.size, s.pack

        def read_fixed(buf: Any, pos: int) -> tuple[Any, int]:
            return unpack(buf, pos)[0], pos + size

        def write_fixed(value: Any, out: list[bytes]) -> None:
            out.append(pack(value))
        return read_fixed, write_fixed
    return p.READERS[t, null, flexible], p.WRITERS[t, null, flexible]


Step = Callable[[Any, int, dict], int]
WStep = Callable[[dict, "list[bytes]"], None]


def _group_steps(names: list[tuple[str, Any]], codes: str) -> tuple[Step, WStep]:
    s = struct.Struct(">" + codes)
    unpack, size, pack = s.unpack_from, s.size, s.pack
    keys = tuple(n for n, _ in names)

    def read(buf: Any, pos: int, d: dict) -> int:
        d.update(zip(keys, unpack(buf, pos), strict=True))
        return pos + size

    def write(d: dict, out: list[bytes]) -> None:
        out.append(pack(*[d.get(n, df) for n, df in names]))
    return read, write


def _field_steps(name: str, default: Any, r: Reader, w: Writer) -> tuple[Step, WStep]:
    def read(buf: Any, pos: int, d: dict) -> int:
        d[name], pos = r(buf, pos)
        return pos

    def write(d: dict, out: list[bytes]) -> None:
        w(d.get(name, default), out)
    return read, write


def compile_struct(fields: list[Field], v: int, flexible: bool) -> tuple[Reader, Writer]:
    """The reader and writer of a struct (a dict) at version ``v``."""
    defaults: dict[str, Any] = {}
    rsteps: list[Step] = []
    wsteps: list[WStep] = []
    tagged: dict[int, tuple[str, Any, Reader, Writer]] = {}
    group: list[tuple[str, Any]] = []
    codes = ""

    def flush() -> None:
        nonlocal group, codes
        if group:
            r, w = _group_steps(group, codes)
            rsteps.append(r)
            wsteps.append(w)
        group, codes = [], ""

    for f in fields:
        default = f.default_value()
        if not f.exists(v) or (f.tag is not None and not flexible):
            defaults[f.name] = default
            continue
        if f.tag is not None:
            r, w = _scalar(f, v, flexible)
            tagged[f.tag] = (f.name, default, r, w)
            defaults[f.name] = default
        elif f.type in p.FIXED:
            group.append((f.name, default))
            codes += p.FIXED[f.type]
        else:
            flush()
            r, w = _scalar(f, v, flexible)
            rs, ws = _field_steps(f.name, default, r, w)
            rsteps.append(rs)
            wsteps.append(ws)
    flush()
    order = sorted(tagged.items())

    def read(buf: Any, pos: int) -> tuple[dict, int]:
        d = defaults.copy()
        for step in rsteps:
            pos = step(buf, pos, d)
        if flexible:
            pos = _read_tags(buf, pos, d, tagged)
        return d, pos

    def write(d: dict, out: list[bytes]) -> None:
        for step in wsteps:
            step(d, out)
        if flexible:
            _write_tags(d, out, order)
    return read, write


def _read_tags(buf: Any, pos: int, d: dict, known: dict) -> int:
    count, pos = p.read_uvarint(buf, pos)
    last = -1
    for _ in range(count):
        tag, pos = p.read_uvarint(buf, pos)
        size, pos = p.read_uvarint(buf, pos)
        end = pos + size
        if tag <= last or end > len(buf):
            raise p.CodecError("tagged fields out of order or past the end")
        last = tag
        spec = known.get(tag)
        if spec is not None:
            value, used = spec[2](buf[pos:end], 0)
            if used != size:
                raise p.CodecError(f"tagged field {tag} has {size - used} stray bytes")
            d[spec[0]] = value
        pos = end
    return pos


def _write_tags(d: dict, out: list[bytes], order: list) -> None:
    present = []
    for tag, (name, default, _r, w) in order:
        value = d.get(name, default)
        if value is not None and value != default and value != []:  # empty arrays: default
            body: list[bytes] = []
            w(value, body)
            present.append((tag, b"".join(body)))
    if not present:
        out.append(p.EMPTY_TAGS)
        return
    out.append(p.uvarint(len(present)))
    for tag, data in present:
        out.append(p.uvarint(tag))
        out.append(p.uvarint(len(data)))
        out.append(data)


class Message:
    """A request or response schema: compiled lazily per version, then cached."""

    __slots__ = ("_compiled", "fields", "flexible", "name")

    def __init__(self, name: str, text: str, flexible: int | None) -> None:
        self.name = name
        self.fields = parse(text)
        self.flexible = MAX_VERSION + 1 if flexible is None else flexible
        self._compiled: dict[int, tuple[Reader, Writer]] = {}

    def is_flexible(self, version: int) -> bool:
        return version >= self.flexible

    def codec(self, version: int) -> tuple[Reader, Writer]:
        c = self._compiled.get(version)
        if c is None:
            c = self._compiled[version] = compile_struct(self.fields, version,
                                                         version >= self.flexible)
        return c

    def decode(self, buf: Any, version: int, pos: int = 0) -> tuple[dict, int]:
        """A message body from ``buf[pos:]``; :class:`CodecError` for anything malformed."""
        with p.reading(self.name, "v", version):
            return self.codec(version)[0](buf, pos)

    def encode_into(self, value: dict, version: int, out: list[bytes]) -> None:
        self.codec(version)[1](value, out)

    def encode(self, value: dict, version: int) -> bytes:
        out: list[bytes] = []
        self.codec(version)[1](value, out)
        return b"".join(out)
