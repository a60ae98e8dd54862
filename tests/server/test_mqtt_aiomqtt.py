"""aiomqtt (asyncio, on paho) against the real broker, written as its users write it:
``async with Client(...) as client``, ``async for message in client.messages``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import aiomqtt
import pytest
from paho.mqtt.client import MQTTv5, MQTTv311

from tests.brokerproc import BrokerProcess
from tests.server.mqttclient import new_id, running_broker

T = TypeVar("T")


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("aiomqtt"))


def run(main: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    """Run one scenario under a deadline: a lost message fails, never hangs."""
    async def bounded() -> T:
        return await asyncio.wait_for(main(), timeout)
    return asyncio.run(bounded())


def client(mb: BrokerProcess, version: int = MQTTv311, **kw: Any) -> aiomqtt.Client:
    return aiomqtt.Client("127.0.0.1", mb.mqtt_port,  # type: ignore[attr-defined]
                          username="guest", password="guest",
                          protocol=aiomqtt.ProtocolVersion(version), **kw)


async def take(c: aiomqtt.Client, n: int) -> list[aiomqtt.Message]:
    got: list[aiomqtt.Message] = []
    async for message in c.messages:
        got.append(message)
        if len(got) == n:
            break
    return got


@pytest.mark.parametrize("version", [MQTTv311, MQTTv5])
def test_wildcard_subscription_gets_qos1_and_qos2(mb: BrokerProcess, version: int) -> None:
    base = f"home/{new_id()}"

    async def main() -> list[tuple[str, bytes, int]]:
        async with client(mb, version) as sub, client(mb, version) as pub:
            await sub.subscribe(f"{base}/+/temp", qos=2)
            await pub.publish(f"{base}/kitchen/temp", b"21.5", qos=1)
            await pub.publish(f"{base}/kitchen/humidity", b"40", qos=1)  # not matched
            await pub.publish(f"{base}/hall/temp", b"19.0", qos=2)
            got = await take(sub, 2)
            return [(m.topic.value, m.payload, m.qos) for m in got]  # type: ignore[misc]

    assert run(main) == [(f"{base}/kitchen/temp", b"21.5", 1), (f"{base}/hall/temp", b"19.0", 2)]


@pytest.mark.parametrize("qos", [1, 2])
def test_persistent_session_gets_offline_message_after_reconnect(mb: BrokerProcess,
                                                                 qos: int) -> None:
    ident, topic = f"aio-{new_id()}", f"offline/{new_id()}/state"

    async def main() -> list[tuple[str, bytes, int]]:
        async with client(mb, identifier=ident, clean_session=False) as first:
            await first.subscribe(topic, qos=qos)
        async with client(mb) as pub:  # the subscriber is offline now
            await pub.publish(topic, b"while-you-were-away", qos=qos)
            await pub.publish(topic, b"second", qos=qos)
        async with client(mb, identifier=ident, clean_session=False) as again:
            got = await take(again, 2)  # no SUBSCRIBE: the session kept it
        async with client(mb, identifier=ident, clean_session=True):
            pass  # discard the session
        return [(m.topic.value, m.payload, m.qos) for m in got]  # type: ignore[misc]

    assert run(main) == [(topic, b"while-you-were-away", qos), (topic, b"second", qos)]


def test_mqtt5_session_expiry_and_user_properties(mb: BrokerProcess) -> None:
    """MQTT 5 the aiomqtt way: clean_start off plus a session expiry interval, and
    user properties carried to the subscriber."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    ident, topic = f"aio5-{new_id()}", f"v5/{new_id()}/cmd"
    keep = Properties(PacketTypes.CONNECT)
    keep.SessionExpiryInterval = 300

    async def main() -> tuple[bytes, list[tuple[str, str]] | None]:
        async with client(mb, MQTTv5, identifier=ident, clean_start=False,
                          properties=keep) as first:
            await first.subscribe(topic, qos=1)
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("origin", "aiomqtt")]
        async with client(mb, MQTTv5) as pub:
            await pub.publish(topic, b"reboot", qos=1, properties=props)
        async with client(mb, MQTTv5, identifier=ident, clean_start=False,
                          properties=keep) as again:
            [m] = await take(again, 1)
        async with client(mb, MQTTv5, identifier=ident, clean_start=True):
            pass
        user = getattr(m.properties, "UserProperty", None)
        return m.payload, user  # type: ignore[return-value]

    assert run(main) == (b"reboot", [("origin", "aiomqtt")])
