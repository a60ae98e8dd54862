"""Retained messages through the admin API and ``amqplite retained`` (real broker)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pika

from tests.admin.conftest import AdminBroker, qname

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _lvc(channel: Any) -> str:
    x = qname("lvc")
    channel.exchange_declare(x, "x-lvc", durable=True)
    channel.basic_publish(x, "eur", b"1.07", PERSISTENT)
    channel.basic_publish(x, "usd", b"1.00", PERSISTENT)
    channel.basic_publish(x, "eur", b"1.08", PERSISTENT)  # replaces 1.07
    return x


def test_exchange_object_counts_and_retained_lists_and_clears(api: httpx.Client,
                                                              channel: Any) -> None:
    x = _lvc(channel)
    info = api.get(f"/api/exchanges/%2F/{x}").json()
    assert info["type"] == "x-lvc" and info["retained"] == {"messages": 2, "bytes": 8}
    assert "retained" not in api.get("/api/exchanges/%2F/amq.direct").json()
    listed = [e for e in api.get("/api/exchanges/%2F").json() if e["name"] == x]
    assert listed[0]["retained"] == {"messages": 2, "bytes": 8}
    items = api.get(f"/api/exchanges/%2F/{x}/retained").json()
    assert [(m["key"], m["payload"], m["stored"]) for m in items] == [
        ("usd", "1.00", True), ("eur", "1.08", True)]
    one = api.get(f"/api/exchanges/%2F/{x}/retained/eur").json()
    assert [m["payload"] for m in one] == ["1.08"]
    assert api.get(f"/api/exchanges/%2F/{x}/retained/gbp").status_code == 404
    r = api.delete(f"/api/exchanges/%2F/{x}/retained/eur")
    assert r.status_code == 200 and r.json() == {"removed": 1}
    assert api.get(f"/api/exchanges/%2F/{x}").json()["retained"] == {"messages": 1, "bytes": 4}
    # a binding made now gets nothing for the cleared key, the value for the other
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q, x, "eur")
    channel.queue_bind(q, x, "usd")
    channel.basic_publish("", q, b"marker")
    got = []
    for _ in range(2):
        m, _p, body = channel.basic_get(q, auto_ack=True)
        assert m is not None
        got.append(body)
    assert got == [b"1.00", b"marker"]
    assert api.delete(f"/api/exchanges/%2F/{x}/retained").json() == {"removed": 1}
    assert api.get(f"/api/exchanges/%2F/{x}/retained").json() == []
    channel.exchange_delete(x)


def test_retained_on_other_types_and_missing_exchanges(api: httpx.Client) -> None:
    r = api.get("/api/exchanges/%2F/amq.direct/retained")
    assert r.status_code == 400 and "retains nothing" in r.json()["reason"]
    assert api.delete("/api/exchanges/%2F/nope-no-such/retained").status_code == 404


def test_cli_retained_list_show_clear(admin_broker: AdminBroker, channel: Any) -> None:
    x = _lvc(channel)
    out = admin_broker.cli("retained", "list", x)
    assert out.returncode == 0, out.stderr
    assert "eur" in out.stdout and "1.08" in out.stdout and "2 messages" in out.stdout
    out = admin_broker.cli("retained", "list", x, "--json")
    assert [m["key"] for m in json.loads(out.stdout)] == ["usd", "eur"]
    out = admin_broker.cli("retained", "show", x, "usd")
    assert out.returncode == 0, out.stderr
    assert "key 'usd'" in out.stdout and "1.00" in out.stdout and "delivery_mode" in out.stdout
    out = admin_broker.cli("retained", "clear", x, "usd")
    assert out.returncode == 0, out.stderr
    assert "Cleared 1 retained message" in out.stdout
    out = admin_broker.cli("retained", "clear", x)
    assert "Cleared 1 retained message " in out.stdout
    out = admin_broker.cli("retained", "list", "amq.direct")
    assert out.returncode != 0 and "retains nothing" in out.stderr
    channel.exchange_delete(x)


def test_delivery_log_records_deliveries_from_the_retained_store(api: httpx.Client,
                                                                 channel: Any) -> None:
    x = qname("lvc-log")
    mid = qname("mid")
    channel.exchange_declare(x, "x-lvc")
    channel.basic_publish(x, "k", b"v", pika.BasicProperties(message_id=mid))
    q = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(q, x, "k", arguments={"x-publish-on-request": True})
    channel.queue_bind(q, x, "k", arguments={"x-publish-on-request": True})  # the request
    rows = api.get(f"/api/trace/{mid}").json()
    events = [(r["event"], r["queue"], r["reason"]) for r in rows]
    assert events[0][0] == "published"
    assert ("retained", q, "request") in events
    assert events.index(("retained", q, "request")) < events.index(("routed", q, None))
    channel.exchange_delete(x)


def test_retained_bodies_need_read_on_the_exchange(admin_broker: AdminBroker, api: httpx.Client,
                                                   channel: Any) -> None:
    """Retained messages are message content: listing them needs the user's AMQP read
    on the exchange (issue 22 item 4's rule), clearing them configure."""
    x = _lvc(channel)
    user = qname("noread")
    assert api.put(f"/api/users/{user}", json={"password": "pw",
                                               "tags": "monitoring"}).status_code == 201
    assert api.put(f"/api/permissions/%2F/{user}", json={
        "configure": "", "write": "", "read": ""}).status_code == 201
    try:
        with admin_broker.api(auth=(user, "pw")) as other:
            r = other.get(f"/api/exchanges/%2F/{x}/retained")
            assert r.status_code == 401 and "ACCESS_REFUSED" in r.json()["reason"]
            # a write is refused for the tag first (monitoring writes nothing)
            assert other.delete(f"/api/exchanges/%2F/{x}/retained",
                                headers={"content-type": "application/json"}
                                ).status_code == 403
        assert api.put(f"/api/permissions/%2F/{user}", json={
            "configure": "", "write": "", "read": ".*"}).status_code == 204
        with admin_broker.api(auth=(user, "pw")) as other:
            assert len(other.get(f"/api/exchanges/%2F/{x}/retained").json()) == 2
        assert api.get(f"/api/exchanges/%2F/{x}").json()["retained"]["messages"] == 2
    finally:
        api.delete(f"/api/users/{user}")
        channel.exchange_delete(x)


def test_retained_listing_is_capped_and_pages_on(admin_broker: AdminBroker, api: httpx.Client,
                                                 channel: Any) -> None:
    """A 2,500-key x-lvc: one listing gives at most the default 1,000 with the set's
    size and where to go on; the next call continues there, nothing skipped or
    repeated; RabbitMQ's page/page_size work too, and the CLI pages through them all
    (on the old code the listing was the whole set, built at once on the loop)."""
    x = qname("lvc-big")
    channel.exchange_declare(x, "x-lvc")
    for i in range(2500):
        channel.basic_publish(x, f"k{i:05d}", b"v")
    first = api.get(f"/api/exchanges/%2F/{x}/retained")
    assert len(first.json()) == 1000
    assert first.headers["x-total-count"] == "2500"
    assert first.headers["x-next-offset"] == "1000"
    nxt = api.get(f"/api/exchanges/%2F/{x}/retained", params={"offset": 1000, "limit": 2000})
    assert [m["key"] for m in nxt.json()] == [f"k{i:05d}" for i in range(1000, 2500)]
    assert "x-next-offset" not in nxt.headers
    page = api.get(f"/api/exchanges/%2F/{x}/retained",
                   params={"page": 3, "page_size": 500}).json()
    assert (page["total_count"], page["page_count"], page["item_count"]) == (2500, 5, 500)
    assert page["items"][0]["key"] == "k01000"
    assert api.get(f"/api/exchanges/%2F/{x}/retained",
                   params={"limit": 10_001}).status_code == 400
    out = admin_broker.cli("retained", "list", x, "--json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == 2500
    out = admin_broker.cli("retained", "list", x, "-n", "3")
    assert "3 messages" in out.stdout and "(of 2500)" in out.stdout
    channel.exchange_delete(x)


def test_retained_listing_stops_at_the_byte_cap(api: httpx.Client, channel: Any) -> None:
    """20 keys of 1 MiB: a listing stops at the 16 MiB cap (admin_peek_max_bytes),
    says so, and the next offset shows the rest."""
    x = qname("lvc-fat")
    channel.exchange_declare(x, "x-lvc")
    for i in range(20):
        channel.basic_publish(x, f"k{i:02d}", b"x" * (1024 * 1024))
    r = api.get(f"/api/exchanges/%2F/{x}/retained")
    got = [m["key"] for m in r.json()]
    assert 0 < len(got) < 20 and r.headers["x-max-bytes-reached"] == "true"
    rest = api.get(f"/api/exchanges/%2F/{x}/retained",
                   params={"offset": r.headers["x-next-offset"]}).json()
    assert got + [m["key"] for m in rest] == [f"k{i:02d}" for i in range(20)]
    channel.exchange_delete(x)
