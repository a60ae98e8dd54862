"""MQTT over WebSockets: message size is bounded at the WebSocket layer, frame by
frame, before login (MQTT's unauthenticated packet limit) and after (its packet
limit), so a stranger cannot make the broker assemble a 15 MiB message."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from wsproto.events import AcceptConnection

from amqplite.protocol.mqtt.packets import (
    ConnAck,
    Connect,
    Publish,
    Subscribe,
    Subscription,
    encode,
)
from tests.brokerproc import BrokerProcess
from tests.server.mqttclient import V311, mqtt_broker, new_id
from tests.server.test_mqtt_listeners import WSRaw

BIG = 15 * 1024 * 1024
CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """/ws on the admin port; packets after login up to 1 MiB."""
    data = tmp_path_factory.mktemp("ws-limits")
    cfg = data / "amqplite.toml"
    cfg.write_text('[mqtt]\nmax_packet_size_authenticated = "1MiB"\n')
    b = mqtt_broker(data, "--config", str(cfg))
    yield b
    assert b.stop() == 0
    assert "Traceback" not in b.log(), b.log()


def _stream_one_message(ws: WSRaw, total: int, fragmented: bool) -> int:
    """Send one binary message of ``total`` bytes by hand, as one frame whose header
    announces it all or as 64 KiB fragments, until the broker stops taking bytes.
    Returns how many payload bytes the socket took."""
    ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
    mask = b"\0\0\0\0"  # a zero mask leaves the payload as it is
    chunk = b"\x10" + b"\xff" * (CHUNK - 1)  # starts like a huge CONNECT
    sent = 0
    try:
        if not fragmented:
            ws.sock.sendall(b"\x82\xff" + struct.pack("!Q", total) + mask)
        while sent < total:
            if fragmented:
                first, last = sent == 0, sent + CHUNK >= total
                opcode = (0x2 if first else 0x0) | (0x80 if last else 0)
                ws.sock.sendall(bytes([opcode, 0xFF]) + struct.pack("!Q", CHUNK) + mask)
            ws.sock.sendall(chunk)
            sent += CHUNK
    except OSError:  # reset or broken pipe: the broker dropped us mid-message
        pass
    return sent


@pytest.mark.parametrize("fragmented", [False, True], ids=["one-frame", "fragments"])
def test_oversized_message_before_login_is_cut_off(broker: BrokerProcess,
                                                   fragmented: bool) -> None:
    """A 15 MiB message before CONNECT: the broker closes after about MQTT's 64 KiB
    unauthenticated limit plus the kernel's socket buffers, never reading it all
    (on the old code hypercorn took all 15 MiB, then MQTT refused it)."""
    ws = WSRaw(broker.admin_port)
    assert isinstance(ws.answer, AcceptConnection)
    sent = _stream_one_message(ws, BIG, fragmented)
    assert sent < BIG, "the broker read the whole oversized message"
    ws.sock.close()


def test_connect_then_larger_message_up_to_the_packet_limit(broker: BrokerProcess) -> None:
    """After the CONNECT is accepted the bound is the packet limit (1 MiB here): a
    200 KiB publish goes through, a 15 MiB message is cut off before it is all read."""
    ws = WSRaw(broker.admin_port)
    ws.send(encode(Connect(new_id(), username="guest", password=b"guest"), V311))
    ack = ws.packet()
    assert isinstance(ack, ConnAck) and ack.reason_code == 0
    topic = f"ws/limits/{new_id()}"
    ws.send(encode(Subscribe(1, (Subscription(topic, 0),)), V311))
    ws.packet()  # SUBACK
    payload = b"p" * (200 * 1024)
    ws.send(encode(Publish(topic, payload), V311))
    got = ws.packet()
    assert isinstance(got, Publish) and got.payload == payload
    assert _stream_one_message(ws, BIG, fragmented=True) < BIG
    ws.sock.close()


def test_connack_acceptance_is_read_at_every_level() -> None:
    from amqplite.server.mqtt.transports import connack_accepts

    assert connack_accepts(bytes([0x20, 2, 0, 0]))
    assert not connack_accepts(bytes([0x20, 2, 0, 5]))           # 3.1.1 not authorised
    assert connack_accepts(bytes([0x20, 3, 0, 0, 0]))            # MQTT 5, no properties
    assert not connack_accepts(bytes([0x20, 3, 0, 0x87, 0]))     # MQTT 5 refusal
    assert not connack_accepts(bytes([0x30, 2, 0, 0]))           # a PUBLISH

