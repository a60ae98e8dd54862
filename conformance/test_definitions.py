"""Definitions round trip, the way back: what amqplite exports after importing a
RabbitMQ 3.10.8 export (tests/admin/data/amqplite-export-of-rabbitmq-3.10.8.json,
kept equal to amqplite's real export by tests/admin/test_rabbitmq_migration.py)
imports into the broker under test whole, and the broker then holds every user,
vhost, permission, topic permission, vhost limit, policy, queue, exchange and
binding of it; the migrated users log in with their passwords and the alternate
exchange policy routes. Against RabbitMQ this proves the trip RabbitMQ → amqplite →
RabbitMQ keeps what both sides support."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from conformance.conftest import amqp_url

OUR_EXPORT = (Path(__file__).parent.parent / "tests" / "admin" / "data"
              / "amqplite-export-of-rabbitmq-3.10.8.json")
USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
VHOST = "migrated"
#: fields one side writes and the other does not (vhost descriptions and tags came in
#: RabbitMQ 3.11's export; amqplite notes who defined a parameter)
LOOSE = {"description", "tags", "metadata", "defined_by"}


def _items(definitions: dict[str, Any], section: str) -> list[dict[str, Any]]:
    out = []
    for x in definitions.get(section, []):
        if section != "users":  # a user's tags are part of what must survive
            x = {k: v for k, v in x.items() if k not in LOOSE}
        else:
            x = {k: v for k, v in x.items() if k != "limits"}
        out.append(x)
    return out


@pytest.fixture
def imported(management: httpx.Client) -> Iterator[dict[str, Any]]:
    ours = json.loads(OUR_EXPORT.read_text())
    r = management.post("/api/definitions", content=OUR_EXPORT.read_bytes(),
                        headers={"content-type": "application/json"})
    assert r.status_code in (200, 201, 204), r.text
    try:
        yield ours
    finally:
        management.delete(f"/api/vhosts/{VHOST}")
        for user in USERS:
            management.delete(f"/api/users/{user}")


def test_amqplite_export_imports_whole(imported: dict[str, Any],
                                       management: httpx.Client) -> None:
    now = management.get("/api/definitions").json()
    for section in ("users", "vhosts", "permissions", "topic_permissions", "parameters",
                    "policies", "queues", "exchanges", "bindings"):
        held = [json.dumps(x, sort_keys=True) for x in _items(now, section)]
        for item in _items(imported, section):
            assert json.dumps(item, sort_keys=True) in held, (section, item)


def test_migrated_users_log_in_and_the_ae_policy_routes(imported: dict[str, Any]) -> None:
    base = pika.URLParameters(amqp_url())
    for user, password in USERS.items():
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            base.host, base.port, VHOST, pika.PlainCredentials(user, password),
            heartbeat=0, connection_attempts=1, socket_timeout=5))
        if user == "alice":
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("orders", "no-such-key", b"to the AE", mandatory=True)
            got = ch.basic_get("unrouted-q", auto_ack=True)
            assert got[2] == b"to the AE"
        conn.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.ConnectionParameters(
            base.host, base.port, VHOST, pika.PlainCredentials("bob", "wrong"),
            heartbeat=0, connection_attempts=1, socket_timeout=5))
