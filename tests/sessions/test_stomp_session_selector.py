"""STOMP SUBSCRIBE ``selector``: filtered at routing on the subscription's own
binding, refused on shared queues and when it does not parse (plain calls)."""

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
def test_shared_queue_subscription_with_a_selector_is_refused(destination: str) -> None:
    node = Node()
    node.connect().send("SEND", b"x", destination="/queue/q")
    c = node.connect()
    c.send("SUBSCRIBE", id="s", destination=destination, selector="a = 1")
    (e,) = c.frames()
    assert e.command == "ERROR" and e.headers["message"] == "Not supported"
    assert b"selectors work on /topic/ and /exchange/ subscriptions" in e.body
    assert b"not yet on shared queues" in e.body
    assert c.finished
    assert not node.broker.vhosts["/"].queues["q"].consumers


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
    assert c.finished
    assert not node.broker.vhosts["/"].exchanges["amq.topic"].bindings
