"""Argument tables survive CBOR and the database faithfully (types included)."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.store import Store, cbor
from amqplite.storeops import PutBinding, PutExchange, PutQueue

TZS = st.sampled_from([
    None, dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)),
    dt.timezone(dt.timedelta(hours=-8)),
])
SCALARS = (
    st.text()
    | st.binary()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.none()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.datetimes(timezones=TZS)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
TABLES = st.dictionaries(st.text(max_size=20), VALUES, max_size=6)


def same(a: Any, b: Any) -> bool:
    """Equality that also demands equal types, float signs, Decimal exponents, offsets."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return a == b


@given(TABLES)
@settings(max_examples=120, deadline=None)
def test_cbor_round_trip(table: dict[str, Any]) -> None:
    assert same(cbor.decode(cbor.encode(table)), table)


@given(st.dictionaries(st.text(max_size=5), st.integers(), min_size=2, max_size=5))
def test_digest_ignores_key_order(table: dict[str, int]) -> None:
    assert cbor.digest(table) == cbor.digest(dict(reversed(table.items())))


def test_edge_values() -> None:
    table = {
        "neg-zero": Decimal("-0.000"), "naive": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
        "nested": {"a": [b"\x00", None, True, 1, 1.0, -0.0]}, "big": 2**64,
    }
    assert same(cbor.decode(cbor.encode(table)), table)
    assert cbor.decode(cbor.encode(None)) == {}


@given(st.lists(TABLES, min_size=1, max_size=5, unique_by=cbor.digest))
@settings(max_examples=10, deadline=None)
def test_arguments_round_trip_through_store(tmp_path_factory, tables) -> None:
    path = tmp_path_factory.mktemp("cbor") / "a.db"
    store = Store(f"sqlite:///{path}", durability="os")
    store.create()
    store.start()
    exchanges = [PutExchange("/", f"x{i}", "headers", arguments=t) for i, t in enumerate(tables)]
    bindings = [PutBinding("/", "x0", "q", "queue", "", t) for t in tables]
    store.submit([PutQueue(1, "/", "q"), *exchanges, *bindings])  # bindings need their queue
    store.close(10)
    rec = Store(f"sqlite:///{path}").load()
    assert all(same(a.arguments, b.arguments) for a, b in zip(rec.exchanges, exchanges,
                                                             strict=True))
    assert all(same(a.arguments, b.arguments) for a, b in zip(rec.bindings, bindings,
                                                             strict=True))
