"""paho-mqtt made synchronous for the conformance suite: each call returns once
the broker answered, every wait has a deadline."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

TIMEOUT = 10.0


def wait_for(pred: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def _code(rc: Any) -> int:
    return int(rc.value if hasattr(rc, "value") else rc)


class Client:
    """One paho client; ``version`` 3 (3.1), 4 (3.1.1) or 5."""

    def __init__(self, host: str, port: int, client_id: str, version: int,
                 credentials: tuple[str, str] | None, *, clean: bool = True,
                 session_expiry: int | None = None, keepalive: int = 60,
                 will: tuple[str, bytes, int, bool] | None = None) -> None:
        self.host, self.port, self.version = host, port, version
        self.clean, self.session_expiry, self.keepalive = clean, session_expiry, keepalive
        proto = {3: paho.MQTTv31, 4: paho.MQTTv311, 5: paho.MQTTv5}[version]
        kw: dict[str, Any] = {} if version == 5 else {"clean_session": clean}
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=proto, reconnect_on_failure=False, **kw)
        if credentials is not None:
            self.c.username_pw_set(*credentials)
        if will is not None:
            self.c.will_set(will[0], will[1], will[2], will[3])
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.connack: tuple[int, bool, Any] | None = None
        self.acks: dict[int, list[int]] = {}
        self.disconnect_code: int | None = None
        self.disconnected = threading.Event()
        self.c.on_connect = self._on_connect
        self.c.on_message = lambda _c, _u, m: self.messages.put(m)
        self.c.on_subscribe = self._on_ack
        self.c.on_unsubscribe = self._on_ack
        self.c.on_disconnect = self._on_disconnect
        self._started = False

    def _on_connect(self, _c: Any, _u: Any, flags: Any, rc: Any, props: Any) -> None:
        self.connack = (_code(rc), bool(flags.session_present), props)

    def _on_ack(self, _c: Any, _u: Any, mid: int, codes: Any, _p: Any) -> None:
        self.acks[mid] = [_code(c) for c in codes] if isinstance(codes, list) else []

    def _on_disconnect(self, _c: Any, _u: Any, _flags: Any, rc: Any, _p: Any) -> None:
        self.disconnect_code = _code(rc)
        self.disconnected.set()

    def connect(self) -> tuple[int, bool]:
        """(CONNACK reason code, session present)."""
        kw: dict[str, Any] = {}
        if self.version == 5:
            kw["clean_start"] = self.clean
            if self.session_expiry is not None:
                props = Properties(PacketTypes.CONNECT)
                props.SessionExpiryInterval = self.session_expiry
                kw["properties"] = props
        self.c.connect(self.host, self.port, keepalive=self.keepalive, **kw)
        self.c.loop_start()
        self._started = True
        wait_for(lambda: self.connack is not None or self.disconnected.is_set(), "CONNACK")
        assert self.connack is not None, "closed without CONNACK"
        return self.connack[0], self.connack[1]

    @property
    def connack_properties(self) -> Any:
        assert self.connack is not None
        return self.connack[2]

    def subscribe(self, topic_filter: str, qos: int = 0, **options: Any) -> list[int]:
        """SUBACK's codes; MQTT 5 ``options`` as paho's SubscribeOptions names them
        (retainHandling, noLocal, retainAsPublished)."""
        if options:
            _rc, mid = self.c.subscribe(topic_filter,
                                        options=SubscribeOptions(qos=qos, **options))
        else:
            _rc, mid = self.c.subscribe(topic_filter, qos)
        return list(wait_for(lambda: self.acks.get(mid) is not None and [self.acks[mid]],
                             "SUBACK")[0])

    def unsubscribe(self, topic_filter: str) -> list[int]:
        _rc, mid = self.c.unsubscribe(topic_filter)
        return list(wait_for(lambda: mid in self.acks and [self.acks[mid]], "UNSUBACK")[0])

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False,
                properties: Properties | None = None) -> None:
        """Returns once acknowledged (PUBACK / PUBCOMP), or once written at QoS 0."""
        info = self.c.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), f"no acknowledgement for a publish to {topic}"

    def get(self, timeout: float = TIMEOUT) -> paho.MQTTMessage:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message within {timeout}s") from None

    def take(self, n: int) -> list[paho.MQTTMessage]:
        return [self.get() for _ in range(n)]

    def nothing_more(self, seconds: float = 0.5) -> None:
        """A negative check over a bounded window: no further message arrives."""
        try:
            m = self.messages.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message on {m.topic}: {m.payload!r}")

    def close(self) -> None:
        """A normal DISCONNECT (idempotent)."""
        if self._started:
            self._started = False
            if not self.disconnected.is_set():
                self.c.disconnect()
                self.disconnected.wait(TIMEOUT)
            self.c.loop_stop()
