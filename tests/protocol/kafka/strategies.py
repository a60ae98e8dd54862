"""Hypothesis strategies drawn from the codec's own schemas: a value for every field
that exists at a version, of the field's type and nullability."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from amqplite.protocol.kafka.schema import Field

_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
text = st.text(max_size=12)
binary = st.binary(max_size=24)


def _prim(t: str) -> st.SearchStrategy[Any]:
    if t in _INTS:
        bits = _INTS[t]
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if t == "uint16":
        return st.integers(0, 0xFFFF)
    if t == "uint32":
        return st.integers(0, 0xFFFFFFFF)
    if t == "bool":
        return st.booleans()
    if t == "string":
        return text
    if t in ("bytes", "records"):
        return binary
    if t == "uuid":
        return st.uuids()
    raise AssertionError(t)


def field_value(f: Field, v: int, flexible: bool) -> st.SearchStrategy[Any]:
    if f.type == "[]":
        s: st.SearchStrategy[Any] = st.lists(struct_value(f.fields, v, flexible), max_size=2)
    elif f.type == "{}":
        s = struct_value(f.fields, v, flexible)
    elif f.type.startswith("[]"):
        s = st.lists(_prim(f.type[2:]), max_size=3)
    else:
        s = _prim(f.type)
    if f.nullable(v) or (f.type == "{}" and f.tag is not None):
        s = st.none() | s
    return s


def struct_value(fields: list[Field], v: int, flexible: bool) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({
        f.name: field_value(f, v, flexible) for f in fields
        if f.exists(v) and (f.tag is None or flexible)})


def same(sent: Any, got: Any) -> bool:
    """``got`` (decoded) agrees with ``sent`` on every key ``sent`` has: decoded dicts
    also hold the defaults of fields the version lacks."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(same(v, got.get(k)) for k, v in sent.items())
    if isinstance(sent, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(sent) == len(got)
                and all(same(a, b) for a, b in zip(sent, got, strict=True)))
    return bool(sent == got)
