"""paho calls the shared client helper does not make: SUBSCRIBE with MQTT 5 options
and a subscription identifier, PUBLISH with properties, draining a client."""

from __future__ import annotations

import queue
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.brokerproc import wait_for
from tests.server.mqttclient import TIMEOUT, V5, Client, new_id


def connected(port: int, version: int = V5, **kw: Any) -> Client:
    """A connected client (a fresh client id unless ``client_id`` is given)."""
    c = Client(port, kw.pop("client_id", None) or new_id(), version, **kw)
    assert c.connect()[0] == 0
    return c


def subscribe(c: Client, topic: str, qos: int, *, no_local: bool = False,
              identifier: int | None = None) -> list[int]:
    """SUBACK's codes for one filter with MQTT 5 options (3.1.1: plain QoS)."""
    kw: dict[str, Any] = {}
    if c.version == 5:
        kw["options"] = SubscribeOptions(qos=qos, noLocal=no_local)
        if identifier is not None:
            props = Properties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = identifier
            kw["properties"] = props
        _rc, mid = c.c.subscribe(topic, **kw)
    else:
        _rc, mid = c.c.subscribe(topic, qos)
    codes = wait_for(lambda: c.subacks.get(mid), TIMEOUT, what="SUBACK")
    return [int(x.value if hasattr(x, "value") else x) for x in codes]


def publish(c: Client, topic: str, payload: bytes, qos: int, **props: Any) -> None:
    """PUBLISH with MQTT 5 properties given by paho's names; returns once acknowledged."""
    p = None
    if props:
        p = Properties(PacketTypes.PUBLISH)
        for name, value in props.items():
            setattr(p, name, value)
    info = c.c.publish(topic, payload, qos, properties=p)
    info.wait_for_publish(TIMEOUT)
    assert info.is_published(), f"no acknowledgement for {topic}"


def collect(clients: list[Client], total: int) -> list[list[paho.MQTTMessage]]:
    """Messages of each client until ``total`` arrived in all (or a timeout error)."""
    got: list[list[paho.MQTTMessage]] = [[] for _ in clients]

    def drain() -> bool:
        for i, c in enumerate(clients):
            while True:
                try:
                    got[i].append(c.messages.get_nowait())
                except queue.Empty:
                    break
        return sum(map(len, got)) >= total

    wait_for(drain, TIMEOUT, what=f"{total} messages")
    return got
