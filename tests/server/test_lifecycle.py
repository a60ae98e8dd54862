"""Heartbeats are enforced; SIGTERM closes clients with 320 and exits cleanly."""

from __future__ import annotations

import socket
import struct
import time

import pika
import pytest

from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect

HEADER = b"AMQP\x00\x00\x09\x01"


def _frame(ftype: int, ch: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", ftype, ch, len(payload)) + payload + b"\xce"


def _start_ok() -> bytes:
    from amqplite.protocol.codec import encode_table

    resp = b"\x00guest\x00guest"
    return (struct.pack(">HH", 10, 11) + encode_table({}) + b"\x05PLAIN"
            + struct.pack(">I", len(resp)) + resp + b"\x05en_US")


def test_silent_peer_is_dropped_after_two_heartbeats(broker: BrokerProcess) -> None:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    s.sendall(HEADER)
    s.recv(65536)  # connection.start
    s.sendall(_frame(1, 0, _start_ok()))
    s.recv(65536)  # connection.tune
    # accept a 1 s heartbeat, open the vhost, then say nothing at all
    s.sendall(_frame(1, 0, struct.pack(">HHHIH", 10, 31, 2047, 131072, 1)))
    s.sendall(_frame(1, 0, struct.pack(">HH", 10, 40) + b"\x01/\x00\x00"))
    started = time.monotonic()
    s.settimeout(15)
    seen_heartbeat = False
    while True:
        try:
            data = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            data = b""
        if not data:
            break
        if b"\x08\x00\x00\x00\x00\x00\x00\xce" in data:
            seen_heartbeat = True
    waited = time.monotonic() - started
    assert seen_heartbeat, "the server sent no heartbeat"
    assert waited < 10, f"silent peer kept for {waited:.1f}s"
    s.close()


def test_heartbeating_client_stays(broker: BrokerProcess) -> None:
    c = connect(broker, heartbeat=1)
    ch = c.channel()
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        c.process_data_events(time_limit=0.2)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.basic_publish("", q, b"alive")
    assert ch.basic_get(q, auto_ack=True)[2] == b"alive"
    c.close()


def test_sigterm_closes_connections_with_320(fresh_broker: BrokerProcess) -> None:
    c = connect(fresh_broker)
    ch = c.channel()
    ch.queue_declare("kept", durable=True)
    ch.confirm_delivery()
    ch.basic_publish("", "kept", b"x", pika.BasicProperties(delivery_mode=2))
    assert fresh_broker.stop() == 0
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
        c.process_data_events(time_limit=1)
        ch.queue_declare("kept", passive=True)
    assert e.value.reply_code == 320
    fresh_broker.start()
    c2 = connect(fresh_broker)
    assert c2.channel().queue_declare("kept", passive=True).method.message_count == 1
    c2.close()


def test_publishers_blocked_while_the_writer_catches_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = BrokerProcess(tmp_path / "d", env={"AMQPLITE_STORE_BACKLOG_LIMIT": "20"}).start()
    c = connect(b)
    events: list[str] = []
    c.add_on_connection_blocked_callback(lambda conn, frame: events.append("blocked"))
    c.add_on_connection_unblocked_callback(lambda conn, frame: events.append("unblocked"))
    ch = c.channel()
    ch.queue_declare("pressure", durable=True)
    for i in range(2000):
        ch.basic_publish("", "pressure", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    deadline = time.monotonic() + 20
    while not events or events[-1] != "unblocked":  # callbacks run inside process_data_events
        assert time.monotonic() < deadline, f"no block/unblock cycle seen: {events}"
        c.process_data_events(time_limit=0.05)
    assert events[0] == "blocked"
    assert ch.queue_declare("pressure", durable=True, passive=True).method.message_count == 2000
    c.close()
    b.stop()
