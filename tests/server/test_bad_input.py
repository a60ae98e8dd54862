"""Bad input gets the reply code a client expects; other connections never notice."""

from __future__ import annotations

import socket
import struct

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ProbableAuthenticationError

from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect

HEADER = b"AMQP\x00\x00\x09\x01"


def raw(b: BrokerProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
    return s


def read_until_closed(s: socket.socket, limit: int = 1 << 20) -> bytes:
    out = b""
    while len(out) < limit:
        try:
            chunk = s.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        out += chunk
    return out


def test_wrong_protocol_header_gets_ours_back(broker: BrokerProcess) -> None:
    s = raw(broker)
    s.sendall(b"HTTP/1.1 GET /\r\n\r\n")
    assert read_until_closed(s) == HEADER
    s.close()


def test_garbage_after_header_closes_with_frame_error(broker: BrokerProcess) -> None:
    s = raw(broker)
    s.sendall(HEADER)
    s.settimeout(10)
    start = s.recv(65536)  # connection.start
    assert start[0] == 1
    s.sendall(b"\x09" + b"\xff" * 200)
    data = read_until_closed(s)
    # a connection.close (class 10, method 50) with a 5xx code, or just a closed socket
    if data:
        assert data[0] == 1 and struct.unpack(">HH", data[7:11]) == (10, 50)
        assert struct.unpack(">H", data[11:13])[0] in (501, 505, 502)
    s.close()


def test_bad_client_does_not_hurt_another(broker: BrokerProcess) -> None:
    good = connect(broker)
    ch = good.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    for _ in range(5):
        s = raw(broker)
        s.sendall(HEADER + b"\x01\x00\x00\xff\xff\xff\xff" + b"x" * 100)
        read_until_closed(s)
        s.close()
    ch.basic_publish("", q, b"still fine")
    assert ch.basic_get(q, auto_ack=True)[2] == b"still fine"
    good.close()


def test_wrong_password(broker: BrokerProcess) -> None:
    params = pika.URLParameters(broker.url.replace("guest:guest", "guest:wrong"))
    with pytest.raises(ProbableAuthenticationError):
        pika.BlockingConnection(params)


def test_unknown_vhost(broker: BrokerProcess) -> None:
    params = pika.URLParameters(broker.url.replace("%2F", "nope"))
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(params)


def test_consume_missing_queue_and_exclusive_lock(broker: BrokerProcess) -> None:
    c1, c2 = connect(broker), connect(broker)
    ch = c1.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_consume("no-such-queue", lambda *a: None)
    assert e.value.reply_code == 404
    ch = c1.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    with pytest.raises(ChannelClosedByBroker) as e:
        c2.channel().basic_get(q)
    assert e.value.reply_code == 405
    c1.close()
    c2.close()


def test_oversized_frame_is_frame_error(broker: BrokerProcess) -> None:
    c = connect(broker, frame_max=4096)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"x" * 20000)  # pika splits bodies by frame_max: fine
    assert len(ch.basic_get(q, auto_ack=True)[2]) == 20000
    c.close()
