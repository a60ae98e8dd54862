"""Management API parity: the routes and shapes RabbitMQ tools call, on a live broker."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest

from tests.admin.conftest import AdminBroker, publish, qname
from tests.brokerproc import wait_for

NODE = "amqplite@localhost"


def is_error(r: httpx.Response, status: int) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "reason"}, body


def test_nodes(api: httpx.Client) -> None:
    nodes = api.get("/api/nodes").json()
    assert [n["name"] for n in nodes] == [NODE]
    n = nodes[0]
    assert n["running"] is True and n["mem_alarm"] is False and n["partitions"] == []
    assert n["mem_used"] > 0 and n["fd_used"] > 0 and n["fd_total"] >= n["fd_used"]
    assert {t["name"] for t in n["exchange_types"]} >= {"direct", "fanout", "topic", "headers"}
    one = api.get(f"/api/nodes/{NODE}").json()
    assert one["name"] == NODE
    is_error(api.get("/api/nodes/rabbit@elsewhere"), 404)


def test_cluster_name_and_extensions(api: httpx.Client) -> None:
    assert api.get("/api/cluster-name").json() == {"name": "amqplite"}
    assert api.get("/api/extensions").json() == []


def test_health_checks(admin_broker: AdminBroker, api: httpx.Client) -> None:
    assert api.get("/api/health/checks/local-alarms").json() == {"status": "ok"}
    assert api.get("/api/health/checks/virtual-hosts").json() == {"status": "ok"}
    assert api.get("/api/health/checks/node-is-quorum-critical").json() == {
        "status": "ok", "reason": "single node cluster"}  # RabbitMQ 3.10.8 on one node
    for port in (admin_broker.proc.port, int(admin_broker.admin_url.rsplit(":", 1)[1])):
        r = api.get(f"/api/health/checks/port-listener/{port}")
        assert r.status_code == 200 and r.json() == {"status": "ok", "port": port}
    r = api.get("/api/health/checks/port-listener/1")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "failed" and body["missing"] == 1
    assert admin_broker.proc.port in body["ports"]
    is_error(api.get("/api/health/checks/port-listener/http"), 400)
    assert api.get("/api/health/checks/protocol-listener/amqp091").status_code == 200
    r = api.get("/api/health/checks/protocol-listener/stomp")
    assert r.status_code == 503 and r.json()["missing"] == "stomp"


def test_aliveness_test(api: httpx.Client) -> None:
    r = api.get("/api/aliveness-test/%2F")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    q = api.get("/api/queues/%2F/aliveness-test").json()
    assert q["messages"] == 0  # the test message was taken back
    is_error(api.get("/api/aliveness-test/no-such-vhost"), 404)


def test_exchange_to_exchange_bindings(api: httpx.Client, channel: Any) -> None:
    src, dst, q = qname("e2e-src"), qname("e2e-dst"), qname("e2e-q")
    assert api.put(f"/api/exchanges/%2F/{src}", json={"type": "direct"}).status_code == 201
    assert api.put(f"/api/exchanges/%2F/{dst}", json={"type": "fanout"}).status_code == 201
    channel.queue_declare(q, durable=True)
    channel.queue_bind(q, dst)
    base = f"/api/bindings/%2F/e/{src}/e/{dst}"
    r = api.post(base, json={"routing_key": "k", "arguments": {}})
    assert r.status_code == 201
    assert r.headers["location"] == f"{base}/k"
    (b,) = api.get(base).json()
    assert b == {"source": src, "vhost": "/", "destination": dst,
                 "destination_type": "exchange", "routing_key": "k", "arguments": {},
                 "properties_key": "k"}
    assert api.get(r.headers["location"]).json() == b
    assert api.get(f"/api/exchanges/%2F/{src}/bindings/source").json() == [b]
    assert api.get(f"/api/exchanges/%2F/{dst}/bindings/destination").json() == [b]
    # the binding routes: src --k--> dst --fanout--> q
    channel.basic_publish(src, "k", b"through", pika.BasicProperties(delivery_mode=2))
    wait_for(lambda: api.get(f"/api/queues/%2F/{q}").json()["messages"] == 1, 10,
             what="message routed through the exchange binding")
    assert api.delete(f"{base}/k").status_code == 204
    assert api.get(base).json() == []
    is_error(api.get(f"{base}/k"), 404)
    is_error(api.delete(f"{base}/k"), 404)
    is_error(api.post(f"/api/bindings/%2F/e/{src}/e/nope", json={}), 404)
    is_error(api.get("/api/exchanges/%2F/nope/bindings/source"), 404)


def test_single_queue_binding_by_props(api: httpx.Client, channel: Any) -> None:
    x, q = qname("bx"), qname("bq")
    channel.exchange_declare(x, "direct", durable=True)
    channel.queue_declare(q, durable=True)
    channel.queue_bind(q, x, "rk")
    b = api.get(f"/api/bindings/%2F/e/{x}/q/{q}/rk").json()
    assert b["destination"] == q and b["routing_key"] == "rk"
    is_error(api.get(f"/api/bindings/%2F/e/{x}/q/{q}/other"), 404)


@pytest.fixture
def three_queues(channel: Any) -> list[str]:
    prefix = qname("pg")
    names = [f"{prefix}-{i}" for i in range(3)]
    for i, n in enumerate(names):
        channel.queue_declare(n, durable=True)
        for j in range(i):
            publish(channel, n, f"{j}".encode())
    return names


def test_pagination_and_name_filter(api: httpx.Client, three_queues: list[str]) -> None:
    prefix = three_queues[0][:-2]
    r = api.get("/api/queues/%2F", params={"page": 1, "page_size": 2, "name": prefix.upper()})
    page = r.json()
    assert set(page) == {"filtered_count", "item_count", "items", "page", "page_count",
                         "page_size", "total_count"}
    assert page["filtered_count"] == 3 and page["item_count"] == 2
    assert page["page"] == 1 and page["page_count"] == 2 and page["page_size"] == 2
    assert page["total_count"] >= 3
    assert [q["name"] for q in page["items"]] == three_queues[:2]
    page2 = api.get("/api/queues/%2F", params={"page": 2, "page_size": 2,
                                               "name": prefix}).json()
    assert [q["name"] for q in page2["items"]] == three_queues[2:]
    rx = api.get("/api/queues", params={"page": 1, "name": f"^{prefix}-[02]$",
                                        "use_regex": "true"}).json()
    assert [q["name"] for q in rx["items"]] == [three_queues[0], three_queues[2]]
    is_error(api.get("/api/queues/%2F", params={"page": 3, "page_size": 2, "name": prefix}),
             400)
    is_error(api.get("/api/queues", params={"page": 1, "page_size": 501}), 400)
    is_error(api.get("/api/queues", params={"page": "x"}), 400)
    is_error(api.get("/api/queues", params={"page": 1, "name": "(", "use_regex": "true"}), 400)


def test_sort_and_columns(api: httpx.Client, three_queues: list[str]) -> None:
    prefix = three_queues[0][:-2]
    rows = api.get("/api/queues/%2F", params={"sort": "messages", "sort_reverse": "true",
                                              "columns": "name,messages,message_stats.publish",
                                              }).json()
    mine = [r for r in rows if r["name"].startswith(prefix)]
    assert [r["name"] for r in mine] == three_queues[::-1]
    assert mine[0] == {"name": three_queues[2], "messages": 2,
                       "message_stats": {"publish": 2}}
    counts = [r["messages"] for r in rows]
    assert counts == sorted(counts, reverse=True)
    one = api.get(f"/api/queues/%2F/{three_queues[1]}", params={"columns": "name,consumers"})
    assert one.json() == {"name": three_queues[1], "consumers": 0}


def test_overview_says_what_it_is(api: httpx.Client) -> None:
    o = api.get("/api/overview").json()
    assert o["product_name"] == "amqplite"
    for key in ("product_version", "rabbitmq_version", "management_version", "node",
                "cluster_name", "object_totals", "queue_totals", "message_stats", "listeners",
                "exchange_types"):
        assert key in o, key
    assert o["node"] == NODE
    assert {ln["protocol"] for ln in o["listeners"]} == {"amqp", "http"}
    assert all(ln["node"] == NODE for ln in o["listeners"])


def test_connection_channel_consumer_fields(admin_broker: AdminBroker,
                                            api: httpx.Client) -> None:
    params = pika.URLParameters(admin_broker.amqp_url)
    params.client_properties = {"connection_name": "parity-client"}
    params.heartbeat = 30
    with pika.BlockingConnection(params) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=7)
        q = qname("cf")
        ch.queue_declare(q, durable=True)
        for i in range(3):
            ch.basic_publish("", q, f"{i}".encode())
        ch.basic_consume(q, lambda *a: None, consumer_tag="parity-tag")

        def mine() -> dict[str, Any] | None:
            c.process_data_events(0)
            for conn in api.get("/api/connections").json():
                if conn["user_provided_name"] == "parity-client":
                    return conn  # type: ignore[no-any-return]
            return None

        conn = wait_for(mine, 10, what="the connection to be listed")
        assert conn["timeout"] == 30 and conn["node"] == NODE
        assert conn["user"] == "guest" and conn["vhost"] == "/" and conn["state"] == "running"
        assert conn["channels"] == 1 and conn["frame_max"] > 0
        assert conn["client_properties"]["connection_name"] == "parity-client"
        name = quote(conn["name"], safe="")
        (chan,) = api.get(f"/api/connections/{name}/channels").json()

        def stats() -> dict[str, Any]:
            c.process_data_events(0)
            return api.get(f"/api/channels/{quote(chan['name'], safe='')}").json()

        got = wait_for(lambda: (s := stats())["message_stats"]["deliver_get"] == 3 and s, 10,
                       what="three deliveries counted on the channel")
        assert got["message_stats"]["publish"] == 3
        assert "publish_details" in got["message_stats"]
        assert got["prefetch_count"] == 7 and got["node"] == NODE
        (cons,) = [x for x in api.get("/api/consumers/%2F").json()
                   if x["consumer_tag"] == "parity-tag"]
        assert cons["channel_details"]["name"] == chan["name"]
        assert cons["channel_details"]["node"] == NODE
        assert cons["prefetch_count"] == 7
    is_error(api.get("/api/channels/nope"), 404)


def test_amqpstorm_management_api(admin_broker: AdminBroker, channel: Any) -> None:
    """A third-party RabbitMQ management client works unchanged."""
    from amqpstorm.management import ManagementApi

    with ManagementApi(admin_broker.admin_url, "guest", "guest", timeout=30) as m:
        assert m.overview()["product_name"] == "amqplite"
        assert m.aliveness_test("/")["status"] == "ok"
        assert m.cluster_name() == {"name": "amqplite"}
        assert [n["name"] for n in m.nodes()] == [NODE]
        assert m.node(NODE)["running"] is True
        assert m.healthchecks.get() == {"status": "ok"}
        assert m.healthchecks.get(NODE) == {"status": "ok"}
        assert m.whoami()["name"] == "guest"
        src, dst = qname("storm-src"), qname("storm-dst")
        m.exchange.declare(src, "topic", durable=True)
        m.exchange.declare(dst, "fanout", durable=True)
        m.exchange.bind(destination=dst, source=src, routing_key="a.b")
        (b,) = m.exchange.bindings(src)
        assert (b["destination"], b["destination_type"]) == (dst, "exchange")
        m.exchange.unbind(destination=dst, source=src, routing_key="a.b")
        assert m.exchange.bindings(src) == []
        prefix = qname("storm")
        for i in range(5):
            channel.queue_declare(f"{prefix}-{i}", durable=True)
        listed = m.queue.list(name=prefix, page_size=2)  # walks three pages
        assert sorted(q["name"] for q in listed) == [f"{prefix}-{i}" for i in range(5)]
        regex = m.exchange.list(name=f"^{src}$", use_regex=True)
        assert [x["name"] for x in regex] == [src]
