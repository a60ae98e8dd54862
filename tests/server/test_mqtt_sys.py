"""Mosquitto's ``$SYS/broker/...`` tree through the real broker and paho-mqtt, with
``--mqtt-sys-interval 1``: the retained values at once on subscribe, figures that
move, ``#`` alone never receives them ([MQTT-4.7.2-1]), clients cannot publish
there, and a user who may not read gets none."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import ConnAck, Connect, PubAck, Publish
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import V5, Client, RawClient, mqtt_broker, new_id

SYS = "$SYS/broker/"


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = mqtt_broker(tmp_path_factory.mktemp("mqtt-sys"), "--mqtt-sys-interval", "1")
    yield b
    b.stop()


def _port(b: BrokerProcess) -> int:
    return b.mqtt_port  # type: ignore[attr-defined, no-any-return]


class Watch:
    """The latest value of each topic a client received, and the retain flags seen."""

    def __init__(self, c: Client) -> None:
        self.c = c
        self.values: dict[str, str] = {}
        self.seen: list[tuple[str, str, bool]] = []

    def pump(self) -> None:
        while True:
            try:
                m = self.c.messages.get_nowait()
            except queue.Empty:
                return
            self.values[m.topic] = m.payload.decode()
            self.seen.append((m.topic, m.payload.decode(), bool(m.retain)))

    def until(self, pred: Any, what: str) -> None:
        def ready() -> bool:
            self.pump()
            return bool(pred(self.values))
        wait_for(ready, 20, what=what)


def test_sys_tree_as_mosquitto_publishes_it(mb: BrokerProcess) -> None:
    port = _port(mb)
    watcher = Client(port, f"sys-{new_id()}")
    watcher.connect()
    assert watcher.subscribe(SYS + "#", 0) == [0]
    w = Watch(watcher)
    # the retained values at once: every name, the retain flag set
    names = ("version", "uptime", "clients/connected", "clients/total", "clients/maximum",
             "clients/disconnected", "messages/received", "messages/sent", "bytes/received",
             "bytes/sent", "subscriptions/count", "retained messages/count",
             "store/messages/count", "load/messages/received/1min",
             "load/messages/received/5min", "load/messages/received/15min",
             "load/messages/sent/1min", "load/messages/sent/5min",
             "load/messages/sent/15min")
    w.until(lambda v: all(SYS + n in v for n in names), "the retained $SYS values")
    # the burst after the SUBACK is retained (a tick may already follow it)
    burst = next((i for i, m in enumerate(w.seen) if not m[2]), len(w.seen))
    assert {t for t, _v, _r in w.seen[:burst]} >= {SYS + n for n in names}
    assert w.values[SYS + "version"].startswith("amqplite version ")
    assert w.values[SYS + "uptime"].endswith(" seconds")
    assert int(w.values[SYS + "clients/connected"]) >= 1  # the watcher counts itself

    # a client subscribed to "#" alone: no $SYS; its own publish is what it gets
    everything = Client(port, f"all-{new_id()}")
    everything.connect()
    assert everything.subscribe("#", 0) == [0]
    before = int(w.values[SYS + "clients/connected"])
    w.until(lambda v: int(v[SYS + "clients/connected"]) > before, "clients/connected to move")
    uptime = w.values[SYS + "uptime"]
    w.until(lambda v: v[SYS + "uptime"] != uptime, "uptime to move")
    w.until(lambda v: int(v[SYS + "subscriptions/count"]) >= 2, "the subscription count")
    # live updates are not retained ones
    assert w.seen[burst:] and not any(retain for _t, _v, retain in w.seen[burst:])

    # clients cannot publish into the tree: 3.1.1 acked and dropped, MQTT 5 told 0x87
    everything.publish(SYS + "version", b"forged", 1)
    raw = RawClient(port, V5)
    raw.send(Connect(new_id(), protocol_level=V5, username="guest", password=b"guest"))
    assert isinstance(raw.recv(), ConnAck)
    raw.send(Publish(SYS + "version", b"forged", qos=1, packet_id=7))
    assert raw.recv() == PubAck(7, ReasonCode.NOT_AUTHORIZED)
    raw.drop()

    marker = f"m/{new_id()}"
    everything.publish(marker, b"end", 1)
    got = everything.get()
    assert got.topic == marker, f"'#' received {got.topic}"  # nothing of $SYS came first
    received = int(w.values[SYS + "messages/received"])
    w.until(lambda v: int(v[SYS + "messages/received"]) > received, "messages/received")
    assert w.values[SYS + "version"].startswith("amqplite version ")  # not forged
    everything.close()
    watcher.close()


def test_sys_needs_read_permission(mb: BrokerProcess) -> None:
    """A user who may not read in the vhost is refused the subscription (0x80) and
    is sent no $SYS value, retained or live."""
    name = f"noread-{new_id()}"
    with httpx.Client(base_url=mb.admin_url or "", auth=("guest", "guest")) as api:
        api.put(f"/api/users/{name}", json={"password": "pw", "tags": ""}).raise_for_status()
        api.put(f"/api/permissions/%2F/{name}",
                json={"configure": ".*", "write": ".*", "read": ""}).raise_for_status()
        c = Client(_port(mb), f"nr-{new_id()}", user=name, password="pw")
        assert c.connect() == (0, False)
        assert c.subscribe(SYS + "#", 0) == [0x80]
        # a subscriber that may read, to know ticks went by
        ok = Client(_port(mb), f"ok-{new_id()}")
        ok.connect()
        ok.subscribe(SYS + "uptime", 0)
        w = Watch(ok)
        w.until(lambda v: SYS + "uptime" in v, "the retained uptime")
        first = w.values[SYS + "uptime"]
        w.until(lambda v: v[SYS + "uptime"] != first, "a tick")
        assert c.messages.empty()
        ok.close()
        c.close()
        api.delete(f"/api/users/{name}")
