"""The admin HTTP API: status codes and JSON shapes for good and bad requests."""

from __future__ import annotations

import base64
import contextlib
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest
from pika.exceptions import ConnectionClosedByBroker

from tests.admin.conftest import MONITOR, AdminBroker, counts, death_headers, publish, qname
from tests.brokerproc import wait_for


def is_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "reason"}
    assert isinstance(body["reason"], str) and body["reason"]
    return body  # type: ignore[no-any-return]


# ------------------------------------------------------------------- auth
def test_missing_or_wrong_credentials_get_401(admin_broker: AdminBroker) -> None:
    with admin_broker.api(auth=None) as anon:
        r = anon.get("/api/queues")
        is_error(r, 401)
        assert r.headers["www-authenticate"].startswith("Basic ")
    with admin_broker.api(auth=("guest", "wrong")) as bad:
        r = bad.get("/api/overview")
        is_error(r, 401)
        assert r.headers["www-authenticate"].startswith("Basic ")
        # a script that says so (the dashboard) gets no challenge: no browser dialog
        r = bad.get("/api/overview", headers={"X-Requested-With": "XMLHttpRequest"})
        is_error(r, 401)
        assert "www-authenticate" not in r.headers
    with admin_broker.api(auth=("nobody", "x")) as bad:
        is_error(bad.put("/api/queues/%2F/x", json={}), 401)


def test_openapi_document_is_public(admin_broker: AdminBroker) -> None:
    with admin_broker.api(auth=None) as anon:
        r = anon.get("/api/openapi.json")
    assert r.status_code == 200
    assert r.json()["openapi"].startswith("3.1")


def test_non_admin_writes_only_what_its_permissions_allow(admin_broker: AdminBroker,
                                                          api: httpx.Client) -> None:
    """RabbitMQ 3.10.8 (checked): any management-ish tag may declare, delete, bind,
    publish, get and purge through the API, acting as itself, so its AMQP
    permissions decide (401 when they refuse); policies still need policymaker."""
    q = qname()
    assert api.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    perms = "/api/permissions/%2F/monitor"
    assert api.put(perms, json={"configure": "", "write": "", "read": "^$"}).status_code \
        in (201, 204)
    try:
        with admin_broker.api(auth=MONITOR) as mon:
            assert mon.get("/api/queues").status_code == 200
            assert mon.get("/api/whoami").json() == {
                "name": "monitor", "tags": ["monitoring"], "is_admin": False,
                "permitted": []}
            for method, url, body in [
                ("PUT", f"/api/queues/%2F/{qname()}", {}),
                ("DELETE", f"/api/queues/%2F/{q}", None),
                ("DELETE", f"/api/queues/%2F/{q}/contents", None),
                ("POST", f"/api/queues/%2F/{q}/get", {"count": 1}),
                ("POST", f"/api/bindings/%2F/e/amq.direct/q/{q}", {"routing_key": "k"}),
            ]:
                is_error(mon.request(method, url, json=body), 401)
            r = mon.post("/api/exchanges/%2F/amq.default/publish",
                         json={"routing_key": q, "payload": "x"})
            assert r.status_code == 400 and "ACCESS_REFUSED" in r.text
            is_error(mon.put("/api/policies/%2F/p", json={
                "pattern": ".", "definition": {"max-length": 1}}), 403)
        assert api.get(f"/api/queues/%2F/{q}").status_code == 200
        mine = qname()
        assert api.put(perms, json={"configure": "^mon-", "write": ".*", "read": ".*"}
                       ).status_code in (201, 204)
        with admin_broker.api(auth=MONITOR) as mon:
            assert mon.get("/api/whoami").json()["permitted"] == ["configure", "write", "read"]
            is_error(mon.put(f"/api/queues/%2F/{mine}", json={}), 401)
            assert mon.put(f"/api/queues/%2F/mon-{mine}", json={}).status_code == 201
            assert mon.post(f"/api/bindings/%2F/e/amq.direct/q/mon-{mine}",
                            json={"routing_key": "k"}).status_code == 201
            assert mon.post("/api/exchanges/%2F/amq.direct/publish", json={
                "routing_key": "k", "payload": "hi", "payload_encoding": "string",
                "properties": {}}).json() == {"routed": True}
            got = mon.post(f"/api/queues/%2F/mon-{mine}/get", json={
                "count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}).json()
            assert [m["payload"] for m in got] == ["hi"]
            assert mon.delete(f"/api/queues/%2F/mon-{mine}").status_code == 204
        # it closes its own connection, not another user's (monitoring sees both)
        own = pika.BlockingConnection(pika.URLParameters(
            admin_broker.amqp_url.replace("guest:guest@", "monitor:monitor-secret@")))
        other = admin_broker.connect()
        try:
            with admin_broker.api(auth=MONITOR) as mon:
                def names() -> dict[str, str]:
                    return {c["user"]: c["name"] for c in mon.get("/api/connections").json()}
                found = wait_for(lambda: {"monitor", "guest"} <= names().keys() and names(),
                                 what="both connections listed")
                is_error(mon.delete(f"/api/connections/{quote(found['guest'], safe='')}"), 401)
                assert mon.delete(f"/api/connections/{quote(found['monitor'], safe='')}"
                                  ).status_code == 204
                wait_for(lambda: "monitor" not in names(), what="its connection closed")
                assert "guest" in names()
        finally:
            other.close()
            with contextlib.suppress(Exception):
                own.close()
    finally:
        assert api.put(perms, json={"configure": ".*", "write": ".*", "read": ".*"}
                       ).status_code in (201, 204)


# ---------------------------------------------------------------- routing
def test_unknown_path_and_method(api: httpx.Client) -> None:
    is_error(api.get("/api/nope"), 404)
    r = api.post("/api/overview")
    is_error(r, 405)
    assert "GET" in r.headers["allow"]


def test_unknown_objects_are_404(api: httpx.Client) -> None:
    assert "no queue 'nope'" in is_error(api.get("/api/queues/%2F/nope"), 404)["reason"]
    is_error(api.get("/api/queues/novhost"), 404)
    is_error(api.get("/api/exchanges/%2F/nope"), 404)
    is_error(api.delete("/api/queues/%2F/nope"), 404)
    is_error(api.delete("/api/queues/%2F/nope/contents"), 404)
    is_error(api.post("/api/queues/%2F/nope/get", json={}), 404)
    is_error(api.get("/api/queues/%2F/nope/messages"), 404)
    is_error(api.get("/api/policies/%2F/nope"), 404)
    is_error(api.delete("/api/connections/nope"), 404)


def test_bad_bodies_are_400(api: httpx.Client) -> None:
    q = qname()
    assert api.put(f"/api/queues/%2F/{q}", json={}).status_code == 201
    url = f"/api/queues/%2F/{q}/get"
    is_error(api.post(url, content=b"{not json", headers={"content-type": "application/json"}),
             400)
    is_error(api.post(url, json=[1, 2]), 400)
    is_error(api.post(url, json={"count": -1}), 400)  # 0 and "3" are fine, as in RabbitMQ
    is_error(api.post(url, json={"count": "three"}), 400)
    is_error(api.post(url, json={"ackmode": "ack_maybe"}), 400)
    is_error(api.post(url, json={"encoding": "utf-16"}), 400)
    is_error(api.put(f"/api/queues/%2F/{q}", json={"durable": "yes"}), 400)
    is_error(api.put(f"/api/exchanges/%2F/{qname('x')}", json={}), 400)
    is_error(api.post(f"/api/queues/%2F/{q}/move", json={}), 400)
    is_error(api.post(f"/api/queues/%2F/{q}/move", json={"to_queue": q, "filter": {"x": "y"}}),
             400)
    is_error(api.get(f"/api/queues/%2F/{q}/messages?limit=abc"), 400)
    is_error(api.post("/api/exchanges/%2F/amq.default/publish",
                      json={"routing_key": q, "payload": "x", "properties": {"priority": "hi"}}),
             400)


# --------------------------------------------------------------- overview
def test_overview_counts(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    publish(channel, q, b"one")
    ov = api.get("/api/overview").json()
    assert ov["product_name"] == "amqplite"
    assert ov["object_totals"]["connections"] >= 1
    assert ov["object_totals"]["queues"] >= 1
    assert ov["queue_totals"]["messages_ready"] >= 1
    assert ov["message_stats"]["publish"] >= 1
    assert "rate" in ov["message_stats"]["publish_details"]


# ----------------------------------------------------------------- queues
def test_queue_declare_show_delete(api: httpx.Client, channel: Any) -> None:
    q = qname()
    url = f"/api/queues/%2F/{q}"
    assert api.put(url, json={"durable": True, "arguments": {"x-max-length": 10}}).status_code \
        == 201
    assert api.put(url, json={"durable": True, "arguments": {"x-max-length": 10}}).status_code \
        == 204
    r = api.put(url, json={"durable": False})
    assert "inequivalent" in is_error(r, 400)["reason"]
    publish(channel, q, b"hello")
    info = api.get(url).json()
    assert info["messages_ready"] == 1 and info["messages"] == 1
    assert info["message_bytes_ready"] == 5
    assert info["arguments"] == {"x-max-length": 10}
    assert info["durable"] is True and info["consumers"] == 0
    assert q in [x["name"] for x in api.get("/api/queues/%2F").json()]
    assert api.delete(url + "?if-empty=true").status_code == 400
    assert api.delete(url).status_code == 204
    is_error(api.get(url), 404)


def test_purge(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    for i in range(4):
        publish(channel, q, f"m{i}".encode())
    r = api.delete(f"/api/queues/%2F/{q}/contents")
    # RabbitMQ answers 204 with no body (clients read none); the count in our header
    assert r.status_code == 204 and r.content == b"" and "content-type" not in r.headers
    assert r.headers["x-amqplite-purged"] == "4"
    assert counts(api, q) == (0, 0)


def test_unacked_counts_and_bytes(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    publish(channel, q, b"abc")
    publish(channel, q, b"defg")
    method, _, _ = channel.basic_get(q)
    info = api.get(f"/api/queues/%2F/{q}").json()
    assert (info["messages_ready"], info["messages_unacknowledged"]) == (1, 1)
    assert info["message_bytes_unacknowledged"] == 3
    assert info["message_bytes"] == 7
    channel.basic_ack(method.delivery_tag)


# --------------------------------------------------------------- messages
def test_peek_has_no_side_effects(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    for i in range(3):
        publish(channel, q, f"body {i}".encode(), message_id=f"id-{i}")
    url = f"/api/queues/%2F/{q}/messages"
    for _ in range(2):
        r = api.get(url)
        assert r.status_code == 200
        msgs = r.json()
        assert [m["payload"] for m in msgs] == ["body 0", "body 1", "body 2"]
        assert all(m["redelivered"] is False and m["delivery_count"] == 0 for m in msgs)
        assert r.headers["x-total-count"] == "3"
    page = api.get(url, params={"limit": 1, "offset": 1}).json()
    assert [m["message_id"] for m in page] == ["id-1"]
    assert page[0]["index"] == 1
    assert counts(api, q) == (3, 0)
    method, _, body = channel.basic_get(q, auto_ack=True)
    assert body == b"body 0" and method.redelivered is False and method.message_count == 2


def test_peek_binary_and_filters(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    publish(channel, q, b"\xff\x00\x01", headers=death_headers("work", "expired"))
    publish(channel, q, b"text", headers=death_headers("work", "rejected"))
    msgs = api.get(f"/api/queues/%2F/{q}/messages").json()
    assert msgs[0]["payload_encoding"] == "base64"
    assert base64.b64decode(msgs[0]["payload"]) == b"\xff\x00\x01"
    only = api.get(f"/api/queues/%2F/{q}/messages", params={"filter": "reason=rejected"}).json()
    assert [m["payload"] for m in only] == ["text"]
    assert only[0]["index"] == 1


@pytest.mark.parametrize("ackmode,left,redelivered", [
    ("ack_requeue_true", 2, True),
    ("reject_requeue_true", 2, True),
    ("ack_requeue_false", 0, False),
    ("reject_requeue_false", 0, False),
])
def test_get_ack_modes(api: httpx.Client, channel: Any, ackmode: str, left: int,
                       redelivered: bool) -> None:
    q = qname()
    channel.queue_declare(q)
    publish(channel, q, b"first")
    publish(channel, q, b"second", content_type="text/plain")
    r = api.post(f"/api/queues/%2F/{q}/get", json={"count": 5, "ackmode": ackmode})
    assert r.status_code == 200
    got = r.json()
    assert [m["payload"] for m in got] == ["first", "second"]
    assert [m["message_count"] for m in got] == [1, 0]
    assert got[1]["properties"]["content_type"] == "text/plain"
    assert all(m["redelivered"] is False for m in got)
    assert counts(api, q) == (left, 0)
    if left:
        peek = api.get(f"/api/queues/%2F/{q}/messages").json()
        assert [m["payload"] for m in peek] == ["first", "second"]  # original positions
        assert all(m["redelivered"] is redelivered for m in peek)


def test_get_truncate_and_base64(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    publish(channel, q, b"0123456789")
    got = api.post(f"/api/queues/%2F/{q}/get",
                   json={"count": 1, "encoding": "base64", "truncate": 4}).json()
    assert got[0]["payload_encoding"] == "base64"
    assert base64.b64decode(got[0]["payload"]) == b"0123"
    assert got[0]["payload_bytes"] == 10


def test_reject_requeue_false_dead_letters(api: httpx.Client, channel: Any) -> None:
    q, dlq = qname("work"), qname("dlq")
    channel.queue_declare(dlq, durable=True)
    channel.queue_declare(q, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    publish(channel, q, b"poison", message_id="p-1")
    api.post(f"/api/queues/%2F/{q}/get", json={"count": 1, "ackmode": "reject_requeue_false"})
    msgs = api.get(f"/api/queues/%2F/{dlq}/messages").json()
    assert len(msgs) == 1
    d = msgs[0]["death"]
    assert (d["reason"], d["queue"], d["origin_queue"], d["count"]) == ("rejected", q, q, 1)
    assert d["routing_keys"] == [q]
    assert d["first_death_at"] is not None


def test_publish_endpoint(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    r = api.post("/api/exchanges/%2F/amq.default/publish", json={
        "routing_key": q, "payload": base64.b64encode(b"\x00\x01").decode(),
        "payload_encoding": "base64",
        "properties": {"headers": {"k": "v", "n": 5}, "message_id": "m1", "delivery_mode": 2}})
    assert r.status_code == 200 and r.json() == {"routed": True}
    r = api.post("/api/exchanges/%2F/amq.default/publish",
                 json={"routing_key": "no-such-queue", "payload": "x"})
    assert r.json() == {"routed": False}
    # RabbitMQ 3.10.8's publish answers every AMQP error with 400 and the reply code
    assert is_error(api.post("/api/exchanges/%2F/nope/publish",
                             json={"routing_key": "", "payload": ""}), 400)["reason"] == \
        "404 NOT_FOUND - no exchange 'nope' in vhost '/'"
    _, props, body = channel.basic_get(q, auto_ack=True)
    assert body == b"\x00\x01"
    assert props.message_id == "m1" and props.headers == {"k": "v", "n": 5}


# ------------------------------------------------------------ move/replay
def test_move_to_queue_keeps_order_and_content(api: httpx.Client, channel: Any) -> None:
    src, dst = qname("src"), qname("dst")
    channel.queue_declare(src, durable=True)
    channel.queue_declare(dst, durable=True)
    for i in range(5):
        publish(channel, src, f"m{i}".encode(), headers={"i": i}, message_id=f"m{i}")
    r = api.post(f"/api/queues/%2F/{src}/move", json={"to_queue": dst, "limit": 3})
    assert r.status_code == 200
    assert r.json() == {"moved": 3, "skipped": 0, "errors": [], "remaining": 2}
    assert counts(api, src) == (2, 0) and counts(api, dst) == (3, 0)
    moved = api.get(f"/api/queues/%2F/{dst}/messages").json()
    assert [m["payload"] for m in moved] == ["m0", "m1", "m2"]
    assert [m["message_id"] for m in moved] == ["m0", "m1", "m2"]
    assert moved[0]["properties"]["headers"] == {"i": 0}
    is_error(api.post(f"/api/queues/%2F/{src}/move", json={"to_queue": "nope"}), 404)


def test_move_with_filter_and_unroutable(api: httpx.Client, channel: Any) -> None:
    src, dst = qname("src"), qname("dst")
    channel.queue_declare(src)
    channel.queue_declare(dst)
    publish(channel, src, b"a", headers=death_headers("w1"))
    publish(channel, src, b"b", headers=death_headers("w2"))
    r = api.post(f"/api/queues/%2F/{src}/move",
                 json={"to_queue": dst, "filter": {"queue": "w2"}}).json()
    assert (r["moved"], r["skipped"]) == (1, 1)
    assert [m["payload"] for m in api.get(f"/api/queues/%2F/{dst}/messages").json()] == ["b"]
    r = api.post(f"/api/queues/%2F/{src}/move",
                 json={"to_exchange": "amq.direct", "routing_key": "nowhere"}).json()
    assert r["moved"] == 0 and "unroutable" in r["errors"][0]["reason"]
    assert counts(api, src) == (1, 0)


def test_replay_to_origin(api: httpx.Client, channel: Any) -> None:
    work, dlq = qname("work"), qname("dlq")
    channel.queue_declare(work, durable=True)
    channel.queue_declare(dlq, durable=True)
    publish(channel, dlq, b"x1", headers=death_headers(work))
    publish(channel, dlq, b"x2", headers=death_headers("gone-queue"))
    publish(channel, dlq, b"x3")
    r = api.post(f"/api/queues/%2F/{dlq}/replay", json={}).json()
    assert r["moved"] == 1 and r["skipped"] == 2 and r["remaining"] == 2
    reasons = sorted(e["reason"] for e in r["errors"])
    assert "origin queue 'gone-queue' does not exist" in reasons
    back = api.get(f"/api/queues/%2F/{work}/messages").json()
    assert [m["payload"] for m in back] == ["x1"]
    assert back[0]["death"]["origin_queue"] == work  # history is kept, as a shovel would
    r = api.post(f"/api/queues/%2F/{dlq}/replay", json={"queue": work, "limit": 1}).json()
    assert r["moved"] == 1 and r["remaining"] == 1


def test_replay_into_itself_is_refused(api: httpx.Client, channel: Any) -> None:
    """It used to pick up its own copies for ever (29 s of CPU, no answer)."""
    dlq = qname("dlq")
    channel.queue_declare(dlq, durable=True)
    for i in range(3):
        publish(channel, dlq, b"d%d" % i, headers=death_headers("w"))
    r = api.post(f"/api/queues/%2F/{dlq}/replay", json={"queue": dlq}, timeout=10)
    is_error(r, 400)
    assert counts(api, dlq) == (3, 0)


# ------------------------------------------------------------ connections
def test_connections_channels_consumers(admin_broker: AdminBroker, api: httpx.Client) -> None:
    c = admin_broker.connect()
    try:
        ch = c.channel()
        q = qname()
        ch.queue_declare(q)
        ch.basic_qos(prefetch_count=7)
        tag = ch.basic_consume(q, lambda *a: None)
        conns = api.get("/api/connections").json()
        mine = [x for x in conns if x["client_properties"].get("product") ==
                "Pika Python Client Library" and x["channels"] >= 1]
        assert mine and mine[0]["user"] == "guest" and mine[0]["vhost"] == "/"
        name = mine[-1]["name"]
        assert api.get(f"/api/connections/{name}").json()["name"] == name
        chans = [x for x in api.get("/api/channels").json()
                 if x["connection_details"]["name"] == name]
        assert chans and chans[0]["consumer_count"] == 1 and chans[0]["prefetch_count"] == 7
        cons = [x for x in api.get("/api/consumers").json() if x["consumer_tag"] == tag]
        assert cons[0]["queue"] == {"name": q, "vhost": "/"}
        assert cons[0]["ack_required"] is True and cons[0]["prefetch_count"] == 7
        assert api.delete(f"/api/connections/{name}").status_code == 204
        with pytest.raises(ConnectionClosedByBroker) as ei:
            wait_for(lambda: c.process_data_events(time_limit=0.05) or not c.is_open, 10,
                     what="connection close")
        assert ei.value.reply_code == 320
    finally:
        if c.is_open:
            c.close()
    wait_for(lambda: name not in [x["name"] for x in api.get("/api/connections").json()], 10,
             what="connection to disappear")


def test_single_active_consumer_shown(admin_broker: AdminBroker, api: httpx.Client) -> None:
    """RabbitMQ's shapes: the queue names its active consumer, consumers say
    whether they are the active one or waiting."""
    c = admin_broker.connect()
    try:
        ch = c.channel()
        q = qname()
        ch.queue_declare(q, arguments={"x-single-active-consumer": True})
        first = ch.basic_consume(q, lambda *a: None)
        second = ch.basic_consume(q, lambda *a: None)
        info = api.get(f"/api/queues/%2F/{q}").json()
        assert info["single_active_consumer_tag"] == first
        status = {x["consumer_tag"]: (x["activity_status"], x["active"])
                  for x in api.get("/api/consumers").json() if x["queue"]["name"] == q}
        assert status == {first: ("single_active", True), second: ("waiting", False)}
        ch.basic_cancel(first)
        assert api.get(f"/api/queues/%2F/{q}").json()["single_active_consumer_tag"] == second
        ch.queue_delete(q)
    finally:
        c.close()


# ------------------------------------------------------ exchanges/bindings
def test_exchange_and_binding_lifecycle(api: httpx.Client, channel: Any) -> None:
    x, q = qname("x"), qname()
    channel.queue_declare(q)
    assert api.put(f"/api/exchanges/%2F/{x}", json={"type": "topic"}).status_code == 201
    assert api.put(f"/api/exchanges/%2F/{x}", json={"type": "topic"}).status_code == 204
    is_error(api.put(f"/api/exchanges/%2F/{x}", json={"type": "fanout"}), 400)
    is_error(api.put("/api/exchanges/%2F/amq.nope", json={"type": "topic"}), 401)  # RabbitMQ
    info = api.get(f"/api/exchanges/%2F/{x}").json()
    assert (info["type"], info["durable"]) == ("topic", True)
    r = api.post(f"/api/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "orders.*"})
    assert r.status_code == 201 and r.headers["location"].endswith("/orders.%2A")
    pair = api.get(f"/api/bindings/%2F/e/{x}/q/{q}").json()
    assert [(b["routing_key"], b["properties_key"]) for b in pair] == [("orders.*", "orders.*")]
    assert any(b["source"] == "" and b["destination"] == q
               for b in api.get(f"/api/queues/%2F/{q}/bindings").json())
    r = api.post(f"/api/exchanges/%2F/{x}/publish", json={"routing_key": "orders.new",
                                                           "payload": "o"})
    assert r.json() == {"routed": True}
    assert api.delete(f"/api/bindings/%2F/e/{x}/q/{q}/orders.%2A").status_code == 204
    assert api.get(f"/api/bindings/%2F/e/{x}/q/{q}").json() == []
    is_error(api.delete(f"/api/bindings/%2F/e/{x}/q/{q}/orders.%2A"), 404)
    assert api.delete(f"/api/exchanges/%2F/{x}").status_code == 204
    is_error(api.get(f"/api/exchanges/%2F/{x}"), 404)


# --------------------------------------------------------------- policies
def test_policy_crud_and_effective_policy(api: httpx.Client, channel: Any) -> None:
    q = qname("pol")
    channel.queue_declare(q)
    name = qname("p")
    url = f"/api/policies/%2F/{name}"
    body = {"pattern": f"^{q}$", "definition": {"max-length": 5}, "priority": 3}
    assert api.put(url, json=body).status_code == 201
    assert api.put(url, json=body).status_code == 204
    got = api.get(url).json()
    assert got == {"vhost": "/", "name": name, "pattern": f"^{q}$", "apply-to": "queues",
                   "priority": 3, "definition": {"max-length": 5}}
    assert got in api.get("/api/policies").json()
    info = api.get(f"/api/queues/%2F/{q}").json()
    assert info["policy"] == name and info["effective_policy_definition"] == {"max-length": 5}
    assert "regex" in is_error(api.put(url, json={"pattern": "(", "definition": {
        "max-length": 1}}), 400)["reason"]
    # an unknown key is named, not fatal: alone, it leaves nothing to create
    r = api.put(url, json={"pattern": ".", "definition": {"colour": "red"}})
    assert r.status_code == 200 and "colour ignored (unknown policy key" in r.json()["ignored"][0]
    assert "not created" in r.json()["ignored"][0]
    is_error(api.put(url, json={"pattern": ".", "definition": "x"}), 400)
    assert api.delete(url).status_code == 204
    is_error(api.delete(url), 404)
    assert api.get(f"/api/queues/%2F/{q}").json()["policy"] is None


def test_durable_publish_survives_restart_after_move(tmp_path: Any) -> None:
    """A move commits before the API answers: after SIGKILL the message is in the target."""
    from tests.admin.conftest import start_admin_broker

    b = start_admin_broker(tmp_path / "d")
    try:
        with b.api() as api:
            c = b.connect()
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("src", durable=True)
            ch.queue_declare("dst", durable=True)
            for i in range(10):
                publish(ch, "src", f"m{i}".encode())
            c.close()
            r = api.post("/api/queues/%2F/src/move", json={"to_queue": "dst"}).json()
            assert r["moved"] == 10
        b.proc.kill()
        b2 = start_admin_broker(tmp_path / "d")
        try:
            with b2.api() as api:
                assert counts(api, "src") == (0, 0)
                assert counts(api, "dst") == (10, 0)
                got = [m["payload"] for m in api.get("/api/queues/%2F/dst/messages").json()]
                assert got == [f"m{i}" for i in range(10)]
        finally:
            b2.proc.stop()
    finally:
        b.proc.kill()
