"""MQTT 5 subscription identifiers and no-local (kept in the bindings, so a persistent
session keeps them through kill -9), and the MQTT 5 <-> AMQP property mapping
(RabbitMQ 3.13's: user properties <-> headers, content type, correlation data <->
correlation-id, response topic <-> x-reply-to-topic) with paho and pika."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import (
    V5,
    V311,
    Client,
    listening,
    mqtt_broker,
    new_id,
    running_broker,
)
from tests.server.subhelpers import connected, publish, subscribe


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-subopts"))


@pytest.fixture
def amqp(mb: BrokerProcess) -> Iterator[Any]:
    c = pika.BlockingConnection(pika.URLParameters(mb.url))
    yield c.channel()
    c.close()



def _ids(m: Any) -> list[int]:
    return sorted(getattr(m.properties, "SubscriptionIdentifier", None) or [])


def test_subscription_identifiers_of_every_matching_subscription(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    sub = connected(port)
    assert subscribe(sub, f"{base}/+", 1, identifier=5) == [1]
    assert subscribe(sub, f"{base}/#", 1, identifier=9) == [1]
    assert subscribe(sub, f"{base}/plain/+", 1) == [1]
    pub = connected(port)
    publish(pub, f"{base}/a", b"both", 1)
    publish(pub, f"{base}/a/b", b"one", 1)
    publish(pub, f"{base}/plain/x", b"no id of its own", 1)
    one, two, three = sub.get(), sub.get(), sub.get()
    assert (one.payload, _ids(one)) == (b"both", [5, 9])  # one copy, both identifiers
    assert (two.payload, _ids(two)) == (b"one", [9])
    assert (three.payload, _ids(three)) == (b"no id of its own", [9])
    assert subscribe(sub, f"{base}/+", 1, identifier=6) == [1]  # a new id replaces the old
    publish(pub, f"{base}/c", b"again", 1)
    assert _ids(sub.get()) == [6, 9]
    sub.close()
    pub.close()


def test_no_local(mb: BrokerProcess) -> None:
    """A no-local subscription does not get the session's own publishes; another
    client's do; an overlapping subscription without no-local still gets them."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    me = connected(port)
    assert subscribe(me, f"{base}/#", 1, no_local=True) == [1]
    other = connected(port, V311)
    publish(me, f"{base}/mine", b"own", 1)
    publish(other, f"{base}/theirs", b"foreign", 1)
    assert me.get().payload == b"foreign"  # the own one, published first, was dropped
    assert subscribe(me, f"{base}/mine", 0, identifier=3) == [0]  # local, QoS 0 queue
    publish(me, f"{base}/mine", b"own again", 1)
    got = me.get()
    assert (got.payload, _ids(got)) == (b"own again", [3])
    assert subscribe(me, f"{base}/#", 1) == [1]  # the same filter without no-local
    publish(me, f"{base}/x", b"now local", 1)
    assert me.get().payload == b"now local"
    me.close()
    other.close()


def test_options_survive_kill_9(tmp_path: Path) -> None:
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    try:
        base, cid = new_id(), new_id()
        sub = connected(port, client_id=cid, clean=False, session_expiry=3600)
        assert subscribe(sub, f"{base}/#", 1, identifier=42, no_local=True) == [1]
        sub.close()
        b.kill()
        b.start()
        wait_for(lambda: listening(port), 30, what="MQTT after restart")
        back = Client(port, cid, V5, clean=False, session_expiry=3600)
        assert back.connect() == (0, True)
        publish(back, f"{base}/own", b"dropped", 1)
        pub = connected(port)
        publish(pub, f"{base}/t", b"kept", 1)
        got = back.get()
        assert (got.payload, _ids(got)) == (b"kept", [42])
        back.close()
        pub.close()
    finally:
        b.kill()


def test_mqtt5_properties_reach_amqp(mb: BrokerProcess, amqp: Any) -> None:
    q = amqp.queue_declare("", exclusive=True).method.queue
    base = new_id()
    amqp.queue_bind(q, "amq.topic", f"{base}.#")
    pub = connected(mb.mqtt_port)  # type: ignore[attr-defined]
    publish(pub, f"{base}/req", b"{}", 1, ContentType="application/json",
            CorrelationData=b"corr-1", ResponseTopic=f"{base}/replies",
            PayloadFormatIndicator=1, UserProperty=[("k", "v"), ("tenant", "acme")])
    publish(pub, f"{base}/bin", b"", 0, CorrelationData=b"\xff\x00")
    method, props, body = amqp.basic_get(q, auto_ack=True)
    assert method is not None and body == b"{}"
    assert props.content_type == "application/json"
    assert props.correlation_id == "corr-1"
    assert props.delivery_mode == 2
    h = props.headers
    assert (h["k"], h["tenant"]) == ("v", "acme")
    assert h["x-reply-to-topic"] == f"{base}.replies"
    assert h["x-mqtt-publisher"] == pub.c._client_id.decode()
    # QoS 0: publish() does not wait for the broker, so the get waits for the message
    method, props, _ = wait_for(lambda: (got := amqp.basic_get(q, auto_ack=True))[0]
                                and got, 10, what="the QoS 0 publish")
    assert props.correlation_id is None
    assert props.headers["x-correlation-id"] == b"\xff\x00"  # not a short string
    pub.close()


def test_amqp_properties_reach_mqtt5(mb: BrokerProcess, amqp: Any) -> None:
    base = new_id()
    sub = connected(mb.mqtt_port)  # type: ignore[attr-defined]
    assert sub.subscribe(f"{base}/#", 1) == [1]
    amqp.basic_publish("amq.topic", f"{base}.rpc", b"hello", pika.BasicProperties(
        content_type="text/plain", correlation_id="c-7", delivery_mode=2,
        headers={"k": "v", "n": 5, "flag": True, "x-reply-to-topic": f"{base}.answers"}))
    m = sub.get()
    p = m.properties
    assert (m.payload, m.qos) == (b"hello", 1)
    assert p.ContentType == "text/plain"
    assert p.CorrelationData == b"c-7"
    assert p.ResponseTopic == f"{base}/answers"
    assert sorted(p.UserProperty) == [("flag", "true"), ("k", "v"), ("n", "5")]
    sub.close()


def test_mqtt5_properties_reach_mqtt5(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    sub = connected(port)
    assert sub.subscribe(f"{base}/#", 1) == [1]
    pub = connected(port)
    publish(pub, f"{base}/x", b"text", 1, ContentType="text/plain", PayloadFormatIndicator=1,
            CorrelationData=b"\x00\x01", ResponseTopic="back/here",
            UserProperty=[("a", "1"), ("b", "2")])
    p = sub.get().properties
    assert (p.ContentType, p.PayloadFormatIndicator) == ("text/plain", 1)
    assert (p.CorrelationData, p.ResponseTopic) == (b"\x00\x01", "back/here")
    assert p.UserProperty == [("a", "1"), ("b", "2")]
    sub.close()
    pub.close()


def test_retained_message_keeps_its_properties(mb: BrokerProcess) -> None:
    """A retained message sent on a new subscription carries its MQTT 5 properties and
    the identifier of that subscription."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = new_id()
    pub = connected(port)
    p = Properties(PacketTypes.PUBLISH)
    p.ContentType = "text/plain"
    p.UserProperty = [("unit", "C")]
    pub.c.publish(f"{base}/temp", b"21", 1, retain=True, properties=p).wait_for_publish(15)
    sub = connected(port)
    assert subscribe(sub, f"{base}/+", 1, identifier=11) == [1]
    m = sub.get()
    assert (m.payload, m.retain, _ids(m)) == (b"21", True, [11])
    assert (m.properties.ContentType, m.properties.UserProperty) == ("text/plain", [("unit", "C")])
    sub.close()
    pub.close()
