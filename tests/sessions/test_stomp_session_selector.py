"""STOMP SUBSCRIBE ``selector``: filtered at routing on the subscription's own
binding (/topic/, /exchange/), by the dispatcher on shared queues, refused when it
does not parse (plain calls)."""

from __future__ import annotations

import pytest

from amqplite.sessions.stomp.session import subscription_queue
from tests.sessions.stomp_node import Node


def _bodies(c) -> list[bytes]:  # type: ignore[no-untyped-def]
    return sorted(m.body for m in c.messages())


def test_topic_subscriptions_get_only_their_matches() -> None:
    node = Node()
    red, heavy, p = node.connect(), node.connect(), node.connect()
    red.send("SUBSCRIBE", id="1", destination="/topic/t", selector="color = 'red'")
    heavy.send("SUBSCRIBE", id="1", destination="/topic/t",
               selector="convert_string_expressions:weight > 10")
    p.send("SEND", b"red-light", destination="/topic/t", color="red", weight="2")
    p.send("SEND", b"blue-heavy", destination="/topic/t", color="blue", weight="20")
    p.send("SEND", b"red-heavy", destination="/topic/t", color="red", weight="11")
    p.send("SEND", b"plain", destination="/topic/t")
    assert _bodies(red) == [b"red-heavy", b"red-light"]
    assert _bodies(heavy) == [b"blue-heavy", b"red-heavy"]
    # nothing unmatched waits in the subscriptions' queues either
    vh = node.broker.vhosts["/"]
    for sess in ("session-1", "session-2"):
        assert vh.queues[subscription_queue("/topic/t", "1", sess)].message_count == 0


def test_mapped_properties_and_exchange_destinations() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="x", destination="/exchange/amq.direct/k",
           selector="hyphenated_props:content-type = 'text/plain' AND JMSPriority > 4")
    c.send("SEND", b"1", destination="/exchange/amq.direct/k", content_type="text/plain",
           priority="9")
    c.send("SEND", b"2", destination="/exchange/amq.direct/k", content_type="text/plain")
    c.send("SEND", b"3", destination="/exchange/amq.direct/k", priority="9")
    assert _bodies(c) == [b"1"]


def test_a_durable_subscription_again_with_another_selector_filters_with_it_only() -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="d", destination="/topic/t", durable="true", auto_delete="false",
           selector="a = '1'")
    c.close()
    c2 = node.connect()
    c2.send("SUBSCRIBE", id="d", destination="/topic/t", durable="true", auto_delete="false",
            selector="a = '2'")
    c2.send("SEND", b"one", destination="/topic/t", a="1")
    c2.send("SEND", b"two", destination="/topic/t", a="2")
    assert _bodies(c2) == [b"two"]
    name = subscription_queue("/topic/t", "d")
    (b,) = node.broker.vhosts["/"].bindings_to[("queue", name)]
    assert b.args_dict == {"x-selector": "a = '2'"}


@pytest.mark.parametrize("destination", ["/queue/q", "/amq/queue/q"])
def test_shared_queue_selectors_filter_and_park_what_nobody_matches(destination: str) -> None:
    """As in Artemis: a consumer gets only its matches, in queue order; a message
    no consumer matches stays in the queue (parked, not redelivered in a loop)
    until a consumer that wants it comes."""
    node = Node()
    p = node.connect()
    p.send("SEND", b"x", destination="/queue/q")  # declares q
    q = node.broker.vhosts["/"].queues["q"]
    red = node.connect()
    red.send("SUBSCRIBE", id="r", destination=destination, selector="color = 'red'",
             ack="client-individual")
    assert [m.body for m in red.messages()] == []  # "x" has no color: parked
    for body, color in ((b"r1", "red"), (b"b1", "blue"), (b"r2", "red"), (b"b2", "blue")):
        p.send("SEND", body, destination="/queue/q", color=color)
    assert [m.body for m in red.messages()] == [b"r1", b"r2"]
    assert q.message_count == 3 and [e.message.body for e in q.parked] == [b"x", b"b1", b"b2"]
    blue = node.connect()
    blue.send("SUBSCRIBE", id="b", destination=destination, selector="color = 'blue'")
    assert [m.body for m in blue.messages()] == [b"b1", b"b2"]
    anyone = node.connect()
    anyone.send("SUBSCRIBE", id="a", destination=destination)
    assert [m.body for m in anyone.messages()] == [b"x"]
    assert q.message_count == 0 and not q.parked


def test_a_nacked_message_goes_back_to_a_consumer_that_matches() -> None:
    node = Node()
    p = node.connect()
    p.send("SEND", b"m", destination="/queue/q", color="red")
    picky = node.connect()
    picky.send("SUBSCRIBE", id="s", destination="/queue/q", selector="color = 'red'",
               ack="client-individual", **{"prefetch-count": "1"})
    (m,) = picky.messages()
    picky.send("NACK", id=m.headers["ack"])
    (again,) = picky.messages()
    assert again.body == b"m" and again.headers["redelivered"] == "true"


def test_parked_messages_go_back_when_the_selector_consumers_leave() -> None:
    node = Node()
    p = node.connect()
    picky = node.connect()
    p.send("SEND", b"0", destination="/queue/q")
    picky.send("SUBSCRIBE", id="s", destination="/queue/q", selector="n = '1'",
               ack="client-individual", **{"prefetch-count": "1"})
    p.send("SEND", b"1", destination="/queue/q", n="1")
    p.send("SEND", b"2", destination="/queue/q", n="2")
    assert [m.body for m in picky.messages()] == [b"1"]
    q = node.broker.vhosts["/"].queues["q"]
    assert [e.message.body for e in q.parked] == [b"0", b"2"] and q.message_count == 2
    picky.send("UNSUBSCRIBE", id="s")
    assert not q.parked and not q.selective and q.message_count == 2
    assert [e.message.body for e in q.ready] == [b"0", b"2"]
    plain = node.connect()
    plain.send("SUBSCRIBE", id="p", destination="/queue/q")
    assert [m.body for m in plain.messages()] == [b"0", b"2"]


def test_a_selector_on_a_stream_queue_is_refused() -> None:
    node = Node()
    node.connect().send("SEND", b"x", destination="/queue/s", **{"x-queue-type": "stream"})
    c = node.connect()
    c.send("SUBSCRIBE", id="s", destination="/amq/queue/s", selector="a = 1", ack="client",
           **{"prefetch-count": "10"})
    (e,) = c.frames()
    assert e.command == "ERROR" and b"selectors are not supported on stream queue" in e.body
    assert c.finished


@pytest.mark.parametrize(("selector", "problem"), [
    ("a =", b"selector: expected a value, found the end at position 4"),
    ("", b"selector: empty selector"),
])
def test_a_bad_selector_is_an_error_with_the_parsers_words(selector: str,
                                                          problem: bytes) -> None:
    node = Node()
    c = node.connect()
    c.send("SUBSCRIBE", id="s", destination="/topic/t", selector=selector)
    (e,) = c.frames()
    assert e.command == "ERROR" and e.headers["message"] == "Invalid selector"
    assert e.body.startswith(problem)
    assert not c.finished  # a refused frame: the connection goes on (as RabbitMQ's)
    assert not node.broker.vhosts["/"].exchanges["amq.topic"].bindings
