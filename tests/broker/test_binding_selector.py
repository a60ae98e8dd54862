"""Binding selectors (``x-selector``) on the pure core: the binding routes only
the messages whose STOMP-mapped headers match, is refused when it does not
parse, and comes back from the store with its argument."""

from __future__ import annotations

from typing import Any

import pytest

from amqplite.broker.core import Broker
from amqplite.broker.model import Message
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.errors import ChannelError
from amqplite.protocol.properties import BasicProperties, encode_properties
from amqplite.server.recovery import restore
from amqplite.store import Recovered
from amqplite.storeops import PutBinding, PutExchange, PutQueue
from tests.broker.conftest import FakeClock, session_channel

SEL = "x-selector"


def _props(headers: dict[str, str] | None = None, **fields: Any) -> bytes:
    table = None
    if headers:
        table = FieldTable()
        for k, v in headers.items():
            table.set(k, v, "S")
    return encode_properties(BasicProperties(headers=table, **fields))


def _routed(b: Broker, exchange: str, key: str, props: bytes) -> list[str]:
    vh = b.vhost("/")
    msg = Message(1, exchange, key, props, b"x")
    return sorted(q.name for q in vh.route(vh.exchanges[exchange], key, msg).queues)


def _topic_pair(b: Broker, ch: Any) -> None:
    for q in ("red", "heavy", "all"):
        b.queue_declare(ch, q)
    b.queue_bind(ch, "red", "amq.topic", "t", {SEL: "color = 'red'"})
    b.queue_bind(ch, "heavy", "amq.topic", "t.#",
                 {SEL: "convert_string_expressions:weight > 10"})
    b.queue_bind(ch, "all", "amq.topic", "t")


def test_a_selector_binding_routes_only_matching_messages(broker: Broker) -> None:
    _, ch = session_channel(broker)
    _topic_pair(broker, ch)
    assert _routed(broker, "amq.topic", "t", _props({"color": "red"})) == ["all", "red"]
    assert _routed(broker, "amq.topic", "t", _props({"weight": "11"})) == ["all", "heavy"]
    assert _routed(broker, "amq.topic", "t", _props({"color": "red", "weight": "12"})) == [
        "all", "heavy", "red"]
    assert _routed(broker, "amq.topic", "t", _props({"weight": "3"})) == ["all"]
    assert _routed(broker, "amq.topic", "t", _props()) == ["all"]  # NULL is not TRUE
    # the routing key still decides first
    assert _routed(broker, "amq.topic", "t.x", _props({"color": "red", "weight": "99"})) == [
        "heavy"]


def test_selectors_see_mapped_properties(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.exchange_declare(ch, "f", "fanout")
    broker.queue_bind(ch, "q", "f", "",
                      {SEL: "JMSPriority > 5 AND JMSCorrelationID = 'c1' AND "
                            "JMSDeliveryMode = 'PERSISTENT' AND JMSType LIKE 'ord%'"})
    good = _props(priority=9, correlation_id="c1", delivery_mode=2, type="order")
    assert _routed(broker, "f", "", good) == ["q"]
    assert _routed(broker, "f", "", _props(priority=9, correlation_id="c1", type="order")) == []
    assert _routed(broker, "f", "", _props(priority=1, correlation_id="c1", delivery_mode=2,
                                           type="order")) == []


def test_same_queue_bound_with_and_without_a_selector_gets_each_message_once(
        broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.queue_bind(ch, "q", "amq.direct", "k", {SEL: "a = 'x'"})
    broker.queue_bind(ch, "q", "amq.direct", "k", {SEL: "b = 'y'"})
    assert _routed(broker, "amq.direct", "k", _props({"a": "x", "b": "y"})) == ["q"]
    assert _routed(broker, "amq.direct", "k", _props({"b": "y"})) == ["q"]
    assert _routed(broker, "amq.direct", "k", _props({"a": "z"})) == []
    broker.queue_bind(ch, "q", "amq.direct", "k")
    assert _routed(broker, "amq.direct", "k", _props({"a": "z"})) == ["q"]
    # unbinding the selector bindings leaves the plain one, and nothing stale
    broker.queue_bind(ch, "q", "amq.direct", "k", {SEL: "a = 'x'"}, unbind=True)
    broker.queue_bind(ch, "q", "amq.direct", "k", {SEL: "b = 'y'"}, unbind=True)
    ex = broker.vhost("/").exchanges["amq.direct"]
    assert ex.selected == {} and ex.selector_tokens == {}
    assert _routed(broker, "amq.direct", "k", _props()) == ["q"]


def test_headers_exchange_and_exchange_bindings_filter_too(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.exchange_declare(ch, "mid", "fanout")
    broker.queue_bind(ch, "q", "mid", "")
    broker.exchange_bind(ch, "mid", "amq.headers", "",
                         {"x-match": "all-with-x", "kind": "a", SEL: "n = '1'"})
    assert _routed(broker, "amq.headers", "", _props({"kind": "a", "n": "1"})) == ["q"]
    assert _routed(broker, "amq.headers", "", _props({"kind": "a", "n": "2"})) == []
    assert _routed(broker, "amq.headers", "", _props({"kind": "b", "n": "1"})) == []


def test_alternate_exchange_takes_what_no_selector_matched(broker: Broker) -> None:
    _, ch = session_channel(broker)
    for q in ("q", "unrouted"):
        broker.queue_declare(ch, q)
    broker.exchange_declare(ch, "ae", "fanout")
    broker.queue_bind(ch, "unrouted", "ae", "")
    broker.exchange_declare(ch, "x", "direct", arguments={"alternate-exchange": "ae"})
    broker.queue_bind(ch, "q", "x", "k", {SEL: "a = 'x'"})
    assert _routed(broker, "x", "k", _props({"a": "x"})) == ["q"]
    assert _routed(broker, "x", "k", _props({"a": "y"})) == ["unrouted"]


@pytest.mark.parametrize(("args", "text"), [
    ({SEL: "a ="}, "selector: expected a value, found the end at position 4"),
    ({SEL: 7}, "'x-selector': must be a string"),
])
def test_a_bad_selector_is_refused_at_bind(broker: Broker, args: dict[str, Any],
                                           text: str) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    with pytest.raises(ChannelError) as exc:
        broker.queue_bind(ch, "q", "amq.topic", "t", args)
    assert exc.value.reply_code == 406 and text in exc.value.reply_text
    assert not broker.vhost("/").exchanges["amq.topic"].bindings


def test_a_durable_selector_binding_is_stored_and_recovered_with_its_argument() -> None:
    b = Broker(now=FakeClock())
    _, ch = session_channel(b)
    b.queue_declare(ch, "q", durable=True)
    b.queue_bind(ch, "q", "amq.topic", "t", {SEL: "color = 'red'"})
    ops = b.take_outcome().store_ops
    puts = [op for op in ops if isinstance(op, PutBinding)]
    assert [p.arguments for p in puts] == [{SEL: "color = 'red'"}]
    qs = [op for op in ops if isinstance(op, PutQueue)]

    again = Broker(now=FakeClock())
    restore(again, Recovered(exchanges=[PutExchange("/", "amq.topic", "topic")], queues=qs,
                             bindings=puts))
    assert _routed(again, "amq.topic", "t", _props({"color": "red"})) == ["q"]
    assert _routed(again, "amq.topic", "t", _props({"color": "blue"})) == []


def test_a_retaining_exchange_replays_only_what_the_selector_matches(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.exchange_declare(ch, "hist", "x-recent-history")
    for color in ("red", "blue", "red"):
        broker.basic_publish(ch, "hist", "", _props({"color": color}), color.encode())
    broker.queue_declare(ch, "q")
    broker.queue_bind(ch, "q", "hist", "", {SEL: "color = 'red'"})
    assert broker.vhost("/").queues["q"].message_count == 2
    broker.basic_publish(ch, "hist", "", _props({"color": "blue"}), b"live blue")
    assert broker.vhost("/").queues["q"].message_count == 2
