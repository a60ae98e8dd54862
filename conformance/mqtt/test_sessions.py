"""Sessions (MQTT 3.1.1 3.1.2.4, 3.2.2.2, 4.1; MQTT 5 3.1.2.4, 3.1.2.11): clean
and persistent sessions, QoS 1 messages queued while offline, session present,
session expiry, and takeover by a second CONNECT with the same client id."""

from __future__ import annotations

from collections.abc import Callable

from conformance.mqtt import _raw
from conformance.mqtt._raw import RawClient
from conformance.mqtt.conftest import ClientFactory, Names, credentials, host, port


def test_persistent_session_keeps_subscription_and_qos1_messages(mqtt: ClientFactory,
                                                                 names: Names) -> None:
    cid, t = names.client_id(), names.topic()
    first = mqtt(4, cid, clean=False)
    assert first.connect() == (0, False)
    first.subscribe(t, 1)
    first.close()
    pub = mqtt()
    pub.connect()
    for i in range(3):
        pub.publish(t, f"offline-{i}".encode(), 1)
    again = mqtt(4, cid, clean=False)
    assert again.connect() == (0, True)
    assert [m.payload for m in again.take(3)] == [b"offline-0", b"offline-1", b"offline-2"]
    again.close()
    mqtt(4, cid, clean=True).connect()  # clean up: discard the session


def test_a_session_without_subscriptions_is_present(mqtt: ClientFactory,
                                                     names: Names) -> None:
    """Session present (3.1.1 3.2.2.2, 5.0 3.2.2.1.1) says the server has session state
    for the client id: a persistent session with no subscription is one too."""
    for version, kw in ((4, {}), (5, {"session_expiry": 300})):
        cid = names.client_id()
        first = mqtt(version, cid, clean=False, **kw)
        assert first.connect() == (0, False)
        first.close()
        again = mqtt(version, cid, clean=False, **kw)
        assert again.connect() == (0, True)
        again.close()
        mqtt(version, cid, clean=True).connect()  # clean up: discard the session


def test_clean_session_discards_the_previous_one(mqtt: ClientFactory, names: Names) -> None:
    cid, t = names.client_id(), names.topic()
    first = mqtt(4, cid, clean=False)
    first.connect()
    first.subscribe(t, 1)
    first.close()
    clean = mqtt(4, cid, clean=True)
    assert clean.connect() == (0, False)
    clean.close()
    pub = mqtt()
    pub.connect()
    pub.publish(t, b"nobody", 1)
    back = mqtt(4, cid, clean=False)
    assert back.connect() == (0, False)  # nothing was kept
    back.nothing_more()
    back.close()
    mqtt(4, cid, clean=True).connect()


def test_mqtt5_session_expiry_keeps_the_session(mqtt: ClientFactory, names: Names) -> None:
    cid, t = names.client_id(), names.topic()
    first = mqtt(5, cid, clean=True, session_expiry=300)
    assert first.connect() == (0, False)
    first.subscribe(t, 1)
    first.close()
    pub = mqtt(5)
    pub.connect()
    pub.publish(t, b"kept", 1)
    again = mqtt(5, cid, clean=False, session_expiry=0)
    assert again.connect() == (0, True)
    assert again.get().payload == b"kept"


def test_mqtt5_session_expiry_0_ends_with_the_connection(mqtt: ClientFactory,
                                                         names: Names) -> None:
    cid, t = names.client_id(), names.topic()
    first = mqtt(5, cid, clean=True)  # no Session Expiry Interval: 0
    first.connect()
    first.subscribe(t, 1)
    first.close()
    again = mqtt(5, cid, clean=False)
    assert again.connect() == (0, False)


def test_mqtt5_resuming_with_expiry_0_ends_the_session(mqtt: ClientFactory,
                                                       names: Names) -> None:
    """MQTT 5 3.1.2.11.2: with a Session Expiry Interval of 0 (or none) the session
    ends when the connection closes, whatever the connection that made it set."""
    cid, t = names.client_id(), names.topic()
    first = mqtt(5, cid, clean=True, session_expiry=300)
    first.connect()
    first.subscribe(t, 1)
    first.close()
    again = mqtt(5, cid, clean=False)  # no Session Expiry Interval: 0
    assert again.connect() == (0, True)
    again.close()
    pub = mqtt(5)
    pub.connect()
    pub.publish(t, b"nobody", 1)
    back = mqtt(5, cid, clean=False)
    assert back.connect() == (0, False)  # nothing was kept
    back.nothing_more()


def test_takeover_closes_the_first_connection(mqtt: ClientFactory, names: Names) -> None:
    cid = names.client_id()
    first = mqtt(4, cid)
    first.connect()
    second = mqtt(4, cid)
    assert second.connect()[0] == 0
    assert first.disconnected.wait(10), "the first connection stayed open"


def test_mqtt5_takeover_closes_with_session_taken_over(raw: Callable[..., RawClient],
                                                       names: Names) -> None:
    """MQTT 5 3.1.4-3: the server MUST close the existing connection; it "sends a
    DISCONNECT ... 0x8E" first, outside the MUST. Mosquitto 2.0.11 only closes;
    amqplite sends DISCONNECT 0x8E. Either way nothing else may arrive."""
    cid = names.client_id()
    first = raw(5, cid)
    raw(5, cid)
    p = first.recv()
    if p is not None:
        assert (p.type, p.reason_code(5)) == (_raw.DISCONNECT, 0x8E), p
        assert first.closed()


def test_empty_client_id_gets_one_assigned_in_mqtt5(names: Names) -> None:
    """MQTT 5 3.2.2.3.7: a zero-length client id is answered with an Assigned Client
    Identifier. (paho 2.2 does not show it; the CONNACK is read here.)"""
    user, password = credentials()
    r = RawClient(host(), port(), 5)
    try:
        r.send(_raw.connect("", 5, user=user, password=password))
        ack = r.expect(_raw.CONNACK)
        assert ack.reason_code(5) == 0
        assigned = _raw.properties(ack.body, 2).get(0x12)
        assert assigned and assigned[0], ack
    finally:
        r.close()


def test_empty_client_id_with_clean_session_is_accepted_in_311(mqtt: ClientFactory) -> None:
    assert mqtt(4, "").connect() == (0, False)
