"""Hypothesis strategies for AMQP field values, tables, properties and methods."""

from __future__ import annotations

import decimal
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from amqplite.protocol.codec import FieldArray, FieldTable, Timestamp, encode_table
from amqplite.protocol.methods import Method
from amqplite.protocol.properties import BasicProperties, encode_properties

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


# --------------------------------------------------------------------------
# hostile content properties: what a buggy or malicious publisher can send

#: x-death counts a publisher can write that no broker would
ODD_COUNTS: list[tuple[str, Any]] = [
    ("S", "abc"), ("S", b"\xff"), ("d", float("nan")), ("d", float("inf")),
    ("d", float("-inf")), ("f", 1.5), ("T", Timestamp(2**64 - 1)), ("T", Timestamp(2**63)),
    ("l", 2**63 - 1), ("l", -(2**63)), ("t", True), ("V", None), ("F", FieldTable()),
    ("A", FieldArray()), ("D", decimal.Decimal("1.5")), ("I", -1),
]


def _x_death_entry(queue: str, reason: str, count: tuple[str, Any]) -> FieldTable:
    entry = FieldTable()
    entry.set("count", count[1], count[0])
    entry.set("queue", queue, "S")
    entry.set("reason", reason, "S")
    return entry


def odd_x_death(queues: list[str]) -> st.SearchStrategy[FieldTable]:
    """Headers whose x-death matches a queue of ``queues`` but carries an odd count."""
    reasons = ["expired", "rejected", "maxlen", "delivery_limit"]
    entry = st.builds(_x_death_entry, st.sampled_from(queues), st.sampled_from(reasons),
                      st.sampled_from(ODD_COUNTS))

    def headers(entries: list[FieldTable], extra: FieldTable) -> FieldTable:
        table = extra.copy()
        table.set("x-death", _array_from([("F", e) for e in entries]), "A")
        return table

    return st.builds(headers, st.lists(entry, min_size=1, max_size=3), field_tables())


def _nested(depth: int) -> bytes:
    inner = b"\x00\x00\x00\x00"
    for _ in range(depth - 1):
        body = b"\x01kF" + inner
        inner = len(body).to_bytes(4, "big") + body
    return inner


@st.composite
def _mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """``raw`` with a few bytes overwritten, cut short or extended."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.sampled_from([0x00, 0x01, 0x41, 0x46, 0x53, 0x7F, 0x80, 0xFF,
                                        draw(st.integers(0, 255))]))
    how = draw(st.sampled_from(["keep", "cut", "extend"]))
    if how == "cut" and data:
        del data[draw(st.integers(0, len(data) - 1)):]
    elif how == "extend":
        data += draw(st.binary(max_size=8))
    return bytes(data)


def hostile_properties(queues: list[str] | None = None) -> st.SearchStrategy[bytes]:
    """Raw property bytes: valid, subtly broken, deeply nested, odd x-death, or noise."""
    valid = properties().map(encode_properties)
    headers_only = st.builds(
        lambda body: (1 << 13).to_bytes(2, "big") + body,
        st.one_of(st.integers(60, 70).map(_nested), field_tables().map(encode_table)),
    )
    parts = [
        valid,
        valid.flatmap(_mutated),
        headers_only,
        headers_only.flatmap(_mutated),
        st.binary(max_size=64),
        # a non-UTF-8 message-id / user-id: valid on the wire, not as text
        st.builds(lambda b: (1 << 7).to_bytes(2, "big") + bytes([len(b)]) + b, non_utf8),
        st.builds(lambda b: (1 << 4).to_bytes(2, "big") + bytes([len(b)]) + b, non_utf8),
    ]
    if queues:
        parts.append(odd_x_death(queues).map(
            lambda h: encode_properties(BasicProperties(headers=h))))
    return st.one_of(parts)
