"""Deleting a vhost deletes its runtime parameters and policies, so its shovels and
federation links stop, as RabbitMQ's do: with two real brokers, a shovel and a
federation link defined in vhost ``tenant`` stop connecting and moving messages,
leave /api/shovels, /api/federation-links and the store (a restart brings none back),
and a vhost re-created with the same name starts with none of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pika
import trio
import trio.testing

from amqplite.broker.core import Broker
from amqplite.links.access import Access
from amqplite.links.federation_links import Federation
from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.broker.conftest import FakeClock
from tests.brokerproc import wait_for
from tests.links import test_federation

V = "tenant"
#: the fixture of two brokers, A and B, with cluster names of their own
pair = test_federation.pair


def put(api: httpx.Client, path: str, body: dict[str, Any]) -> None:
    r = api.put(path, json=body)
    assert r.status_code in (201, 204), r.text


def make_vhost(b: AdminBroker) -> None:
    with b.api() as api:
        put(api, f"/api/vhosts/{V}", {})
        put(api, f"/api/permissions/{V}/guest", {"configure": ".*", "write": ".*", "read": ".*"})


def channel_in(b: AdminBroker, vhost: str) -> pika.BlockingConnection:
    params = pika.URLParameters(b.amqp_url)
    params.virtual_host = vhost
    return pika.BlockingConnection(params)


def declare(b: AdminBroker, vhost: str, queue: str, exchange: str = "") -> None:
    """A durable ``queue``, bound with key ``k`` to a durable direct ``exchange`` if named."""
    conn = channel_in(b, vhost)
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        if exchange:
            ch.exchange_declare(exchange, "direct", durable=True)
            ch.queue_bind(queue, exchange, "k")
    finally:
        conn.close()


def publish(b: AdminBroker, vhost: str, exchange: str, key: str, n: int) -> None:
    conn = channel_in(b, vhost)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish(exchange, key, b"m-%d" % i, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def depth(b: AdminBroker, vhost: str, queue: str) -> int:
    """Messages in ``queue`` (-1: no such queue)."""
    with b.api() as api:
        r = api.get(f"/api/queues/{vhost}/{queue}")
    return int(r.json().get("messages", 0)) if r.status_code == 200 else -1


def rows(b: AdminBroker, path: str) -> list[dict[str, Any]]:
    with b.api() as api:
        r = api.get(path)
    return list(r.json()) if r.status_code == 200 else []


def api_up(b: AdminBroker) -> bool:
    try:
        return rows(b, "/api/vhosts") != []
    except httpx.ConnectError:
        return False


def connections(b: AdminBroker) -> int:
    return len(rows(b, "/api/connections"))


def nothing_left(b: AdminBroker) -> None:
    """No link of ``tenant`` runs or is stored, in the API of the running broker."""
    assert rows(b, "/api/shovels") == []
    assert rows(b, "/api/federation-links") == []
    assert rows(b, "/api/parameters") == []
    assert [p for p in rows(b, "/api/policies") if p["vhost"] == V] == []


def test_deleting_a_vhost_stops_its_shovel(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    make_vhost(a)
    declare(a, V, "src")
    with a.api() as api:
        put(api, f"/api/parameters/shovel/{V}/out", {"value": {
            "src-uri": f"amqp:///{V}", "src-queue": "src",
            "dest-uri": b.amqp_url, "dest-queue": "dst", "reconnect-delay": 0.2}})
    wait_for(lambda: [r["state"] for r in rows(a, "/api/shovels")] == ["running"], 20,
             what="the shovel to run")
    publish(a, V, "", "src", 5)
    wait_for(lambda: depth(b, "%2F", "dst") == 5, 20, what="5 messages on B")
    assert connections(b) == 1  # the shovel's destination connection

    with a.api() as api:
        assert api.delete(f"/api/vhosts/{V}").status_code == 204
    nothing_left(a)
    wait_for(lambda: connections(b) == 0, 20, what="the shovel's connection to B to close")

    # a tenant of the same name starts afresh: no shovel drains its queue ``src``
    make_vhost(a)
    declare(a, V, "src")
    publish(a, V, "", "src", 3)
    nothing_left(a)
    a.proc.stop()
    a.proc.start()
    wait_for(lambda: api_up(a), 30, what="A's API after its restart")
    nothing_left(a)
    assert depth(a, V, "src") == 3 and depth(b, "%2F", "dst") == 5
    assert connections(b) == 0


def test_deleting_a_vhost_stops_its_federation_links(
        pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair  # A upstream (vhost /), B downstream (vhost tenant)
    declare(a, "/", "unused", "fed.x")
    make_vhost(b)
    declare(b, V, "q", "fed.x")
    with b.api() as api:
        put(api, f"/api/parameters/federation-upstream/{V}/up",
            {"value": {"uri": a.amqp_url, "reconnect-delay": 0.2}})
        put(api, f"/api/policies/{V}/federate", {
            "pattern": r"^fed\.", "apply-to": "exchanges",
            "definition": {"federation-upstream-set": "all"}})
    wait_for(lambda: [r["status"] for r in rows(b, "/api/federation-links")] == ["running"],
             30, what="the link to run")

    def upstream_queues() -> list[str]:
        return [q["name"] for q in rows(a, "/api/queues") if q["name"].startswith("federation:")]

    wait_for(lambda: len(upstream_queues()) == 1, 20, what="the upstream queue on A")
    publish(a, "/", "fed.x", "k", 4)
    wait_for(lambda: depth(b, V, "q") == 4, 20, what="4 messages federated")

    with b.api() as api:
        assert api.delete(f"/api/vhosts/{V}").status_code == 204
    nothing_left(b)
    # the link stopped and cleaned up after itself upstream, as a removed link does
    wait_for(lambda: upstream_queues() == [] and connections(a) == 0, 20,
             what="the link's queue and connections on A to go")

    make_vhost(b)
    declare(b, V, "q", "fed.x")
    nothing_left(b)
    b.proc.stop()
    b.proc.start()
    wait_for(lambda: api_up(b), 30, what="B's API after its restart")
    nothing_left(b)
    publish(a, "/", "fed.x", "k", 2)  # reaches A's own queue; nothing federates it to B
    assert depth(b, V, "q") == 0 and upstream_queues() == [] and connections(a) == 0


def test_a_shovel_into_a_deleted_vhost_stops_and_stays_out_of_its_successor(
        tmp_path: Path) -> None:
    """A shovel of ``/`` writing into ``tenant`` (as guest, who defined it) stops when
    ``tenant`` goes, with guest's permissions there; a ``tenant`` created again by
    someone else for another user gets nothing from it (had guest created it, guest
    would hold its permissions, as in RabbitMQ, and the shovel would run again)."""
    b = start_admin_broker(tmp_path / "b")
    try:
        make_vhost(b)
        declare(b, "/", "in")

        def row() -> dict[str, Any]:
            found = rows(b, "/api/shovels")
            return found[0] if found else {}

        with b.api() as api:
            put(api, "/api/parameters/shovel/%2F/into", {"value": {
                "src-uri": "amqp://", "src-queue": "in", "dest-uri": f"amqp:///{V}",
                "dest-queue": "out", "reconnect-delay": 0.2}})
            wait_for(lambda: row().get("state") == "running", 20, what="the shovel to run")
            publish(b, "/", "", "in", 2)
            wait_for(lambda: depth(b, V, "out") == 2, 20, what="2 messages into tenant")
            assert api.delete(f"/api/vhosts/{V}").status_code == 204
            wait_for(lambda: V in (row().get("reason") or ""), 20,
                     what="the shovel to stop, naming the vhost")
            # another administrator creates it (the creator gets its permissions) for bob
            put(api, "/api/users/root", {"password": "root-secret", "tags": "administrator"})
            put(api, "/api/users/bob", {"password": "bob-secret", "tags": ""})
        with b.api(("root", "root-secret")) as api:
            put(api, f"/api/vhosts/{V}", {})
            put(api, f"/api/permissions/{V}/bob", {"configure": ".*", "write": ".*",
                                                   "read": ".*"})
        with b.api() as api:
            publish(b, "/", "", "in", 3)
            assert V in (row().get("reason") or "")
            assert depth(b, "%2F", "in") == 3 and depth(b, V, "out") == -1
    finally:
        b.proc.stop()


def federated_vhost(broker: Broker) -> None:
    """``tenant`` with exchange ``fed.x`` federated from an upstream nobody listens on."""
    broker.add_vhost(V)
    ch = broker.open_channel(broker.open_session("guest", V), 1)
    broker.exchange_declare(ch, "fed.x", "direct")
    broker.parameters.put("federation-upstream", V, "up", {"uri": "amqp://127.0.0.1:1"},
                          defined_by="guest")
    broker.set_policy(V, "federate", r"^fed\.", {"federation-upstream-set": "all"},
                      apply_to="exchanges")


async def test_a_deleted_vhosts_links_stop_at_once() -> None:
    """The core's vhost hook stops the links synchronously, before the reconciler
    runs; a vhost created again with the same definitions gets links of its own."""
    broker = Broker(now=FakeClock())
    federated_vhost(broker)
    fed = Federation(broker, broker.parameters, lambda: ("127.0.0.1", 1), node="n",
                     access=Access(broker, "secret", "guest"))
    async with trio.open_nursery() as n:
        await n.start(fed.run)
        assert [row["exchange"] for row in fed.links(V)] == ["fed.x"]
        broker.delete_vhost(V)
        assert fed.links() == []
        federated_vhost(broker)
        await trio.testing.wait_all_tasks_blocked()
        assert [row["exchange"] for row in fed.links(V)] == ["fed.x"]
        n.cancel_scope.cancel()
