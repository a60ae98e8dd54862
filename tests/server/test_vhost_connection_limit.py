"""A vhost's ``max-connections`` counts AMQP, MQTT and STOMP clients together, as
RabbitMQ counts every protocol against it: the one over the limit is refused in its
own protocol's words (AMQP 530, MQTT CONNACK 3 / 0x97, STOMP ERROR naming the
limit), and a client leaving makes room again whatever its protocol."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import httpx
import pika
import pytest

from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server.mqttclient import V5, V311, Client, listening, new_id
from tests.server.stompclient import DEADLINE, connect, raw_frames

VHOST = "lim"


def _stomp_connect(port: int, vhost: str) -> tuple[list[bytes], bool]:
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(f"CONNECT\naccept-version:1.2\nhost:{vhost}\nlogin:guest\n"
                      "passcode:guest\n\n\0DISCONNECT\n\n\0".encode())
        return raw_frames(s)


def _in_vhost(api: httpx.Client) -> int:
    return sum(c["vhost"] == VHOST for c in api.get("/api/connections").json())


def test_amqp_mqtt_and_stomp_count_against_a_vhost_limit(tmp_path: Path) -> None:
    mqtt_port, stomp_port = free_port(), free_port()
    b = BrokerProcess(tmp_path, None, "--mqtt-port", str(mqtt_port),
                      "--stomp-port", str(stomp_port)).start()
    wait_for(lambda: listening(mqtt_port) and listening(stomp_port), 30,
             what="the MQTT and STOMP listeners")
    api = httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest"))
    try:
        api.put(f"/api/vhosts/{VHOST}").raise_for_status()
        api.put(f"/api/permissions/{VHOST}/guest",
                json={"configure": ".*", "write": ".*", "read": ".*"}).raise_for_status()
        api.put(f"/api/vhost-limits/{VHOST}/max-connections",
                json={"value": 2}).raise_for_status()
        amqp = pika.BlockingConnection(pika.URLParameters(
            f"amqp://guest:guest@127.0.0.1:{b.port}/{VHOST}"))
        mqtt = Client(mqtt_port, new_id(), V311, user=f"{VHOST}:guest")
        assert mqtt.connect()[0] == 0
        # full: every protocol is refused, in its own words
        frames, closed = _stomp_connect(stomp_port, VHOST)
        assert closed and frames[0].startswith(b"ERROR\n")
        assert b"message:Bad CONNECT" in frames[0]
        assert b"access to vhost 'lim' refused: connection limit (2) is reached" in frames[0]
        assert Client(mqtt_port, new_id(), V311, user=f"{VHOST}:guest").connect()[0] == 0x88
        assert Client(mqtt_port, new_id(), V5, user=f"{VHOST}:guest").connect()[0] == 0x97
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as exc:
            pika.BlockingConnection(pika.URLParameters(
                f"amqp://guest:guest@127.0.0.1:{b.port}/{VHOST}"))
        assert "connection limit (2) is reached" in str(exc.value)
        # other vhosts are not touched
        frames, closed = _stomp_connect(stomp_port, "/")
        assert frames[0].startswith(b"CONNECTED\n")
        # the AMQP client leaves: a STOMP client gets in, and then counts
        amqp.close()
        wait_for(lambda: _in_vhost(api) == 1, DEADLINE, what="the AMQP client to be gone")
        stomp, _ = connect(b, vhost=VHOST)
        assert Client(mqtt_port, new_id(), V5, user=f"{VHOST}:guest").connect()[0] == 0x97
        # the STOMP client leaves: an MQTT client gets in
        stomp.disconnect()
        wait_for(lambda: _in_vhost(api) == 1, DEADLINE, what="the STOMP client to be gone")
        later = Client(mqtt_port, new_id(), V5, user=f"{VHOST}:guest")
        assert later.connect()[0] == 0
        # the MQTT clients leave: AMQP gets in again
        later.close()
        mqtt.close()
        wait_for(lambda: _in_vhost(api) == 0, DEADLINE, what="the MQTT clients to be gone")
        pika.BlockingConnection(pika.URLParameters(
            f"amqp://guest:guest@127.0.0.1:{b.port}/{VHOST}")).close()
    finally:
        api.close()
        b.stop()
