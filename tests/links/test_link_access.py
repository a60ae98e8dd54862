"""Links act as the user who defined them (issue 33, items 1 and 11): a tenant's
shovel or federation upstream reaches no vhost the tenant cannot, connects as
the tenant (never a silent ``guest``), stops when the tenant's permissions go;
links are limited per vhost and per user; a shovel feeding its own source
forwards each message once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from amqplite.links import access as A
from amqplite.links import config
from amqplite.links.shovel import outgoing
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.methods import BasicDeliver
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for

ALICE = ("alice", "alice-secret")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[AdminBroker]:
    """A broker with tenant ``alice`` (policymaker, permissions in ``tenantA`` only)."""
    b = start_admin_broker(tmp_path / "b")
    with b.api() as api:
        assert api.put("/api/users/alice", json={"password": ALICE[1],
                                                 "tags": "policymaker"}).status_code == 201
        assert api.put("/api/vhosts/tenantA").status_code == 201
        assert api.put("/api/permissions/tenantA/alice", json={
            "configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    yield b
    b.proc.stop()


def publish(b: AdminBroker, queue: str, n: int, vhost: str = "/",
            auth: tuple[str, str] = ("guest", "guest")) -> None:
    params = pika.URLParameters(b.amqp_url)
    params.virtual_host = vhost
    params.credentials = pika.PlainCredentials(*auth)
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, b"m-%d" % i, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def queue_total(api: httpx.Client, vhost: str, queue: str) -> int:
    q = api.get(f"/api/queues/{vhost}/{queue}").json()
    return int(q.get("messages_ready", 0)) + int(q.get("messages_unacknowledged", 0))


def shovel_row(api: httpx.Client, name: str) -> dict[str, Any]:
    rows = [r for r in api.get("/api/shovels").json() if r["name"] == name]
    return rows[0] if rows else {}


def test_a_tenant_cannot_reach_another_vhost(broker: AdminBroker) -> None:
    """Alice's three reproductions (steal from ``/``, forge into ``/``, federate from
    ``/``) and a guest login from loopback are refused at PUT with 403 naming the
    vhost or the user; nothing moves and nothing is declared in ``/``."""
    publish(broker, "payroll", 5)
    steal = {"src-uri": "amqp:///%2F", "src-queue": "payroll",
             "dest-uri": "amqp:///tenantA", "dest-queue": "loot"}
    forge = {"src-uri": "amqp:///tenantA", "src-queue": "mine",
             "dest-uri": "amqp:///%2F", "dest-queue": "payroll"}
    with broker.api(ALICE) as api:
        assert api.get("/api/queues/%2F/payroll").status_code == 401
        for name, value in (("steal", steal), ("forge", forge)):
            r = api.put(f"/api/parameters/shovel/tenantA/{name}", json={"value": value})
            assert r.status_code == 403, r.text
            assert "vhost '/'" in r.json()["reason"] and "alice" in r.json()["reason"]
        r = api.put("/api/parameters/federation-upstream/tenantA/up",
                    json={"value": {"uri": "amqp:///%2F", "exchange": "amq.topic"}})
        assert r.status_code == 403 and "vhost '/'" in r.json()["reason"], r.text
        r = api.put("/api/parameters/shovel/tenantA/as-guest", json={"value": {
            **steal, "src-uri": "amqp://guest:guest@/%2F"}})
        assert r.status_code == 403 and "'guest'" in r.json()["reason"], r.text
        r = api.put("/api/parameters/shovel/tenantA/as-guest2", json={"value": {
            **steal, "src-uri": "amqp://guest:guest@127.0.0.1/%2F"}})
        assert r.status_code == 403 and "loopback" in r.json()["reason"], r.text
    with broker.api() as api:
        assert api.get("/api/parameters").json() == []
        assert queue_total(api, "%2F", "payroll") == 5
        assert not [q for q in api.get("/api/queues/%2F").json()
                    if q["name"].startswith("federation:")]


def test_a_tenant_link_cannot_log_in_as_guest_by_a_loopback_alias(broker: AdminBroker) -> None:
    """``127.1`` is not a loopback name the PUT can see, but it connects to loopback,
    where guest passes: the link refuses that address before logging in."""
    publish(broker, "payroll", 5)
    with broker.api(ALICE) as api:
        r = api.put("/api/parameters/shovel/tenantA/alias", json={"value": {
            "src-uri": f"amqp://guest:guest@127.1:{broker.proc.port}/%2F",
            "src-queue": "payroll", "dest-uri": "amqp:///tenantA", "dest-queue": "loot"}})
        assert r.status_code == 201, r.text
        row = wait_for(lambda: (shovel_row(api, "alias").get("reason") or None), 20,
                       what="the shovel to fail")
        assert "loopback only" in row and "guest" in row, row
    with broker.api() as api:
        assert queue_total(api, "%2F", "payroll") == 5


def test_links_connect_as_their_definer_and_stop_when_it_loses_access(
        broker: AdminBroker) -> None:
    """A host-less link of a permitted user connects as that user (the API shows
    alice, not guest), keeps that user across a restart, stops with a reason when
    her permission is revoked, and runs again when it is granted back."""
    publish(broker, "in", 3, vhost="tenantA", auth=ALICE)
    with broker.api(ALICE) as api:
        r = api.put("/api/parameters/shovel/tenantA/move", json={"value": {
            "src-uri": "amqp:///tenantA", "src-queue": "in",
            "dest-uri": "amqp:///tenantA", "dest-queue": "out"}})
        assert r.status_code == 201, r.text
    with broker.api() as api:
        wait_for(lambda: shovel_row(api, "move").get("state") == "running", 20,
                 what="the shovel to run")
        wait_for(lambda: queue_total(api, "tenantA", "out") == 3, 20, what="3 moved")

        def link_users() -> list[str]:
            return sorted(c["user"] for c in api.get("/api/connections").json()
                          if (c.get("user_provided_name") or "").startswith("Shovel move"))

        assert link_users() == ["alice", "alice"]
    broker.proc.stop()
    broker.proc.start()
    wait_for(lambda: _answers(broker), 30, what="the admin API after a restart")
    with broker.api() as api:
        wait_for(lambda: link_users() == ["alice", "alice"], 20,
                 what="the shovel to connect as alice again")
        assert api.delete("/api/permissions/tenantA/alice").status_code == 204
        wait_for(lambda: shovel_row(api, "move").get("state") == "terminated", 20,
                 what="the shovel to stop")
        reason = shovel_row(api, "move")["reason"]
        assert "alice" in reason and "tenantA" in reason, reason
        wait_for(lambda: link_users() == [], 20, what="its connections to close")
        publish(broker, "in", 2, vhost="tenantA")
        assert queue_total(api, "tenantA", "in") == 2  # nothing moves meanwhile
        assert api.put("/api/permissions/tenantA/alice", json={
            "configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
        wait_for(lambda: queue_total(api, "tenantA", "out") == 5, 20,
                 what="the shovel to run again")
        assert api.delete("/api/users/alice").status_code == 204
        wait_for(lambda: "does not exist" in (shovel_row(api, "move").get("reason") or ""),
                 20, what="the shovel to stop for its deleted user")


def _answers(b: AdminBroker) -> bool:
    try:
        return httpx.get(b.admin_url + "/api/overview", auth=("guest", "guest"),
                         timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_federation_link_acts_as_its_definer(broker: AdminBroker) -> None:
    """Alice's upstream ``amqp:///tenantB`` (she may use tenantB) federates into her
    tenantA exchange: both ends connect as alice, messages follow; revoking her
    tenantB permission stops the link with a reason naming tenantB."""
    with broker.api() as api:
        assert api.put("/api/vhosts/tenantB").status_code == 201
        assert api.put("/api/permissions/tenantB/alice", json={
            "configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
        assert api.put("/api/exchanges/tenantA/fed.x", json={"type": "fanout"}
                       ).status_code == 201
        assert api.put("/api/queues/tenantA/got", json={}).status_code == 201
        assert api.post("/api/bindings/tenantA/e/fed.x/q/got", json={}).status_code == 201
    with broker.api(ALICE) as api:
        r = api.put("/api/parameters/federation-upstream/tenantA/up", json={"value": {
            "uri": "amqp:///tenantB", "reconnect-delay": 0.2}})
        assert r.status_code == 201, r.text
        assert api.put("/api/policies/tenantA/federate", json={
            "pattern": r"^fed\.", "apply-to": "exchanges",
            "definition": {"federation-upstream": "up"}}).status_code == 201
    with broker.api() as api:
        def link() -> dict[str, Any]:
            rows = api.get("/api/federation-links").json()
            return rows[0] if rows else {}

        wait_for(lambda: link().get("status") == "running", 20, what="the link to run")
        users = [c["user"] for c in api.get("/api/connections").json()
                 if (c.get("user_provided_name") or "").startswith("Federation link")]
        assert users == ["alice", "alice"]
        params = pika.URLParameters(broker.amqp_url)
        params.virtual_host = "tenantB"
        params.credentials = pika.PlainCredentials(*ALICE)
        conn = pika.BlockingConnection(params)
        try:
            conn.channel().basic_publish("fed.x", "", b"hello")
        finally:
            conn.close()
        wait_for(lambda: queue_total(api, "tenantA", "got") == 1, 20,
                 what="the message to cross the link")
        assert api.delete("/api/permissions/tenantB/alice").status_code == 204
        wait_for(lambda: link().get("status") == "error", 20, what="the link to stop")
        assert "tenantB" in link()["error"] and "alice" in link()["error"]


def test_a_re_import_keeps_the_definer_and_an_import_defines_as_the_importer(
        broker: AdminBroker) -> None:
    with broker.api(ALICE) as api:
        assert api.put("/api/parameters/shovel/tenantA/mine", json={"value": {
            "src-uri": "amqp:///tenantA", "src-queue": "a", "dest-uri": "amqp:///tenantA",
            "dest-queue": "b"}}).status_code == 201
    with broker.api() as api:
        (row,) = [p for p in api.get("/api/definitions").json()["parameters"]
                  if p["name"] == "mine"]
        assert row["defined_by"] == "alice"
        assert api.delete("/api/parameters/shovel/tenantA/mine").status_code == 204
        plain = {k: v for k, v in row.items() if k != "defined_by"}
        plain["name"] = "theirs"
        r = api.post("/api/definitions", json={"parameters": [row, plain]})
        assert r.status_code == 204, r.text
        got = {p["name"]: p.get("defined_by")
               for p in api.get("/api/definitions").json()["parameters"]}
        assert got == {"mine": "alice", "theirs": "guest"}


def test_link_limits_refuse_with_the_limit_named(tmp_path: Path) -> None:
    b = start_admin_broker(tmp_path / "b", env={"AMQPLITE_MAX_LINKS_PER_VHOST": "2",
                                               "AMQPLITE_MAX_LINKS_PER_USER": "3"})
    try:
        value = {"src-uri": "amqp://127.0.0.1:1", "src-queue": "q",
                 "dest-uri": "amqp://127.0.0.1:1", "dest-queue": "d"}
        with b.api() as api:
            assert api.put("/api/vhosts/v2").status_code == 201
            for n in ("a", "b"):
                assert api.put(f"/api/parameters/shovel/%2F/{n}",
                               json={"value": value}).status_code == 201
            assert api.put("/api/parameters/shovel/%2F/a",  # a replacement fits
                           json={"value": value}).status_code == 204
            r = api.put("/api/parameters/federation-upstream/%2F/c",
                        json={"value": {"uri": "amqp://127.0.0.1:1"}})
            assert r.status_code == 403, r.text
            assert "max_links_per_vhost = 2" in r.json()["reason"]
            assert api.put("/api/parameters/shovel/v2/c", json={"value": value}
                           ).status_code == 201
            r = api.put("/api/parameters/shovel/v2/d", json={"value": value})
            assert r.status_code == 403 and "max_links_per_user = 3" in r.json()["reason"]
            assert len(api.get("/api/parameters").json()) == 3
            # one upstream, a policy over 4 exchanges: 2 links run, not 4
            assert api.delete("/api/parameters/shovel/v2/c").status_code == 204
            assert api.put("/api/parameters/federation-upstream/v2/up", json={"value": {
                "uri": "amqp://127.0.0.1:1"}}).status_code == 201
            for x in ("fed.a", "fed.b", "fed.c", "fed.d"):
                assert api.put(f"/api/exchanges/v2/{x}", json={"type": "fanout"}
                               ).status_code == 201
            assert api.put("/api/policies/v2/federate", json={
                "pattern": r"^fed\.", "apply-to": "exchanges",
                "definition": {"federation-upstream": "up"}}).status_code == 201
            wait_for(lambda: len(api.get("/api/federation-links/v2").json()) == 2, 20,
                     what="two federation links")
            assert sorted(r["exchange"] for r in api.get("/api/federation-links/v2").json()
                          ) == ["fed.a", "fed.b"]
    finally:
        b.proc.stop()


def test_a_shovel_feeding_its_own_source_forwards_each_message_once(
        tmp_path: Path) -> None:
    """Queue -> the exchange that feeds it, with forward headers: each message is
    forwarded once, then dropped when it comes round (was a storm of thousands of
    forwards with headers growing to 86 KB)."""
    b = start_admin_broker(tmp_path / "b")
    try:
        with b.api() as api:
            assert api.put("/api/exchanges/%2F/feed", json={"type": "fanout"}
                           ).status_code == 201
            assert api.put("/api/queues/%2F/loop", json={"durable": True}).status_code == 201
            assert api.post("/api/bindings/%2F/e/feed/q/loop", json={}).status_code == 201
            r = api.put("/api/parameters/shovel/%2F/self", json={"value": {
                "src-uri": "amqp://", "src-queue": "loop", "dest-uri": "amqp://",
                "dest-exchange": "feed", "dest-add-forward-headers": True}})
            assert r.status_code == 201, r.text
            wait_for(lambda: shovel_row(api, "self").get("state") == "running", 20,
                     what="the shovel to run")
            publish(b, "loop", 3)
            wait_for(lambda: shovel_row(api, "self").get("forwarded") == 3
                     and queue_total(api, "%2F", "loop") == 0, 20,
                     what="3 forwards, then the loop settled")
            assert shovel_row(api, "self")["forwarded"] == 3
    finally:
        b.proc.stop()


# ------------------------------------------------------------------ pure rules
def test_outgoing_drops_what_this_shovel_already_forwarded() -> None:
    spec = config.parse({"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://",
                         "dest-exchange": "x", "dest-add-forward-headers": True})
    d = BasicDeliver("t", 1, False, "x", "rk")
    props = encode_properties(BasicProperties(headers=FieldTable({})))
    out = outgoing(spec, "s", "/", d, props, "amqp://", "amqp://", node="n1")
    assert out is not None
    again = outgoing(spec, "s", "/", d, out[2], "amqp://", "amqp://", node="n1")
    assert again is None
    # the same name on another node, or another shovel here, still forwards
    assert outgoing(spec, "s", "/", d, out[2], "", "", node="n2") is not None
    other = outgoing(spec, "t", "/", d, out[2], "", "", node="n1")
    assert other is not None
    assert len(decode_properties(other[2]).headers["x-shovelled"]) == 2


def test_what_a_shovel_needs_of_its_definer() -> None:
    spec = config.parse({"src-uri": ["amqp:///a", "amqp://h/b"], "src-queue": "q",
                         "dest-uri": "amqp://u:p@/c", "dest-queue": "d"})
    needs = A.shovel_needs(spec, lambda vh, q: False)
    assert needs == [A.Need("src-uri", "a"), A.Need("src-uri", "a", "configure", "queue", "q"),
                     A.Need("src-uri", "a", "read", "queue", "q")]
    spec = config.parse({"src-uri": "amqp://", "src-exchange": "x", "dest-uri": "amqp://",
                         "dest-exchange": "y"})
    got = {(n.perm, n.kind, n.name) for n in A.shovel_needs(spec, lambda vh, q: True)}
    assert ("read", "exchange", "x") in got and ("write", "exchange", "y") in got


def test_limit_refusal_counts_links_only() -> None:
    owners: list[tuple[tuple[str, str, str], str | None]] = [
        (("shovel", "v", "a"), "u"), (("federation-upstream-set", "v", "s"), "u"),
        (("federation-upstream", "w", "b"), "u")]
    assert A.limit_refusal(owners, ("shovel", "v", "c"), "x", per_vhost=2,
                           per_user=0) is None
    assert "max_links_per_vhost = 1" in str(A.limit_refusal(
        owners, ("shovel", "v", "c"), "x", per_vhost=1, per_user=0))
    assert "max_links_per_user = 2" in str(A.limit_refusal(
        owners, ("shovel", "z", "c"), "u", per_vhost=0, per_user=2))
    assert A.limit_refusal(owners, ("shovel", "v", "a"), "u", per_vhost=1,
                           per_user=2) is None  # a replacement


def test_loopback_login_is_refused_to_a_link() -> None:
    for uri in ("amqp://guest:guest@/", "amqp://guest:guest@localhost",
                "amqp://guest:guest@[::1]:5672/x", "amqp://guest:guest@127.0.0.9"):
        assert A.loopback_login("src-uri", [uri], ["guest"], "alice") is not None, uri
    for uri in ("amqp://guest:guest@example.com", "amqp://bob:pw@/", "amqp:///"):
        assert A.loopback_login("src-uri", [uri], ["guest"], "alice") is None, uri
