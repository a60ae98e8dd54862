"""PUBLISH / SUBSCRIBE at QoS 0, 1 and 2 across protocol levels, wildcards, the
QoS 2 handshake byte by byte, and the ``$`` rule (MQTT 3.1.1 sections 3.3, 3.8,
4.3, 4.7; MQTT 5 the same)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.mqtt import _raw
from conformance.mqtt._raw import RawClient
from conformance.mqtt.conftest import ClientFactory, Names


@pytest.mark.parametrize("version", [3, 4, 5])
def test_connack_accepts_a_clean_session(mqtt: ClientFactory, version: int) -> None:
    c = mqtt(version)
    assert c.connect() == (0, False)


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_publish_reaches_a_subscriber_in_order(mqtt: ClientFactory, names: Names,
                                               version: int, qos: int) -> None:
    sub, pub = mqtt(version), mqtt(version)
    sub.connect()
    pub.connect()
    topic = names.topic()
    granted = sub.subscribe(topic, qos)
    # the server may grant less than asked for (3.9.3), never more
    assert len(granted) == 1 and granted[0] <= qos
    for i in range(5):
        pub.publish(topic, f"m{i}".encode(), qos)
    got = sub.take(5)
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(5)]
    # delivered at min(publish QoS, granted QoS) (3.8.4), without the retain flag
    assert {(m.qos, m.retain, m.topic) for m in got} == {(min(qos, granted[0]), False, topic)}
    sub.nothing_more()


def test_wildcards_match_levels(mqtt: ClientFactory, names: Names) -> None:
    sub, pub = mqtt(), mqtt()
    sub.connect()
    pub.connect()
    base = names.topic("w")
    sub.subscribe(f"{base}/+/temp", 1)
    sub.subscribe(f"{base}/house/#", 1)
    pub.publish(f"{base}/kitchen/temp", b"a", 1)      # + only
    pub.publish(f"{base}/house", b"b", 1)             # # matches the parent level
    pub.publish(f"{base}/house/attic/light", b"c", 1)  # # many levels
    pub.publish(f"{base}/kitchen/light", b"x", 1)     # neither
    got = sorted(m.payload for m in sub.take(3))
    assert got == [b"a", b"b", b"c"]
    sub.nothing_more()


def test_overlapping_filters_deliver_at_least_once(mqtt: ClientFactory, names: Names) -> None:
    """Two matching subscriptions: the message arrives (3.3.5: once per matching
    subscription is allowed, or once at the highest QoS); never zero times."""
    sub, pub = mqtt(), mqtt()
    sub.connect()
    pub.connect()
    t = names.topic("o/x")
    sub.subscribe(names.topic("o/+"), 1)
    sub.subscribe(names.topic("o/#"), 1)
    pub.publish(t, b"one", 1)
    assert sub.get().payload == b"one"


def test_unsubscribe_stops_delivery(mqtt: ClientFactory, names: Names) -> None:
    sub, pub = mqtt(), mqtt()
    sub.connect()
    pub.connect()
    t = names.topic()
    sub.subscribe(t, 1)
    pub.publish(t, b"before", 1)
    assert sub.get().payload == b"before"
    sub.unsubscribe(t)
    pub.publish(t, b"after", 1)
    sub.nothing_more()


def test_dollar_topics_not_matched_by_leading_wildcards(mqtt: ClientFactory,
                                                         names: Names) -> None:
    """4.7.2: a filter starting with ``#`` or ``+`` does not match a topic starting
    with ``$``; a filter naming the ``$`` level does."""
    sub, dollar, pub = mqtt(), mqtt(), mqtt()
    for c in (sub, dollar, pub):
        c.connect()
    leaf = names.prefix.replace("/", "-")
    sub.subscribe(f"+/{leaf}", 1)
    dollar.subscribe(f"$conf/{leaf}", 1)
    pub.publish(f"$conf/{leaf}", b"dollar", 1)
    pub.publish(f"plain/{leaf}", b"plain", 1)
    assert dollar.get().payload == b"dollar"
    assert sub.get().payload == b"plain"
    sub.nothing_more()


@pytest.mark.parametrize("version", [4, 5])
def test_qos2_handshake_and_retransmission(raw: Callable[..., RawClient], mqtt: ClientFactory,
                                           names: Names, version: int) -> None:
    """4.3.3: PUBLISH -> PUBREC, PUBREL -> PUBCOMP; a retransmitted PUBLISH (DUP) of
    the same id before PUBREL gets PUBREC again and is not delivered twice."""
    sub = mqtt(5)
    sub.connect()
    t = names.topic()
    sub.subscribe(t, 2)
    r = raw(version)
    r.send(_raw.publish(t, b"exactly-once", 2, 7, version=version))
    rec = r.expect(_raw.PUBREC)
    assert rec.packet_id == 7 and rec.reason_code(version) == 0
    r.send(_raw.publish(t, b"exactly-once", 2, 7, version=version, dup=True))
    assert r.expect(_raw.PUBREC).packet_id == 7
    r.send(_raw.ack(_raw.PUBREL, 7))
    comp = r.expect(_raw.PUBCOMP)
    assert comp.packet_id == 7 and comp.reason_code(version) == 0
    assert sub.get().payload == b"exactly-once"
    # the id is free again: a new message under it is a new message
    r.send(_raw.publish(t, b"second", 2, 7, version=version))
    r.expect(_raw.PUBREC)
    r.send(_raw.ack(_raw.PUBREL, 7))
    r.expect(_raw.PUBCOMP)
    assert sub.get().payload == b"second"
    sub.nothing_more()


def test_qos1_publish_gets_puback_with_its_id(raw: Callable[..., RawClient],
                                              names: Names) -> None:
    r = raw(4)
    r.send(_raw.publish(names.topic(), b"x", 1, 513))
    assert r.expect(_raw.PUBACK).packet_id == 513


def test_ping(raw: Callable[..., RawClient]) -> None:
    r = raw(4)
    r.send(_raw.packet(_raw.PINGREQ, 0, b""))
    assert r.expect(_raw.PINGRESP).body == b""


def test_wildcard_in_publish_topic_closes_the_connection(raw: Callable[..., RawClient],
                                                         names: Names) -> None:
    """3.3.2.2: the topic name in a PUBLISH must not contain wildcards; 3.1.1 has
    no reason code, the server closes the network connection."""
    r = raw(4)
    r.send(_raw.publish(names.topic("+"), b"x", 1, 1))
    assert r.closed()


def test_first_packet_not_connect_closes(names: Names) -> None:
    from conformance.mqtt.conftest import host, port

    r = RawClient(host(), port())
    try:
        r.send(_raw.publish(names.topic(), b"x", 0))
        assert r.closed()
    finally:
        r.close()
