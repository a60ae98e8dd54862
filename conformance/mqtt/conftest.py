"""Fixtures for the MQTT part of the conformance suite.

The broker is chosen by ``MQTT_HOST`` / ``MQTT_PORT`` (default 127.0.0.1:1883)
and logged into as ``MQTT_USERNAME`` / ``MQTT_PASSWORD`` (default guest/guest:
a Mosquitto with ``allow_anonymous true`` and no password file accepts any).
The tests encode what the OASIS MQTT 3.1.1 and 5.0 specifications mandate
and Mosquitto 2.0 does; CI runs them against a throwaway Mosquitto first,
then against amqplite. Every test uses topics and client ids of its own, so
the suite runs against a broker in use and can be re-run.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator

import pytest

from conformance.mqtt._client import Client
from conformance.mqtt._raw import RawClient, connect


def host() -> str:
    return os.environ.get("MQTT_HOST", "127.0.0.1")


def port() -> int:
    return int(os.environ.get("MQTT_PORT", "1883"))


def credentials() -> tuple[str, str]:
    return os.environ.get("MQTT_USERNAME", "guest"), os.environ.get("MQTT_PASSWORD", "guest")


class Names:
    """Topic prefixes and client ids unique to one test; the retained topics it set
    are cleared at teardown (an empty retained payload)."""

    def __init__(self, test_name: str) -> None:
        slug = re.sub(r"[^a-zA-Z0-9]+", "-", test_name)[:30].strip("-")
        self.prefix = f"conf/{slug}-{uuid.uuid4().hex[:8]}"
        self.retained: set[str] = set()
        self._n = 0

    def topic(self, suffix: str = "t") -> str:
        return f"{self.prefix}/{suffix}"

    def client_id(self) -> str:
        self._n += 1
        return f"conf-{uuid.uuid4().hex[:10]}-{self._n}"


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Iterator[Names]:
    n = Names(request.node.name)
    yield n
    if n.retained:
        c = Client(host(), port(), n.client_id(), 4, credentials())
        c.connect()
        for t in sorted(n.retained):
            c.publish(t, b"", 1, retain=True)
        c.close()


ClientFactory = Callable[..., Client]


@pytest.fixture
def mqtt(names: Names) -> Iterator[ClientFactory]:
    """``mqtt(version=4, client_id=None, **kw)``: a connected-on-demand paho client;
    every one still open is disconnected at teardown."""
    made: list[Client] = []

    def factory(version: int = 4, client_id: str | None = None, **kw: object) -> Client:
        c = Client(host(), port(), client_id or names.client_id(), version, credentials(),
                   **kw)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield factory
    for c in made:
        c.close()


@pytest.fixture
def raw(names: Names) -> Iterator[Callable[..., RawClient]]:
    """``raw(version=4, client_id=None, **connect_kw)``: a raw socket that sent CONNECT
    and read a successful CONNACK."""
    made: list[RawClient] = []

    def factory(version: int = 4, client_id: str | None = None, **kw: object) -> RawClient:
        user, password = credentials()
        r = RawClient(host(), port(), version)
        made.append(r)
        r.send(connect(client_id or names.client_id(), version, user=user,
                       password=password, **kw))  # type: ignore[arg-type]
        ack = r.expect(2)
        assert ack.reason_code(version) == 0, ack
        return r

    yield factory
    for r in made:
        r.close()
