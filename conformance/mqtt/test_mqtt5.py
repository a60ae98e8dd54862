"""MQTT 5 specifics where the specification is firm and Mosquitto 2.0 agrees:
reason codes on acknowledgements, errors answered with a reason code, and
properties carried from publisher to subscriber."""

from __future__ import annotations

from collections.abc import Callable

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from conformance.mqtt import _raw
from conformance.mqtt._raw import RawClient
from conformance.mqtt.conftest import ClientFactory, Names, host, port


def _closed_with_error(r: RawClient) -> int:
    """The connection ends with a DISCONNECT carrying an error code (>= 0x80), then
    closes; returns the code."""
    p = r.recv()
    assert p is not None and p.type == _raw.DISCONNECT, p
    code = p.reason_code(5)
    assert code >= 0x80, p
    assert r.closed()
    return code


def test_puback_reason_code_is_success(raw: Callable[..., RawClient], names: Names) -> None:
    """3.4.2.1: 0x00 when the message matched a subscription."""
    r = raw(5)
    r.send(_raw.subscribe(1, names.topic(), 0, 5))
    r.expect(_raw.SUBACK)
    r.send(_raw.publish(names.topic(), b"x", 1, 9, version=5))
    while (p := r.recv()) is not None and p.type != _raw.PUBACK:
        pass
    assert p is not None and p.packet_id == 9 and p.reason_code(5) == 0x00


def test_no_matching_subscribers_gets_0x10(raw: Callable[..., RawClient],
                                           names: Names) -> None:
    """3.4.2.1: PUBACK 0x10 No matching subscribers where the server knows there are
    none (a MAY that Mosquitto 2.0 and amqplite take). PUBREC may say so too (3.5.2.1):
    amqplite does (it routes at PUBLISH), Mosquitto 2.0.11 says 0 (it routes at
    PUBREL); either way the QoS 2 flow goes on, 0x10 being a success."""
    r = raw(5)
    r.send(_raw.publish(names.topic(), b"x", 1, 9, version=5))
    ack = r.expect(_raw.PUBACK)
    assert ack.packet_id == 9 and ack.reason_code(5) == 0x10
    r.send(_raw.publish(names.topic(), b"x", 2, 10, version=5))
    rec = r.expect(_raw.PUBREC)
    assert rec.packet_id == 10 and rec.reason_code(5) in (0x00, 0x10)
    r.send(_raw.ack(_raw.PUBREL, 10))
    assert r.expect(_raw.PUBCOMP).packet_id == 10


def test_suback_grants_at_most_the_requested_qos(raw: Callable[..., RawClient],
                                                 names: Names) -> None:
    r = raw(5)
    r.send(_raw.subscribe(4, names.topic(), 1, 5))
    ack = r.expect(_raw.SUBACK)
    assert ack.packet_id == 4 and ack.reason_code(5) in (0, 1)


def test_unsupported_protocol_level_gets_connack_1(names: Names) -> None:
    """3.1.2.2: an unsupported level is answered with CONNACK 0x01 (3.1.1's code: the
    server cannot know the client's format) and the connection is closed."""
    r = RawClient(host(), port(), 5)
    try:
        r.send(_raw.connect(names.client_id(), 6))
        ack = r.expect(_raw.CONNACK)
        assert ack.body == b"\x00\x01"
        assert r.closed()
    finally:
        r.close()


def test_wildcard_in_topic_name_disconnects_with_a_reason_code(
        raw: Callable[..., RawClient], names: Names) -> None:
    """3.3.2.1: a topic name with wildcards is an error. Mosquitto says 0x82 Protocol
    Error, amqplite 0x90 Topic Name invalid; both are errors and close."""
    r = raw(5)
    r.send(_raw.publish(names.topic("#"), b"x", 1, 1, version=5))
    assert _closed_with_error(r) in (0x81, 0x82, 0x90)


def test_topic_alias_0_disconnects(raw: Callable[..., RawClient], names: Names) -> None:
    """3.3.2.3.4: Topic Alias 0 is not permitted. Mosquitto says 0x81 Malformed Packet,
    amqplite 0x94 Topic Alias invalid (the code the specification names)."""
    r = raw(5)
    body = _raw.utf8(names.topic()) + b"\x00\x02" + b"\x03\x23\x00\x00" + b"x"
    r.send(_raw.packet(_raw.PUBLISH, 2, body))
    assert _closed_with_error(r) in (0x81, 0x82, 0x94)


def test_invalid_topic_filter_is_refused(raw: Callable[..., RawClient], names: Names) -> None:
    """4.7.1: ``#`` must be the last level. Mosquitto disconnects (0x81), amqplite
    refuses the filter in the SUBACK (0x8F Topic Filter invalid) and keeps the
    connection; a subscription is never granted."""
    r = raw(5)
    r.send(_raw.subscribe(2, names.topic("#/x"), 1, 5))
    p = r.recv()
    assert p is not None
    assert p.type in (_raw.SUBACK, _raw.DISCONNECT), p
    assert p.reason_code(5) >= 0x80, p


def test_properties_reach_the_subscriber(mqtt: ClientFactory, names: Names) -> None:
    """3.3.2.3: user properties (in order), content type, response topic, correlation
    data and payload format are forwarded to the subscriber unaltered. A user
    property name given twice is allowed and must be kept ([MQTT-3.3.2-18]);
    amqplite maps user properties to AMQP headers, which keeps one value per name,
    so this test uses distinct names (see docs/conformance.md)."""
    sub, pub = mqtt(5), mqtt(5)
    sub.connect()
    pub.connect()
    t = names.topic()
    sub.subscribe(t, 1)
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [("zone", "1"), ("alpha", "2"), ("mid", "3")]
    props.ContentType = "application/json"
    props.ResponseTopic = names.topic("reply")
    props.CorrelationData = b"\x00\x01corr"
    props.PayloadFormatIndicator = 1
    pub.publish(t, b'{"x": 1}', 1, properties=props)
    m = sub.get()
    got = m.properties
    assert m.payload == b'{"x": 1}'
    assert got.UserProperty == [("zone", "1"), ("alpha", "2"), ("mid", "3")]
    assert got.ContentType == "application/json"
    assert got.ResponseTopic == names.topic("reply")
    assert got.CorrelationData == b"\x00\x01corr"
    assert got.PayloadFormatIndicator == 1
