"""Real MQTT clients as oracles: paho-mqtt and mosquitto_pub talk over a loopback
socket to a small server loop driving MQTTConnection. Their bytes test our
decoder and state machine; their acceptance of our CONNACK/PUBACK/SUBACK/PUBLISH
tests our encoder."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from amqplite.protocol.mqtt import events as ev
from amqplite.protocol.mqtt.connection import MQTTConnection
from amqplite.protocol.mqtt.decoder import decode_all
from amqplite.protocol.mqtt.packets import Connect, encode
from amqplite.protocol.mqtt.properties import Properties
from tests.brokerproc import wait_for

mqtt = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties as PahoProperties  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

PUSHED = Properties(content_type="text/plain", user_properties=(("from", "server"), ("n", "1")))


class ServerLoop(threading.Thread):
    """Accept one connection and answer it through MQTTConnection, recording events."""

    def __init__(self, listener: socket.socket) -> None:
        super().__init__(daemon=True)
        self.listener = listener
        self.events: list[ev.MQTTEvent] = []
        self.raw = bytearray()  # every byte the client sent
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _serve(self) -> None:
        self.listener.settimeout(10)
        sock, _ = self.listener.accept()
        sock.settimeout(0.1)
        conn = MQTTConnection()
        deadline = time.monotonic() + 20
        with sock:
            while not conn.closed and time.monotonic() < deadline:
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                self.raw += data
                conn.receive_data(data, time.monotonic())
                for event in conn.events():
                    self.events.append(event)
                    self._answer(conn, event)
                sock.sendall(conn.data_to_send())

    @staticmethod
    def _answer(conn: MQTTConnection, event: ev.MQTTEvent) -> None:
        if isinstance(event, ev.ConnectReceived):
            conn.accept()
        elif isinstance(event, ev.PublishReceived) and event.publish.qos:
            assert event.publish.packet_id is not None
            conn.ack_publish(event.publish.packet_id)
        elif isinstance(event, ev.SubscribeReceived):
            conn.send_suback(event.packet_id, [r.reason_code or r.qos for r in event.requests])
            conn.send_publish("oracle/in", b"hello", 1, properties=PUSHED)
        elif isinstance(event, ev.UnsubscribeReceived):
            conn.send_unsuback(event.packet_id, [0] * len(event.topic_filters))


@pytest.fixture
def server() -> Iterator[tuple[ServerLoop, int]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    loop = ServerLoop(listener)
    loop.start()
    yield loop, listener.getsockname()[1]
    loop.join(10)
    listener.close()


def _paho_props(packet_type: int, **values: Any) -> PahoProperties:
    props = PahoProperties(packet_type)
    for name, value in values.items():
        setattr(props, name, value)
    return props


@pytest.mark.parametrize("protocol", ["MQTTv31", "MQTTv311", "MQTTv5"])
def test_paho_client_against_the_state_machine(server: tuple[ServerLoop, int], protocol: str) -> None:
    loop, port = server
    proto = getattr(mqtt, protocol)
    v5 = proto == mqtt.MQTTv5
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="oracle", protocol=proto)
    done: dict[str, Any] = {"published": set(), "messages": []}
    client.on_connect = lambda c, u, f, rc, p: done.__setitem__("connack", rc)
    client.on_publish = lambda c, u, mid, rc, p: done["published"].add(mid)
    client.on_subscribe = lambda c, u, mid, rcs, p: done.__setitem__("suback", [int(r.value) for r in rcs])
    client.on_unsubscribe = lambda c, u, mid, rcs, p: done.__setitem__("unsuback", True)
    client.on_message = lambda c, u, msg: done["messages"].append(msg)
    client.username_pw_set("user", "secret")
    will_props = _paho_props(PacketTypes.WILLMESSAGE, WillDelayInterval=5) if v5 else None
    client.will_set("will/topic", b"bye", qos=1, retain=True, properties=will_props)
    connect_props = (
        _paho_props(PacketTypes.CONNECT, SessionExpiryInterval=30, ReceiveMaximum=10) if v5 else None
    )
    client.connect("127.0.0.1", port, keepalive=20, properties=connect_props)
    client.loop_start()
    try:
        wait_for(lambda: "connack" in done, 10, what="CONNACK")
        assert not done["connack"].is_failure
        pub_props = (
            _paho_props(
                PacketTypes.PUBLISH,
                ContentType="application/json",
                ResponseTopic="reply/here",
                CorrelationData=b"\x01\x02",
                MessageExpiryInterval=60,
                PayloadFormatIndicator=1,
                UserProperty=[("a", "1"), ("b", "2"), ("a", "3")],
            )
            if v5
            else None
        )
        mids = [client.publish("oracle/out", f"m{q}".encode(), q, retain=q == 1, properties=pub_props).mid
                for q in (0, 1, 2)]  # fmt: skip
        wait_for(lambda: set(mids) <= done["published"], 10, what="PUBACK/PUBCOMP")
        options = (
            SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True, retainHandling=1) if v5 else None
        )
        client.subscribe(("oracle/+", options) if v5 else ("oracle/+", 1))
        wait_for(lambda: "suback" in done and done["messages"], 10, what="SUBACK and a message")
        client.unsubscribe("oracle/+")
        wait_for(lambda: "unsuback" in done, 10, what="UNSUBACK")
        client.disconnect()
    finally:
        client.loop_stop()
    loop.join(10)
    assert loop.error is None

    events = loop.events
    connect = events[0]
    assert isinstance(connect, ev.ConnectReceived)
    c = connect.connect
    assert (c.client_id, c.protocol_level, c.keep_alive) == ("oracle", {3: 3, 4: 4, 5: 5}[proto], 20)
    assert (c.username, c.password) == ("user", b"secret")
    assert c.will is not None and (c.will.topic, c.will.payload, c.will.qos, c.will.retain) == (
        "will/topic", b"bye", 1, True)  # fmt: skip
    if v5:
        assert c.will.properties.will_delay_interval == 5
        assert (c.properties.session_expiry_interval, c.properties.receive_maximum) == (30, 10)
    publishes = [e.publish for e in events if isinstance(e, ev.PublishReceived)]
    assert [(p.topic, p.payload, p.qos, p.retain) for p in publishes] == [
        ("oracle/out", b"m0", 0, False),
        ("oracle/out", b"m1", 1, True),
        ("oracle/out", b"m2", 2, False),
    ]
    if v5:
        props = publishes[0].properties
        assert props.user_properties == (("a", "1"), ("b", "2"), ("a", "3"))
        assert (props.content_type, props.response_topic, props.correlation_data) == (
            "application/json", "reply/here", b"\x01\x02")  # fmt: skip
        assert (props.message_expiry_interval, props.payload_format_indicator) == (60, 1)
    sub = next(e for e in events if isinstance(e, ev.SubscribeReceived))
    (request,) = sub.requests
    assert (request.topic_filter, request.qos, request.reason_code) == ("oracle/+", 1, 0)
    if v5:
        assert (request.no_local, request.retain_as_published, request.retain_handling) == (True, True, 1)
    assert done["suback"] == [1]
    assert any(isinstance(e, ev.PubRelReceived) and e.known for e in events)  # the QoS 2 flow completed
    assert any(isinstance(e, ev.PubAckReceived) for e in events)  # paho acked our PUBLISH
    (msg,) = done["messages"]
    assert (msg.topic, msg.payload, msg.qos) == ("oracle/in", b"hello", 1)
    if v5:
        assert msg.properties.ContentType == "text/plain"
        assert msg.properties.UserProperty == [("from", "server"), ("n", "1")]
    assert isinstance(events[-1], ev.DisconnectReceived)
    assert_reencodes_exactly(bytes(loop.raw))


def assert_reencodes_exactly(raw: bytes) -> None:
    """Our encoder reproduces the client's bytes packet by packet (the same shortest
    forms, flags and lengths). Properties may come in another order (we write them
    by ascending identifier, paho does not), so a packet with more than one kind
    of property must only match as a permutation of the same bytes."""
    first = decode_all(raw, 4)[0]
    assert isinstance(first, Connect)
    version = first.protocol_level
    offset = 0
    for packet in decode_all(raw, version):
        ours = encode(packet, version)
        theirs = raw[offset : offset + len(ours)]
        offset += len(ours)
        if ours != theirs:
            props = getattr(packet, "properties", None)
            kinds = sum(1 for value in attrs.astuple(props, recurse=False) if value not in (None, ()))
            assert kinds > 1 and sorted(ours) == sorted(theirs), (packet, ours, theirs)
    assert offset == len(raw)


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto clients not installed")
@pytest.mark.parametrize("version", ["mqttv31", "mqttv311", "mqttv5"])
def test_mosquitto_pub_bytes(server: tuple[ServerLoop, int], version: str) -> None:
    loop, port = server
    cmd = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-V", version, "-q", "2", "-t", "a/b",
           "-m", "hello", "-i", "mosq1", "-u", "user", "-P", "pw", "--will-topic", "w/t",
           "--will-payload", "bye", "-r", "-k", "15"]  # fmt: skip
    if version == "mqttv5":
        cmd += ["-D", "publish", "user-property", "k", "v", "-D", "publish", "content-type", "text/plain",
                "-D", "connect", "session-expiry-interval", "30"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, timeout=20, check=False)
    loop.join(10)
    assert loop.error is None
    assert proc.returncode == 0, proc.stderr
    connect, publish, rel, disconnect = loop.events
    assert isinstance(connect, ev.ConnectReceived)
    assert (connect.connect.client_id, connect.connect.username, connect.connect.password) == (
        "mosq1", "user", b"pw")  # fmt: skip
    assert connect.connect.keep_alive == 15 and connect.connect.will is not None
    assert isinstance(publish, ev.PublishReceived)
    p = publish.publish
    assert (p.topic, p.payload, p.qos, p.retain) == ("a/b", b"hello", 2, True)
    if version == "mqttv5":
        assert p.properties.user_properties == (("k", "v"),) and p.properties.content_type == "text/plain"
        assert connect.connect.properties.session_expiry_interval == 30
    assert isinstance(rel, ev.PubRelReceived) and rel.known
    assert isinstance(disconnect, ev.DisconnectReceived) and not disconnect.publish_will
    assert_reencodes_exactly(bytes(loop.raw))
