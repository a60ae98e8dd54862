"""Hypothesis strategies for AMQP field values, tables, properties and methods."""

from __future__ import annotations

import decimal
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from amqplite.protocol.codec import FieldArray, FieldTable, Timestamp
from amqplite.protocol.methods import Method
from amqplite.protocol.properties import BasicProperties

_INT_RANGES = {
    "b": (-(2**7), 2**7 - 1),
    "B": (0, 2**8 - 1),
    "s": (-(2**15), 2**15 - 1),
    "u": (0, 2**16 - 1),
    "I": (-(2**31), 2**31 - 1),
    "i": (0, 2**32 - 1),
    "l": (-(2**63), 2**63 - 1),
    "L": (-(2**63), 2**63 - 1),
}

non_utf8 = st.binary(min_size=1, max_size=20).filter(lambda b: not _is_utf8(b))


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def shortstr(max_bytes: int = 255, alphabet: Any = None) -> st.SearchStrategy[str]:
    text = st.text(alphabet=alphabet, max_size=20) if alphabet else st.text(max_size=20)
    return text.filter(lambda s: len(s.encode()) <= max_bytes)


def scalar_tagged() -> st.SearchStrategy[tuple[str, Any]]:
    """(tag, value) pairs for every scalar tag."""
    parts: list[st.SearchStrategy[tuple[str, Any]]] = [
        st.tuples(st.just(tag), st.integers(lo, hi)) for tag, (lo, hi) in _INT_RANGES.items()
    ]
    parts += [
        st.tuples(st.just("t"), st.booleans()),
        st.tuples(st.just("t"), st.integers(2, 255)),  # non-canonical bool octets
        st.tuples(st.just("f"), st.floats(width=32, allow_nan=False)),
        st.tuples(st.just("d"), st.floats(allow_nan=False)),
        st.tuples(
            st.just("D"),
            st.builds(lambda raw, scale: decimal.Decimal(raw).scaleb(-scale),
                      st.integers(0, 2**32 - 1), st.integers(0, 255)),
        ),
        st.tuples(st.just("S"), st.text(max_size=30)),
        st.tuples(st.just("S"), non_utf8),
        st.tuples(st.just("x"), st.binary(max_size=30)),
        st.tuples(st.just("T"), st.integers(0, 2**64 - 1).map(Timestamp)),
        st.tuples(st.just("V"), st.none()),
    ]
    return st.one_of(parts)


def _table_from(items: list[tuple[str, tuple[str, Any]]]) -> FieldTable:
    table = FieldTable()
    for key, (tag, value) in items:
        table.set(key, value, tag)
    return table


def _array_from(items: list[tuple[str, Any]]) -> FieldArray:
    array = FieldArray()
    for tag, value in items:
        array.append_tagged(value, tag)
    return array


def tagged_values() -> st.SearchStrategy[tuple[str, Any]]:
    """Scalars plus nested tables/arrays, all carrying explicit tags."""

    def extend(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[Any]:
        keys = shortstr(60)
        tables = st.lists(st.tuples(keys, children), max_size=4, unique_by=lambda kv: kv[0])
        return st.one_of(
            tables.map(lambda items: ("F", _table_from(items))),
            st.lists(children, max_size=4).map(lambda items: ("A", _array_from(items))),
        )

    return st.recursive(scalar_tagged(), extend, max_leaves=8)


def field_tables() -> st.SearchStrategy[FieldTable]:
    return st.lists(
        st.tuples(shortstr(60), tagged_values()), max_size=5, unique_by=lambda kv: kv[0]
    ).map(_table_from)


plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)


def plain_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        plain_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(shortstr(30), children, max_size=4),
        ),
        max_leaves=8,
    )


def properties() -> st.SearchStrategy[BasicProperties]:
    text = st.none() | shortstr(255)
    octet = st.none() | st.integers(0, 255)
    return st.builds(
        BasicProperties,
        content_type=text,
        content_encoding=text,
        headers=st.none() | field_tables(),
        delivery_mode=octet,
        priority=octet,
        correlation_id=text,
        reply_to=text,
        expiration=text,
        message_id=text,
        timestamp=st.none() | st.integers(0, 2**64 - 1),
        type=text,
        user_id=text,
        app_id=text,
        cluster_id=text,
    )


def _kind_strategy(kind: str, names_alphabet: Any = None, simple_tables: bool = False) -> Any:
    if kind == "octet":
        return st.integers(0, 255)
    if kind == "short":
        return st.integers(0, 2**16 - 1)
    if kind == "long":
        return st.integers(0, 2**32 - 1)
    if kind in ("longlong", "timestamp"):
        # pamqp (names_alphabet given) only packs signed 64-bit values
        return st.integers(0, 2**63 - 1 if names_alphabet else 2**64 - 1)
    if kind == "shortstr":
        return shortstr(255, names_alphabet)
    if kind == "longstr":
        if names_alphabet:  # pamqp writes longstr as UTF-8 text
            return st.text(alphabet=names_alphabet, max_size=40).map(str.encode)
        return st.binary(max_size=40)
    if kind == "text":
        return st.text(max_size=40)
    if kind == "bit":
        return st.booleans()
    if kind == "table":
        if simple_tables:
            return st.dictionaries(
                st.text(alphabet=names_alphabet or "abcxyz", min_size=1, max_size=10),
                st.one_of(st.text(max_size=10), st.booleans()),
                max_size=4,
            ).map(lambda d: FieldTable(sorted(d.items())))  # pamqp writes keys sorted
        return field_tables()
    raise AssertionError(kind)


def method_instances(cls: type[Method], names_alphabet: Any = None,
                     simple_tables: bool = False) -> st.SearchStrategy[Method]:
    kwargs = {
        name: _kind_strategy(kind, names_alphabet, simple_tables)
        for name, kind in cls.WIRE
        if not name.startswith("reserved")
    }
    return st.builds(cls, **kwargs)


#: Applied to every property test here so the directory stays fast.
FAST = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: For tests parametrised over all 64 methods.
FAST_PER_METHOD = settings(FAST, max_examples=8)
