"""Topic permissions (RabbitMQ's topic authorisation) through the real API and pika:
the API's shapes and refusals, the publish and bind checks with RabbitMQ 3.10.8's
texts, the variables, and durability across restarts."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from conformance.test_topic_permissions import attempt
from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.admin.test_admin_writes import refused, restart

TP = "/api/topic-permissions"


def uid() -> str:
    return uuid.uuid4().hex[:8]


class Tenant:
    """A user of its own with full permissions on ``/``, for one test."""

    def __init__(self, b: AdminBroker, api: httpx.Client, name: str | None = None) -> None:
        self.b, self.api = b, api
        self.name = name or f"tp-{uid()}"
        self.password = "pw-" + uid()
        assert api.put(f"/api/users/{self.name}",
                       json={"password": self.password, "tags": ""}).status_code == 201
        assert api.put(f"/api/permissions/%2F/{self.name}",
                       json={"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201

    def grant(self, exchange: str, write: str, read: str, vhost: str = "%2F") -> int:
        r = self.api.put(f"{TP}/{vhost}/{self.name}",
                         json={"exchange": exchange, "write": write, "read": read})
        assert r.status_code in (201, 204), r.text
        return r.status_code

    def connect(self) -> pika.BlockingConnection:
        params = pika.URLParameters(self.b.amqp_url)
        params.credentials = pika.PlainCredentials(self.name, self.password)
        return pika.BlockingConnection(params)

    def attempt(self, step: Callable[[Any], None]) -> tuple[int, str] | None:
        """The channel error ``step`` met on a fresh connection as this user, or None."""
        return attempt(step, self.connect)


@pytest.fixture
def tenant(admin_broker: AdminBroker, api: httpx.Client) -> Iterator[Tenant]:
    t = Tenant(admin_broker, api)
    yield t
    api.delete(f"/api/users/{t.name}")


def publish(exchange: str, key: str) -> Callable[[Any], None]:
    return lambda ch: ch.basic_publish(exchange, key, b"m")


def bind(exchange: str, key: str, *, unbind: bool = False) -> Callable[[Any], None]:
    def step(ch: Any) -> None:
        q = ch.queue_declare("", exclusive=True).method.queue
        (ch.queue_unbind if unbind else ch.queue_bind)(q, exchange, key)
    return step


def text(key: str, exchange: str, user: str, vhost: str = "/") -> str:
    return (f"ACCESS_REFUSED - access to topic '{key}' in exchange '{exchange}' in vhost "
            f"'{vhost}' refused for user '{user}'")


# ------------------------------------------------------------------- the API
def test_api_shapes_as_rabbitmq(api: httpx.Client, tenant: Tenant) -> None:
    """PUT creates (201) or replaces (204) one exchange's permission; the four GETs list
    them in RabbitMQ's shape; DELETE ?exchange= clears one, DELETE all; 404 after."""
    u = tenant.name
    assert tenant.grant("amq.topic", "^a", "^b") == 201
    assert tenant.grant("amq.topic", "^a\\.", "^b") == 204
    assert tenant.grant(f"x-{u}", "", "^{username}$") == 201
    mine = [{"user": u, "vhost": "/", "exchange": "amq.topic", "write": "^a\\.", "read": "^b"},
            {"user": u, "vhost": "/", "exchange": f"x-{u}", "write": "", "read": "^{username}$"}]
    assert api.get(f"{TP}/%2F/{u}").json() == mine
    assert api.get(f"/api/users/{u}/topic-permissions").json() == mine
    assert [p for p in api.get(TP).json() if p["user"] == u] == mine
    assert [p for p in api.get("/api/vhosts/%2F/topic-permissions").json()
            if p["user"] == u] == mine
    assert api.delete(f"{TP}/%2F/{u}", params={"exchange": "amq.topic"}).status_code == 204
    assert api.get(f"{TP}/%2F/{u}").json() == mine[1:]
    assert api.delete(f"{TP}/%2F/{u}", params={"exchange": "amq.topic"}).status_code == 404
    assert api.delete(f"{TP}/%2F/{u}").status_code == 204
    assert api.get(f"{TP}/%2F/{u}").status_code == 404
    assert api.delete(f"{TP}/%2F/{u}").status_code == 404
    assert api.get("/api/users/nobody-here/topic-permissions").status_code == 404
    assert api.get("/api/vhosts/no-such-vh/topic-permissions").status_code == 404


def test_api_refusals_name_the_field(api: httpx.Client, tenant: Tenant) -> None:
    """Bad input is a 400 naming the field and changes nothing; an unknown user or vhost
    is a 400 as in RabbitMQ ("vhost_or_user_not_found")."""
    url = f"{TP}/%2F/{tenant.name}"
    refused(api.put(url, json={"write": "^a", "read": ""}), "exchange")
    refused(api.put(url, json={"exchange": "amq.topic", "write": "(", "read": ""}), "write")
    refused(api.put(url, json={"exchange": "amq.topic", "write": "", "read": "(?=x)"}), "read")
    refused(api.put(url, json={"exchange": 5, "write": "", "read": ""}), "exchange")
    refused(api.put(url, json={"exchange": "x" * 256, "write": "", "read": ""}), "exchange")
    refused(api.put(url, json={"exchange": "amq.topic", "write": ["a"], "read": ""}), "write")
    assert api.get(url).status_code == 404
    r = api.put(f"{TP}/%2F/nobody-{uid()}", json={"exchange": "amq.topic"})
    assert r.status_code == 400 and "no user" in r.json()["reason"], r.text
    r = api.put(f"{TP}/no-vh-{uid()}/{tenant.name}", json={"exchange": "amq.topic"})
    assert r.status_code == 400 and "no vhost" in r.json()["reason"], r.text
    assert api.get(url).status_code == 404
    # only an administrator sets or reads them
    assert api.put(url, json={"exchange": "amq.topic"}, auth=("monitor", "monitor-secret")
                   ).status_code in (401, 403)
    assert api.get(TP, auth=("monitor", "monitor-secret")).status_code in (401, 403)


# ---------------------------------------------------------------- enforcement
def test_publish_and_bind_checked_with_rabbitmqs_text(tenant: Tenant) -> None:
    """Publish needs the routing key to match write; queue.bind, queue.unbind and
    exchange.bind from a topic exchange need read; 403 with RabbitMQ 3.10.8's text."""
    u = tenant.name
    tenant.grant("amq.topic", "^a", "^b")
    assert tenant.attempt(publish("amq.topic", "x.y")) == (403, text("x.y", "amq.topic", u))
    assert tenant.attempt(publish("amq.topic", "a.y")) is None
    assert tenant.attempt(bind("amq.topic", "x.#")) == (403, text("x.#", "amq.topic", u))
    assert tenant.attempt(bind("amq.topic", "b.*")) is None
    assert tenant.attempt(bind("amq.topic", "x.y", unbind=True)) == (
        403, text("x.y", "amq.topic", u))

    dst = f"dst-{uid()}"

    def xbind(key: str) -> Callable[[Any], None]:
        def step(ch: Any) -> None:
            ch.exchange_declare(dst, "fanout", auto_delete=True)
            ch.exchange_bind(dst, "amq.topic", key)
        return step
    assert tenant.attempt(xbind("q.r")) == (403, text("q.r", "amq.topic", u))
    assert tenant.attempt(xbind("b.r")) is None


def test_only_topic_exchanges_with_a_permission_are_checked(tenant: Tenant) -> None:
    """A topic exchange without a permission for the user, and a non-topic exchange
    with one, pass every key (RabbitMQ checks topic exchanges only)."""
    tenant.grant("amq.topic", "^a", "^b")
    tenant.grant("amq.direct", "^a", "^b")
    assert tenant.attempt(publish("amq.direct", "zzz")) is None
    assert tenant.attempt(bind("amq.direct", "zzz")) is None
    other = f"t-{uid()}"
    assert tenant.attempt(lambda ch: ch.exchange_declare(other, "topic", auto_delete=True)
                          ) is None
    assert tenant.attempt(bind(other, "zzz")) is None
    # an empty expression is ^$ (RabbitMQ 3.10.8): a non-empty key is refused
    tenant.grant("amq.topic", "", ".*")
    assert tenant.attempt(publish("amq.topic", "a")) == (
        403, text("a", "amq.topic", tenant.name))


def test_variables_are_expanded_and_escaped(api: httpx.Client, admin_broker: AdminBroker
                                            ) -> None:
    """{username} and {vhost} become the session's values, escaped: a user named
    ``a.b-…`` may use its own name but not ``aXb-…``."""
    t = Tenant(admin_broker, api, f"a.b-{uid()}")
    try:
        t.grant("amq.topic", "^{username}\\.", "^{vhost}")
        assert t.attempt(publish("amq.topic", f"{t.name}.x")) is None
        lookalike = "aXb" + t.name[3:] + ".x"
        assert t.attempt(publish("amq.topic", lookalike)) == (
            403, text(lookalike, "amq.topic", t.name))
        assert t.attempt(bind("amq.topic", "/.x")) is None
        assert t.attempt(bind("amq.topic", "x./")) == (403, text("x./", "amq.topic", t.name))
    finally:
        api.delete(f"/api/users/{t.name}")


def test_change_holds_for_open_channels(tenant: Tenant, api: httpx.Client) -> None:
    """A grant or a clear holds for the next publish of an open channel."""
    conn = tenant.connect()
    try:
        ch = conn.channel()
        ch.basic_publish("amq.topic", "x.y", b"1")
        ch.basic_qos(prefetch_count=0)
        tenant.grant("amq.topic", "^a", ".*")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.basic_publish("amq.topic", "x.y", b"2")
            ch.basic_qos(prefetch_count=0)
        assert exc.value.reply_code == 403
        assert api.delete(f"{TP}/%2F/{tenant.name}").status_code == 204
        ch = conn.channel()
        ch.basic_publish("amq.topic", "x.y", b"3")
        ch.basic_qos(prefetch_count=0)
    finally:
        conn.close()


# ----------------------------------------------------------------- durability
def test_durable_across_restarts_and_gone_with_user_or_vhost(tmp_path: Path) -> None:
    """Topic permissions survive a restart and still refuse; deleting the user or the
    vhost removes theirs, in memory and in the store; definitions carry them."""
    b = start_admin_broker(tmp_path / "d")
    try:
        with b.api() as api:
            t = Tenant(b, api, "keeper")
            gone = Tenant(b, api, "leaver")
            assert api.put("/api/vhosts/tpvh").status_code == 201
            for who in (t, gone):
                assert api.put(f"/api/permissions/tpvh/{who.name}", json={
                    "configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
                who.grant("amq.topic", "^a", "^b", vhost="tpvh")
            t.grant("amq.topic", "^a", "^b")
            gone.grant("amq.topic", "^a", "^b")
            assert api.delete("/api/users/leaver").status_code == 204
            assert api.delete("/api/vhosts/tpvh").status_code == 204
            exported = api.get("/api/definitions").json()["topic_permissions"]
            assert exported == [{"user": "keeper", "vhost": "/", "exchange": "amq.topic",
                                 "write": "^a", "read": "^b"}]
        restart(b)
        with b.api() as api:
            t.api = api
            assert api.get(TP).json() == exported
            assert t.attempt(publish("amq.topic", "x")) == (403, text("x", "amq.topic",
                                                                      "keeper"))
            assert t.attempt(publish("amq.topic", "a")) is None
            # a user and a vhost of the same names start with none
            assert api.put("/api/users/leaver", json={"password": "x"}).status_code == 201
            assert api.put("/api/vhosts/tpvh").status_code == 201
            assert api.get(f"{TP}/tpvh/keeper").status_code == 404
            assert api.get("/api/users/leaver/topic-permissions").json() == []
            # an import puts them back (and an export of it matches)
            r = api.post("/api/definitions", json={"topic_permissions": [
                {"user": "leaver", "vhost": "tpvh", "exchange": "t", "write": "w",
                 "read": "r"}]})
            assert r.status_code == 204, r.text
            bad = api.post("/api/definitions", json={"topic_permissions": [
                {"user": "leaver", "vhost": "tpvh", "exchange": "t", "write": "(",
                 "read": ""}]})
            refused(bad, "topic_permissions[0].write")
            assert api.delete(f"{TP}/%2F/keeper").status_code == 204
        restart(b)
        with b.api() as api:
            assert api.get(TP).json() == [{"user": "leaver", "vhost": "tpvh", "exchange": "t",
                                           "write": "w", "read": "r"}]
            assert t.attempt(publish("amq.topic", "x")) is None
    finally:
        b.proc.stop()


def test_failed_commit_changes_nothing(tmp_path: Path) -> None:
    """A PUT or DELETE whose commit fails answers 500 and memory is put back, so the API
    shows what a restart finds."""
    b = start_admin_broker(tmp_path / "d")
    try:
        with b.api() as api:
            t = Tenant(b, api, "tenant")
            t.grant("kept", "^k", "^k")
            db = b.proc.data_dir / "amqplite.db"
            # triggers (kept for the rest of the test: a failed submission's metadata
            # is written again later) refusing the rows these writes would change
            for i, (what, when) in enumerate((("INSERT", "NEW.exchange = 'new'"),
                                              ("INSERT", "NEW.write = 'x'"),
                                              ("UPDATE", "NEW.write = 'x'"),
                                              ("DELETE", "OLD.exchange = 'kept'"))):
                _exec(db, f"CREATE TRIGGER refuse_{i} BEFORE {what} ON "
                          f"topic_permissions WHEN {when} "
                          "BEGIN SELECT RAISE(ABORT, 'refused by test'); END")
            r = api.put(f"{TP}/%2F/tenant", json={"exchange": "new", "write": "n", "read": ""})
            assert r.status_code == 500, r.text
            r = api.put(f"{TP}/%2F/tenant", json={"exchange": "kept", "write": "x", "read": ""})
            assert r.status_code == 500, r.text
            assert api.delete(f"{TP}/%2F/tenant").status_code == 500
            kept = [{"user": "tenant", "vhost": "/", "exchange": "kept", "write": "^k",
                     "read": "^k"}]
            assert api.get(f"{TP}/%2F/tenant").json() == kept
            # other writes go on
            assert api.put(f"{TP}/%2F/tenant", json={"exchange": "other"}).status_code == 201
            kept.append({"user": "tenant", "vhost": "/", "exchange": "other", "write": "",
                         "read": ""})
        restart(b)
        with b.api() as api:
            assert api.get(f"{TP}/%2F/tenant").json() == kept
    finally:
        b.proc.stop()


def _exec(db: Path, sql: str) -> None:
    """SQL on the broker's real database file (a trigger that makes its commits fail,
    as test_admin_writes does)."""
    con = sqlite3.connect(db, timeout=30)
    try:
        con.execute(sql)
        con.commit()
    finally:
        con.close()


def test_answered_writes_survive_kill_9(tmp_path: Path) -> None:
    """A PUT or DELETE answered is committed: after SIGKILL the broker comes back with
    exactly what the API said, and refuses as before."""
    b = start_admin_broker(tmp_path / "d")
    try:
        with b.api() as api:
            t = Tenant(b, api, "crashy")
            t.grant("amq.topic", "^a", "^b")
            t.grant("gone", "x", "y")
            assert api.delete(f"{TP}/%2F/crashy", params={"exchange": "gone"}).status_code == 204
        b.proc.kill()
        restart(b)
        with b.api() as api:
            assert api.get(f"{TP}/%2F/crashy").json() == [
                {"user": "crashy", "vhost": "/", "exchange": "amq.topic", "write": "^a",
                 "read": "^b"}]
            t.api = api
            assert t.attempt(publish("amq.topic", "x")) == (403, text("x", "amq.topic",
                                                                      "crashy"))
    finally:
        b.proc.stop()
