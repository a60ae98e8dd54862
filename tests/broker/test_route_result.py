"""VHost.route's result, and dead-lettering's single route, on the pure core.

``route`` returns where a message goes (``queues``) and the retaining
exchanges it passed (``retainers``); nothing is left on the vhost for a later
reader. A dead-lettered copy is routed once, also when its body is paged out
and the broker must first decide whether the copy can be stored row to row.
"""

from __future__ import annotations

from typing import Any

import pytest

from amqplite import build
from amqplite.broker.core import Broker
from amqplite.broker.exchanges.retaining import owner_of
from amqplite.broker.model import Message
from amqplite.broker.vhost import NO_RETAINERS, VHost
from tests.broker.conftest import PERSISTENT, TRANSIENT, FakeClock, deliveries, session_channel


def _msg(routing_key: str) -> Message:
    return Message(1, "", routing_key, TRANSIENT, b"x")


def _setup() -> tuple[Broker, Any, VHost]:
    b = Broker(now=FakeClock())
    _, ch = session_channel(b)
    return b, ch, b.vhost("/")


def _names(r: Any) -> list[str]:
    return sorted(q.name for q in r.queues)


def test_one_hop_routes_to_queues_and_passes_no_retainer(broker: Broker) -> None:
    _, ch = session_channel(broker)
    vh = broker.vhost("/")
    for q in ("a", "b"):
        broker.queue_declare(ch, q)
    broker.exchange_declare(ch, "d", "direct")
    broker.queue_bind(ch, "a", "d", "k")
    broker.queue_bind(ch, "b", "d", "k")
    r = vh.route(vh.exchanges["d"], "k", _msg("k"))
    assert _names(r) == ["a", "b"] and r.retainers is NO_RETAINERS
    assert list(vh.route(vh.exchanges["d"], "other", _msg("other")).queues) == []
    # the default exchange: a result made once per queue, nothing new per message
    by_name = vh.route(vh.exchanges[""], "a", _msg("a"))
    assert list(by_name.queues) == [vh.queues["a"]] and by_name.retainers == ()
    assert vh.route(vh.exchanges[""], "a", _msg("a")) is by_name
    assert not hasattr(vh, "reached")


def _diamond(b: Broker, ch: Any, kind: str) -> None:
    """top (fanout) -> m1, m2 (``kind``) -> q, each middle one bound to q."""
    b.queue_declare(ch, "q")
    b.exchange_declare(ch, "top", "fanout")
    for m in ("m1", "m2"):
        b.exchange_declare(ch, m, kind)
        b.exchange_bind(ch, m, "top", "")
        b.queue_bind(ch, "q", m, "")


def test_exchange_to_exchange_reaches_each_queue_once() -> None:
    b, ch, vh = _setup()
    _diamond(b, ch, "fanout")
    r = vh.route(vh.exchanges["top"], "k", _msg("k"))
    assert _names(r) == ["q"] and r.retainers == ()


def test_alternate_exchange_takes_what_the_first_does_not_route() -> None:
    b, ch, vh = _setup()
    b.queue_declare(ch, "caught")
    b.queue_declare(ch, "direct")
    b.exchange_declare(ch, "ae", "fanout")
    b.exchange_declare(ch, "d", "direct", arguments={"alternate-exchange": "ae"})
    b.queue_bind(ch, "caught", "ae", "")
    b.queue_bind(ch, "direct", "d", "k")
    assert _names(vh.route(vh.exchanges["d"], "k", _msg("k"))) == ["direct"]
    r = vh.route(vh.exchanges["d"], "nope", _msg("nope"))
    assert _names(r) == ["caught"] and r.retainers == ()


def test_retaining_exchanges_passed_on_the_walk_are_returned_once() -> None:
    b, ch, vh = _setup()
    _diamond(b, ch, "x-recent-history")
    b.exchange_bind(ch, "m2", "m1", "")  # m2 reached twice: kept once
    b.exchange_declare(ch, "d", "direct", arguments={"alternate-exchange": "top"})
    r = vh.route(vh.exchanges["d"], "k", _msg("k"))  # d -> (alternate) top -> m1, m2 -> q
    assert _names(r) == ["q"]
    assert sorted(e.name for e in r.retainers) == ["m1", "m2"]
    # a retaining exchange published to directly is a retainer of its own route,
    # routed or not (x-recent-history keeps what nobody is bound for)
    b.exchange_declare(ch, "lonely", "x-recent-history")
    alone = vh.route(vh.exchanges["lonely"], "k", _msg("k"))
    assert list(alone.queues) == [] and [e.name for e in alone.retainers] == ["lonely"]
    # and the publish keeps it in each of them, once
    b.basic_publish(ch, "d", "k", TRANSIENT, b"kept")
    assert b.retained.totals(owner_of("/", "m1"))[0] == 1
    assert b.retained.totals(owner_of("/", "m2"))[0] == 1


def _count_routes(vh: VHost) -> list[str]:
    """Wrap this vhost's route (the real one still runs) to count its calls.

    A compiled VHost's methods cannot be replaced: then the test skips (CI runs
    tests/broker against the pure build too, AMQPLITE_PURE=1)."""
    if build() != "pure Python":
        pytest.skip("the spy replaces a method of a compiled class")
    calls: list[str] = []
    real = vh.route

    def counting(ex: Any, *args: Any) -> Any:
        calls.append(ex.name)
        return real(ex, *args)

    vh.route = counting  # type: ignore[method-assign]
    return calls


WINDOW = 10


def test_a_paged_out_message_is_routed_once_when_dead_lettered() -> None:
    """Expired messages deep in a durable queue (bodies out of RAM) go to a
    durable dead-letter queue row to row: one route each, x-death as ever."""
    clock = FakeClock()
    b = Broker(now=clock, body_window=WINDOW)
    _, ch = session_channel(b)
    vh = b.vhost("/")
    b.queue_declare(ch, "dlq", durable=True)
    # a length limit keeps the entries in RAM (no spill) while their bodies page out
    b.queue_declare(ch, "src", durable=True, arguments={
        "x-message-ttl": 1000, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dlq", "x-max-length": 10_000})
    n = 3 * WINDOW
    for i in range(n):
        b.basic_publish(ch, "", "src", PERSISTENT, b"m%03d" % i)
    out = b.take_outcome()
    b.commit_done(out.evictable)
    src = vh.queues["src"]
    paged = sum(1 for e in src.ready if e.message.body is None)
    assert paged >= n - WINDOW - 1
    calls = _count_routes(vh)
    clock.t += 2
    b.tick()
    assert len(src.ready) == 0 and len(vh.queues["dlq"].ready) == n
    assert calls == [""] * n  # old code: one more route for each paged-out message
    assert b.stats["dead_lettered"] == n
    copies = list(vh.queues["dlq"].ready)
    assert sum(1 for e in copies if e.message.copy_of is not None) == paged
    first = copies[0].message.headers()
    assert first["x-death"][0]["reason"] == "expired" and first["x-death"][0]["queue"] == "src"


def test_a_dead_letter_in_ram_is_routed_once_and_a_cycle_is_dropped(broker: Broker) -> None:
    _, ch = session_channel(broker)
    vh = broker.vhost("/")
    # src dead-letters to itself through the default exchange: an expiry cycle
    broker.queue_declare(ch, "src", arguments={"x-message-ttl": 1000,
                                                "x-dead-letter-exchange": ""})
    broker.basic_publish(ch, "", "src", TRANSIENT, b"x")
    calls = _count_routes(vh)
    broker.now.t += 2  # type: ignore[attr-defined]
    broker.tick()
    assert calls == [""] and len(vh.queues["src"].ready) == 0
    assert broker.stats["dead_lettered"] == 1
    assert deliveries(broker) == []
