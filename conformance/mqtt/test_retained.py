"""Retained messages (MQTT 3.1.1 3.3.1.3, MQTT 5 3.3.1.3 and 3.8.3.1): one per
topic, sent with the retain flag to every new matching subscription (wildcard
filters included), replaced by a newer one, cleared by an empty payload."""

from __future__ import annotations

import pytest

from conformance.mqtt.conftest import ClientFactory, Names


def _retain(pub: object, names: Names, topic: str, payload: bytes, qos: int = 1) -> None:
    names.retained.add(topic)
    pub.publish(topic, payload, qos, retain=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("which", ["exact", "plus", "hash"])
def test_new_subscription_gets_the_retained_message(mqtt: ClientFactory, names: Names,
                                                    version: int, which: str) -> None:
    pub, sub = mqtt(version), mqtt(version)
    pub.connect()
    sub.connect()
    t = names.topic("room/temp")
    _retain(pub, names, t, b"21.5")
    filt = {"exact": t, "plus": names.topic("+/temp"), "hash": names.topic("#")}[which]
    sub.subscribe(filt, 1)
    m = sub.get()
    assert (m.topic, m.payload, m.retain, m.qos) == (t, b"21.5", True, 1)
    sub.nothing_more()


def test_a_new_retained_message_replaces_the_old(mqtt: ClientFactory, names: Names) -> None:
    pub = mqtt()
    pub.connect()
    t = names.topic()
    _retain(pub, names, t, b"old")
    _retain(pub, names, t, b"new")
    sub = mqtt()
    sub.connect()
    sub.subscribe(t, 1)
    assert sub.get().payload == b"new"
    sub.nothing_more()


def test_empty_payload_clears(mqtt: ClientFactory, names: Names) -> None:
    pub = mqtt()
    pub.connect()
    t = names.topic()
    _retain(pub, names, t, b"there")
    _retain(pub, names, t, b"")
    sub = mqtt()
    sub.connect()
    sub.subscribe(t, 1)
    pub.publish(t, b"live", 1)  # a marker: anything retained would come before it
    m = sub.get()
    assert (m.payload, m.retain) == (b"live", False)


def test_live_delivery_to_an_existing_subscription_has_retain_0(mqtt: ClientFactory,
                                                                 names: Names) -> None:
    sub, pub = mqtt(), mqtt()
    sub.connect()
    pub.connect()
    t = names.topic()
    sub.subscribe(t, 1)
    _retain(pub, names, t, b"v")
    m = sub.get()
    assert (m.payload, m.retain) == (b"v", False)


def test_retained_qos_is_min_of_message_and_subscription(mqtt: ClientFactory,
                                                         names: Names) -> None:
    pub = mqtt()
    pub.connect()
    t0, t1 = names.topic("q0"), names.topic("q1")
    _retain(pub, names, t0, b"zero", 0)
    _retain(pub, names, t1, b"one", 1)
    sub = mqtt()
    sub.connect()
    sub.subscribe(t1, 0)
    sub.subscribe(t0, 1)
    got = {m.payload: m.qos for m in sub.take(2)}
    assert got == {b"one": 0, b"zero": 0}


@pytest.mark.parametrize(("handling", "first", "second"), [(0, True, True), (1, True, False),
                                                             (2, False, False)])
def test_retain_handling(mqtt: ClientFactory, names: Names, handling: int, first: bool,
                         second: bool) -> None:
    """MQTT 5 3.8.3.1: 0 send at every subscribe, 1 only if the subscription did not
    exist, 2 never. A marker publish after each subscribe bounds the wait."""
    pub, sub = mqtt(5), mqtt(5)
    pub.connect()
    sub.connect()
    t = names.topic()
    _retain(pub, names, t, b"kept")
    for expect in (first, second):
        sub.subscribe(t, 1, retainHandling=handling)
        pub.publish(t, b"marker", 1)
        got = [sub.get().payload]
        if got[0] != b"marker":
            got.append(sub.get().payload)
        assert got == ([b"kept", b"marker"] if expect else [b"marker"])
