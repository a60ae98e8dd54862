"""Routing through random exchange graphs, against a naive reference router."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqplite.broker.core import Broker
from amqplite.broker.exchanges.headers import headers_match
from amqplite.broker.exchanges.topic import topic_matches
from amqplite.protocol.properties import BasicProperties, encode_properties
from tests.broker.conftest import FakeClock

EXCHANGES = {"d": "direct", "f": "fanout", "t": "topic", "h": "headers"}
QUEUES = ["q1", "q2", "q3"]
keys = st.sampled_from(["a", "b", "a.b", "b.a", ""])
patterns = st.sampled_from(["a", "b", "*", "#", "a.*", "#.a", "a.b"])
header_vals = st.dictionaries(st.sampled_from(["x", "y"]), st.sampled_from([1, 2, "s"]),
                              max_size=2)
binding = st.tuples(
    st.sampled_from(sorted(EXCHANGES)),                      # source exchange
    st.sampled_from([("queue", q) for q in QUEUES] + [("exchange", e) for e in EXCHANGES]),
    patterns,
    st.tuples(st.sampled_from(["all", "any"]), header_vals),  # headers binding args
)


def reference(bindings: list[Any], start: str, rk: str, headers: dict[str, Any]) -> set[str]:
    """Breadth-first over exchanges, testing every binding literally."""
    seen, frontier, out = set(), [start], set()
    while frontier:
        ex = frontier.pop()
        if ex in seen:
            continue
        seen.add(ex)
        for src, (kind, dest), key, (mode, hargs) in bindings:
            if src != ex:
                continue
            kind_of = EXCHANGES[ex]
            if kind_of == "direct":
                ok = key == rk
            elif kind_of == "fanout":
                ok = True
            elif kind_of == "topic":
                ok = topic_matches(key, rk)
            else:
                ok = headers_match({"x-match": mode, **hargs}, headers)
            if ok:
                (out.add(dest) if kind == "queue" else frontier.append(dest))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(binding, max_size=10), st.sampled_from(sorted(EXCHANGES)), keys, header_vals)
def test_route_matches_reference(bindings: list[Any], start: str, rk: str,
                                 headers: dict[str, Any]) -> None:
    b = Broker(now=FakeClock())
    s = b.open_session("guest", "/")
    ch = b.open_channel(s, 1)
    for name, kind in EXCHANGES.items():
        b.exchange_declare(ch, name, kind)
    for q in QUEUES:
        b.queue_declare(ch, q)
    for src, (kind, dest), key, (mode, hargs) in bindings:
        args = {"x-match": mode, **hargs} if EXCHANGES[src] == "headers" else None
        if kind == "queue":
            b.queue_bind(ch, dest, src, key, args)
        else:
            b.exchange_bind(ch, dest, src, key, args)
    props = encode_properties(BasicProperties(headers=headers or None))
    b.basic_publish(ch, start, rk, props, b"m")
    got = {q for q in QUEUES if b.vhosts["/"].queues[q].message_count}
    assert got == reference(bindings, start, rk, headers)
    assert all(b.vhosts["/"].queues[q].message_count <= 1 for q in QUEUES)
