"""MQTT 5 session and message semantics: a DISCONNECT's Session Expiry Interval,
DISCONNECT with Will (0x04), message expiry <-> AMQP ``expiration`` (the queues'
TTL drops the message; a delivery carries what is left), and Retain As
Published on live deliveries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import ConnAck, Connect, Disconnect, Will
from amqplite.protocol.mqtt.properties import Properties
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import TIMEOUT, V5, Client, RawClient, new_id, running_broker


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-5"))


def _queue(b: BrokerProcess, name: str) -> dict[str, Any] | None:
    r = httpx.get(f"{b.admin_url}/api/queues/%2F/{name}", auth=("guest", "guest"))
    if r.status_code == 404:
        return None
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def _connect(port: int, cid: str, expiry: int, *, clean: bool = True,
             will: Will | None = None) -> RawClient:
    c = RawClient(port, V5)
    c.send(Connect(cid, protocol_level=V5, clean_start=clean, username="guest",
                   password=b"guest", will=will,
                   properties=Properties(session_expiry_interval=expiry)))
    ack = c.recv()
    assert isinstance(ack, ConnAck) and ack.reason_code == 0, ack
    return c


def _watcher(port: int, topic: str) -> Client:
    w = Client(port, new_id(), V5)
    w.connect()
    assert w.subscribe(topic, 1) == [1]
    return w


# ------------------------------------------------------------ DISCONNECT
def _subscribed(port: int, cid: str, expiry: int) -> Client:
    c = Client(port, cid, V5, clean=False, session_expiry=expiry)
    c.connect()
    assert c.subscribe(f"exp/{cid}", 1) == [1]
    return c


def _disconnect(c: Client, expiry: int) -> None:
    """DISCONNECT with a Session Expiry Interval."""
    props = PahoProperties(PacketTypes.DISCONNECT)
    props.SessionExpiryInterval = expiry
    c.c.disconnect(properties=props)
    c.disconnected.wait(TIMEOUT)
    c.c.loop_stop()


def test_disconnect_with_session_expiry_0_ends_the_session(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid = new_id()
    _disconnect(_subscribed(port, cid, 600), 0)
    wait_for(lambda: _queue(mb, f"mqtt-subscription-{cid}qos1") is None, 15,
             what="the session's queue deleted at the disconnect")
    again = Client(port, cid, V5, clean=False, session_expiry=600)
    assert again.connect() == (0, False)
    again.close()


def test_disconnect_can_lengthen_the_session_expiry(mb: BrokerProcess) -> None:
    """Two sessions connect with 1 s; the first to leave says 600 at DISCONNECT.
    Once the other has expired, it is still there."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, control = new_id(), new_id()
    ours, other = _subscribed(port, cid, 1), _subscribed(port, control, 1)
    _disconnect(ours, 600)
    other.close()  # after ours: unchanged, ours would expire first
    wait_for(lambda: _queue(mb, f"mqtt-subscription-{control}qos1") is None, 15,
             what="the control session expired")
    assert _queue(mb, f"mqtt-subscription-{cid}qos1") is not None
    again = Client(port, cid, V5, clean=False, session_expiry=600)
    assert again.connect() == (0, True)
    again.close()


def test_disconnect_setting_an_expiry_after_0_is_a_protocol_error(mb: BrokerProcess) -> None:
    """[MQTT-3.14.2-2] (3.14.2.2.2): the server answers 0x82 and, as the DISCONNECT was
    not a normal one, publishes the will."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"will/{new_id()}"
    w = _watcher(port, topic)
    c = _connect(port, new_id(), 0, will=Will(topic, b"gone", 1))
    c.send(Disconnect(0, Properties(session_expiry_interval=60)))
    answer = c.recv()
    assert isinstance(answer, Disconnect) and answer.reason_code == ReasonCode.PROTOCOL_ERROR
    assert w.get().payload == b"gone"
    w.close()


def test_disconnect_with_will_publishes_it(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"will/{new_id()}"
    w = _watcher(port, topic)
    c = _connect(port, new_id(), 0, will=Will(topic, b"gone", 1))
    c.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL))
    assert c.closed_by_broker()
    assert w.get().payload == b"gone"
    w.close()


# ------------------------------------------------------------ message expiry
def _publish(port: int, topic: str, payload: bytes, expiry: int | None,
             retain: bool = False, content_type: str | None = None) -> None:
    pub = Client(port, new_id(), V5)
    pub.connect()
    props = PahoProperties(PacketTypes.PUBLISH)
    if expiry is not None:
        props.MessageExpiryInterval = expiry
    if content_type is not None:
        props.ContentType = content_type
    info = pub.c.publish(topic, payload, 1, retain, properties=props)
    info.wait_for_publish(TIMEOUT)
    assert info.is_published()
    pub.close()


def test_message_expiry_is_the_amqp_expiration(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    conn = pika.BlockingConnection(pika.URLParameters(mb.url))
    ch = conn.channel()
    try:
        q = ch.queue_declare("", exclusive=True).method.queue
        topic = f"exp/{new_id()}"
        ch.queue_bind(q, "amq.topic", topic.replace("/", "."))
        _publish(port, topic, b"short-lived", 30)
        method, props, body = ch.basic_get(q, auto_ack=True)
        assert method is not None and body == b"short-lived"
        assert props.expiration == "30000"
    finally:
        conn.close()


def test_amqp_expiration_reaches_mqtt5_as_message_expiry(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"exp/{new_id()}"
    w = _watcher(port, topic)
    conn = pika.BlockingConnection(pika.URLParameters(mb.url))
    try:
        conn.channel().basic_publish("amq.topic", topic.replace("/", "."), b"amqp",
                                     pika.BasicProperties(expiration="5000"))
    finally:
        conn.close()
    m = w.get()
    assert m.payload == b"amqp"
    assert 0 < m.properties.MessageExpiryInterval <= 5
    w.close()


def test_expired_message_is_dropped_and_the_rest_carry_what_is_left(mb: BrokerProcess) -> None:
    """An offline session's queue drops a message whose expiry passed; the one
    delivered later has its interval reduced by the time it waited."""
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"exp/{new_id()}"
    sub = Client(port, cid, V5, clean=False, session_expiry=600)
    sub.connect()
    sub.subscribe(topic, 1)
    sub.close()
    _publish(port, topic, b"brief", 1)
    _publish(port, topic, b"lasting", 100)
    name = f"mqtt-subscription-{cid}qos1"

    def left() -> int:
        q = _queue(mb, name)
        assert q is not None
        return int(q["messages"])

    wait_for(lambda: left() == 1, 20, what="the expired message dropped by the queue")
    again = Client(port, cid, V5, clean=False, session_expiry=600)
    assert again.connect() == (0, True)
    m = again.get()
    assert m.payload == b"lasting"
    assert 0 < m.properties.MessageExpiryInterval <= 99
    again.close()


def test_retained_message_carries_its_properties_until_it_expires(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    base = f"rexp/{new_id()}"
    _publish(port, f"{base}/brief", b"brief", 1, retain=True)
    _publish(port, f"{base}/lasting", b"lasting", 100, retain=True, content_type="text/x")
    t0 = time.time()
    wait_for(lambda: time.time() > t0 + 1.2, 5, what="the first one's expiry to pass")
    w = _watcher(port, f"{base}/#")
    _publish(port, f"{base}/marker", b"marker", None)  # live: after the retained ones
    got = [w.get(), w.get()]
    assert [(m.payload, m.retain) for m in got] == [(b"lasting", True), (b"marker", False)]
    assert got[0].properties.ContentType == "text/x"
    assert 0 < got[0].properties.MessageExpiryInterval <= 99
    w.close()


# ------------------------------------------------------------ retain as published
def _subscribe_rap(c: Client, topic: str, rap: bool) -> None:
    _rc, mid = c.c.subscribe(topic, options=SubscribeOptions(qos=1, retainAsPublished=rap))
    wait_for(lambda: c.subacks.get(mid), TIMEOUT, what="SUBACK")


def test_retain_as_published_keeps_the_flag_on_live_deliveries(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"rap/{new_id()}"
    keeps, clears = Client(port, new_id(), V5), Client(port, new_id(), V5)
    for c, rap in ((keeps, True), (clears, False)):
        c.connect()
        _subscribe_rap(c, topic, rap)
    _publish(port, topic, b"kept", None, retain=True)
    _publish(port, topic, b"plain", None)
    got_keeps = [keeps.get(), keeps.get()]
    got_clears = [clears.get(), clears.get()]
    assert [(m.payload, m.retain) for m in got_keeps] == [(b"kept", True), (b"plain", False)]
    assert [(m.payload, m.retain) for m in got_clears] == [(b"kept", False), (b"plain", False)]
    keeps.close()
    clears.close()
