"""Wills in the store: MQTT 5 Will Delay Interval (capped by the session expiry,
cancelled by a resumed session, published at once by a clean start), will
properties carried to the subscribers, and wills kept across a kill -9 of the
broker (a pending will fires after the restart when due; a client connected at
the crash has its will published)."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqplite.protocol.mqtt.packets import ConnAck, Connect, Disconnect, Will
from amqplite.protocol.mqtt.properties import Properties
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import (
    V5,
    V311,
    Client,
    RawClient,
    listening,
    mqtt_broker,
    new_id,
    running_broker,
)


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-wills"))


def _with_will(port: int, cid: str, topic: str, *, delay: int | None = None,
               expiry: int = 600, clean: bool = True, version: int = V5,
               props: Properties | None = None) -> RawClient:
    """A client whose will (QoS 1, b"gone") has ``delay`` and ``props``."""
    c = RawClient(port, version)
    wp = props or Properties()
    if delay is not None:
        wp = Properties(**{**_set(wp), "will_delay_interval": delay})
    c.send(Connect(cid, protocol_level=version, clean_start=clean, username="guest",
                   password=b"guest", will=Will(topic, b"gone", 1, False, wp),
                   properties=Properties(session_expiry_interval=expiry) if version == V5
                   else Properties()))
    ack = c.recv()
    assert isinstance(ack, ConnAck) and ack.reason_code == 0, ack
    return c


def _set(p: Properties) -> dict[str, object]:
    return {k: v for k, v in vars(p).items() if v not in (None, ())}


def _watcher(port: int, topic: str) -> Client:
    w = Client(port, new_id(), V5)
    w.connect()
    assert w.subscribe(topic, 1) == [1]
    return w


def _nothing(w: Client, seconds: float) -> bool:
    """True if no message arrives within ``seconds`` (a negative check's deadline)."""
    try:
        w.get(timeout=seconds)
    except queue.Empty:
        return True
    return False


def test_will_waits_for_its_delay(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"will/{new_id()}"
    w = _watcher(port, topic)
    c = _with_will(port, new_id(), topic, delay=2)
    t0 = time.monotonic()
    c.drop()
    m = w.get()
    assert (m.topic, m.payload) == (topic, b"gone")
    assert time.monotonic() - t0 >= 1.5
    w.close()


def test_will_delay_is_capped_by_the_session_expiry(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"will/{new_id()}"
    w = _watcher(port, topic)
    c = _with_will(port, new_id(), topic, delay=60, expiry=1)
    c.drop()
    assert w.get().payload == b"gone"  # within the 15 s deadline, not after 60
    w.close()


def test_resumed_session_cancels_a_delayed_will(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"will/{new_id()}"
    w = _watcher(port, topic)
    _with_will(port, cid, topic, delay=2).drop()
    again = RawClient(port, V5)
    again.send(Connect(cid, protocol_level=V5, clean_start=False, username="guest",
                       password=b"guest", properties=Properties(session_expiry_interval=600)))
    assert isinstance(again.recv(), ConnAck)
    assert _nothing(w, 4.0)  # twice the delay: never published
    again.send(Disconnect())
    w.close()


def test_clean_start_publishes_a_delayed_will_at_once(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    cid, topic = new_id(), f"will/{new_id()}"
    w = _watcher(port, topic)
    _with_will(port, cid, topic, delay=120).drop()
    again = Client(port, cid, V5, clean=True)
    again.connect()
    assert w.get().payload == b"gone"  # the old session ended: no waiting for 120 s
    again.close()
    w.close()


def test_normal_disconnect_deletes_a_delayed_will(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"will/{new_id()}"
    w = _watcher(port, topic)
    c = _with_will(port, new_id(), topic, delay=1)
    c.send(Disconnect())
    assert c.closed_by_broker()
    assert _nothing(w, 3.0)
    w.close()


def test_will_properties_reach_the_subscriber(mb: BrokerProcess) -> None:
    port = mb.mqtt_port  # type: ignore[attr-defined]
    topic = f"will/{new_id()}"
    w = _watcher(port, topic)
    props = Properties(content_type="text/plain", response_topic="reply/here",
                       correlation_data=b"\x00corr", message_expiry_interval=300,
                       user_properties=(("device", "d1"), ("site", "s2")),
                       payload_format_indicator=1)
    _with_will(port, new_id(), topic, props=props).drop()
    m = w.get()
    p = m.properties
    assert m.payload == b"gone"
    assert p.ContentType == "text/plain"
    assert p.ResponseTopic == "reply/here"
    assert p.CorrelationData == b"\x00corr"
    assert sorted(p.UserProperty) == [("device", "d1"), ("site", "s2")]
    assert p.PayloadFormatIndicator == 1
    assert 0 < p.MessageExpiryInterval <= 300
    w.close()


def _persistent_watcher(port: int, wid: str, topic: str) -> None:
    w = Client(port, wid, V311, clean=False)
    w.connect()
    assert w.subscribe(topic, 1) == [1]
    w.close()


def _restart(b: BrokerProcess) -> None:
    b.kill()
    b.start()
    wait_for(lambda: listening(b.mqtt_port), 30,  # type: ignore[attr-defined]
             what="MQTT after restart")


def test_delayed_will_fires_after_kill_9_when_due(tmp_path: Path) -> None:
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    wid, topic = new_id(), f"will/{new_id()}"
    try:
        _persistent_watcher(port, wid, topic)
        c = _with_will(port, new_id(), topic, delay=4)
        t0 = time.monotonic()
        c.drop()
        _restart(b)
        w = Client(port, wid, V311, clean=False)
        assert w.connect() == (0, True)
        assert w.get().payload == b"gone"
        assert time.monotonic() - t0 >= 3.5  # at its due time, not at the drop
        w.close()
    finally:
        b.kill()


@pytest.mark.parametrize("version", [V311, V5])
def test_will_of_a_client_connected_at_kill_9_is_published(tmp_path: Path,
                                                           version: int) -> None:
    """The broker's crash ended the connection without a DISCONNECT."""
    b = mqtt_broker(tmp_path / "data")
    port = b.mqtt_port  # type: ignore[attr-defined]
    wid, topic = new_id(), f"will/{new_id()}"
    try:
        _persistent_watcher(port, wid, topic)
        _with_will(port, new_id(), topic, version=version)
        _restart(b)
        w = Client(port, wid, V311, clean=False)
        assert w.connect() == (0, True)
        assert w.get().payload == b"gone"
        w.close()
    finally:
        b.kill()
