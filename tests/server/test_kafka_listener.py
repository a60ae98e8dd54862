"""The Kafka listener's own rules with plain calls (no sockets): a deleted vhost's
consumer groups go as the broker deletes it, their waiting members answered."""

from __future__ import annotations

from amqplite.broker.auth import UserDB
from amqplite.broker.core import Broker
from amqplite.config import Settings
from amqplite.server.kafka.listener import KafkaListener


async def _never() -> None:
    raise AssertionError("not awaited here")


def test_a_deleted_vhosts_groups_go_with_it() -> None:
    b = Broker()
    b.add_vhost("tenant", persist=False)
    listener = KafkaListener(Settings(), b, UserDB(), lambda f, *a: f(*a), lambda: None,
                             _never, None)  # type: ignore[arg-type]
    c = listener.coordinator
    c.join_group(0.0, ("conn", 1), "tenant", "g", "", "consumer", [("range", b"")], 10_000)
    c.join_group(0.0, ("conn", 2), "/", "g", "", "consumer", [("range", b"")], 10_000)
    assert {v for v, _g in c.groups} == {"tenant", "/"}
    b.delete_vhost("tenant")
    assert {v for v, _g in c.groups} == {"/"}
