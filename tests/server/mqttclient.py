"""Test helpers for the MQTT listener: a synchronous paho-mqtt client and a raw socket.

Every wait is on a condition with a deadline (no sleeps); paho's network loop
runs in its own thread and never reconnects by itself.
"""

from __future__ import annotations

import queue
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from amqplite.protocol.mqtt.decoder import Decoder
from amqplite.protocol.mqtt.packets import Packet, encode
from tests.brokerproc import BrokerProcess, wait_for

TIMEOUT = 15.0
V31, V311, V5 = 3, 4, 5


def mqtt_broker(data_dir: Any, *extra: str) -> BrokerProcess:
    """A broker subprocess with an MQTT listener on a free port (``b.mqtt_port``)."""
    from tests.brokerproc import free_port

    port = free_port()
    b = BrokerProcess(data_dir, None, "--mqtt-port", str(port), *extra)
    b.mqtt_port = port  # type: ignore[attr-defined]
    b.start()
    wait_for(lambda: listening(port), 30, what="the MQTT listener")
    return b


def running_broker(data_dir: Path) -> Iterator[BrokerProcess]:
    """Body of a module-scoped fixture: the broker, stopped gracefully afterwards."""
    b = mqtt_broker(data_dir)
    yield b
    b.stop()


def module_broker(name: str) -> Any:
    """A module-scoped fixture ``mb``: a broker of its own, stopped afterwards."""
    import pytest

    @pytest.fixture(scope="module")
    def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        yield from running_broker(tmp_path_factory.mktemp(name))

    return mb


def new_id() -> str:
    """A client id (and topic part) no other test uses."""
    return uuid.uuid4().hex[:12]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Client:
    """paho-mqtt, made synchronous: each call returns once the broker answered."""

    def __init__(self, port: int, client_id: str, version: int = V311, *, clean: bool = True,
                 user: str | None = "guest", password: str | None = "guest",
                 session_expiry: int | None = None, keepalive: int = 60,
                 will: tuple[str, bytes, int] | None = None) -> None:
        self.port = port
        self.version = version
        self.session_expiry = session_expiry
        self.clean = clean
        self.keepalive = keepalive
        proto = {V31: paho.MQTTv31, V311: paho.MQTTv311, V5: paho.MQTTv5}[version]
        kw: dict[str, Any] = {} if version == V5 else {"clean_session": clean}
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=proto, reconnect_on_failure=False, **kw)
        if user is not None:
            self.c.username_pw_set(user, password)
        if will is not None:
            self.c.will_set(will[0], will[1], will[2])
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.connack: tuple[Any, bool] | None = None
        self.subacks: dict[int, list[Any]] = {}
        self.disconnected = threading.Event()
        self.c.on_connect = self._on_connect
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_subscribe = self._on_subscribe
        self.c.on_unsubscribe = lambda _c, _u, mid, _rc, _p: self.subacks.setdefault(mid, [])
        self.c.on_disconnect = lambda *_a: self.disconnected.set()

    def _on_connect(self, _c: Any, _u: Any, flags: Any, rc: Any, _p: Any) -> None:
        self.connack = (rc, bool(flags.session_present))

    def _on_subscribe(self, _c: Any, _u: Any, mid: int, codes: list[Any], _p: Any) -> None:
        self.subacks[mid] = codes

    def connect(self) -> tuple[int, bool]:
        """(CONNACK reason code as an int, session present)."""
        kw: dict[str, Any] = {}
        if self.version == V5:
            kw["clean_start"] = self.clean
            if self.session_expiry is not None:
                props = Properties(PacketTypes.CONNECT)
                props.SessionExpiryInterval = self.session_expiry
                kw["properties"] = props
        self.c.connect("127.0.0.1", self.port, keepalive=self.keepalive, **kw)
        self.c.loop_start()
        wait_for(lambda: self.connack is not None or self.disconnected.is_set(), TIMEOUT,
                 what="CONNACK")
        assert self.connack is not None, "closed without CONNACK"
        rc, present = self.connack
        return int(rc.value if hasattr(rc, "value") else rc), present

    def subscribe(self, topic: str, qos: int, retain_handling: int | None = None) -> list[int]:
        """SUBACK's codes; ``retain_handling`` (MQTT 5) as SubscribeOptions."""
        if retain_handling is None:
            _rc, mid = self.c.subscribe(topic, qos)
        else:
            opts = SubscribeOptions(qos=qos, retainHandling=retain_handling)
            _rc, mid = self.c.subscribe(topic, options=opts)
        codes = wait_for(lambda: self.subacks.get(mid), TIMEOUT, what="SUBACK")
        return [int(c.value if hasattr(c, "value") else c) for c in codes]

    def unsubscribe(self, topic: str) -> None:
        _rc, mid = self.c.unsubscribe(topic)
        wait_for(lambda: mid in self.subacks, TIMEOUT, what="UNSUBACK")

    def publish(self, topic: str, payload: bytes, qos: int) -> None:
        """Returns once the broker acknowledged (PUBACK / PUBCOMP), or sent at QoS 0."""
        info = self.c.publish(topic, payload, qos)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), f"no acknowledgement for {topic}"

    def get(self, timeout: float = TIMEOUT) -> paho.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def close(self) -> None:
        """A normal DISCONNECT."""
        self.c.disconnect()
        self.disconnected.wait(TIMEOUT)
        self.c.loop_stop()


class RawClient:
    """A plain socket speaking packets we encode: for what paho will not do."""

    def __init__(self, port: int, version: int = V311, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.version = version
        self.decoder = Decoder(version)

    def send(self, packet: Packet) -> None:
        self.sock.sendall(encode(packet, self.version))

    def recv(self) -> Packet | None:
        """The next packet, or None when the broker closed the connection."""
        while True:
            p = self.decoder.next_packet()
            if p is not None:
                return p
            data = self.sock.recv(65536)
            if not data:
                return None
            self.decoder.receive(data)

    def closed_by_broker(self) -> bool:
        """Reads (and drops) packets until the broker closes: True, or a timeout error."""
        while self.recv() is not None:
            pass
        return True

    def drop(self) -> None:
        """Close the socket without DISCONNECT: an abnormal end."""
        self.sock.close()
