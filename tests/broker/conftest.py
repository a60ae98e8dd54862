"""Helpers for driving the pure broker with plain calls (no event loop)."""

from __future__ import annotations

import pytest

from amqplite.broker.core import Broker
from amqplite.broker.effects import Deliver
from amqplite.protocol.properties import BasicProperties, encode_properties

PERSISTENT = encode_properties(BasicProperties(delivery_mode=2))
TRANSIENT = encode_properties(BasicProperties())


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def broker() -> Broker:
    return Broker(now=FakeClock())


def deliveries(b: Broker) -> list[Deliver]:
    out = [e for e in b.effects if isinstance(e, Deliver)]
    b.effects.clear()
    return out


def session_channel(b: Broker, number: int = 1):  # type: ignore[no-untyped-def]
    s = b.open_session("guest", "/")
    return s, b.open_channel(s, number)
