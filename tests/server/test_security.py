"""Vhosts, users and permissions against a real broker process, with pika.

Users, vhosts and permissions are set up through the admin API, as an
operator would; refusals must carry RabbitMQ's reply codes and texts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker, ProbableAccessDeniedError

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for


def connect(b: AdminBroker, user: str = "guest", password: str = "guest",
            vhost: str = "/") -> pika.BlockingConnection:
    params = pika.ConnectionParameters("127.0.0.1", b.proc.port, vhost,
                                       pika.PlainCredentials(user, password),
                                       heartbeat=0, connection_attempts=1)
    return pika.BlockingConnection(params)


def ok(r: httpx.Response) -> httpx.Response:
    assert r.status_code < 300, r.text
    return r


def add_user(api: httpx.Client, name: str, vhost: str = "/", perms: tuple[str, str, str] | None
             = ("^app-.*", "^app-.*", "^app-.*"), tags: str = "") -> None:
    ok(api.put(f"/api/users/{name}", json={"password": "pw", "tags": tags}))
    if perms is not None:
        c, w, r = perms
        ok(api.put(f"/api/permissions/{quote(vhost)}/{name}",
                   json={"configure": c, "write": w, "read": r}))


def quote(v: str) -> str:
    return v.replace("/", "%2F")


def refused(fn: Any, *args: Any, **kw: Any) -> tuple[int, str]:
    with pytest.raises(ChannelClosedByBroker) as e:
        fn(*args, **kw)
    return e.value.reply_code, e.value.reply_text


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_admin_broker(tmp_path_factory.mktemp("security"))
    yield b
    b.proc.stop()


@pytest.fixture
def api(broker: AdminBroker) -> Iterator[httpx.Client]:
    with broker.api() as c:
        yield c


def test_limited_user_declares_its_names_only(broker: AdminBroker, api: httpx.Client) -> None:
    add_user(api, "limited")
    with connect(broker, "limited", "pw") as c:
        ch = c.channel()
        ch.queue_declare("app-orders")
        ch.exchange_declare("app-x", "direct")
        ch.queue_bind("app-orders", "app-x", "k")
        assert refused(ch.queue_declare, "billing") == (
            403, "ACCESS_REFUSED - access to queue 'billing' in vhost '/' refused "
                 "for user 'limited'")
        ch = c.channel()
        assert refused(ch.exchange_declare, "billing-x", "fanout") == (
            403, "ACCESS_REFUSED - access to exchange 'billing-x' in vhost '/' "
                 "refused for user 'limited'")
        ch = c.channel()
        ch.queue_delete("app-orders")
        ch.exchange_delete("app-x")


def test_publish_and_consume_need_write_and_read(broker: AdminBroker,
                                                  api: httpx.Client) -> None:
    add_user(api, "writer", perms=("", "^app-in$", ""))
    with connect(broker) as admin:
        ach = admin.channel()
        ach.exchange_declare("app-in", "fanout")
        ach.queue_declare("app-sink")
        ach.queue_bind("app-sink", "app-in")
    with connect(broker, "writer", "pw") as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("app-in", "", b"allowed")
        assert refused(ch.basic_publish, "", "app-sink", b"refused") == (  # amq.default
            403, "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' "
                 "refused for user 'writer'")
        ch = c.channel()
        assert refused(ch.basic_consume, "app-sink", lambda *a: None) == (
            403, "ACCESS_REFUSED - access to queue 'app-sink' in vhost '/' refused for "
                 "user 'writer'")
        ch = c.channel()
        assert refused(ch.basic_get, "app-sink")[0] == 403
    with connect(broker) as admin:
        ach = admin.channel()
        m = ach.basic_get("app-sink", auto_ack=True)
        assert m[2] == b"allowed" and ach.basic_get("app-sink")[0] is None
        ach.queue_delete("app-sink")
        ach.exchange_delete("app-in")


def test_no_permission_on_vhost_is_530(broker: AdminBroker, api: httpx.Client) -> None:
    add_user(api, "nobody-here", perms=None)
    with pytest.raises((ConnectionClosedByBroker, ProbableAccessDeniedError)) as e:
        connect(broker, "nobody-here", "pw")
    assert "NOT_ALLOWED - access to vhost '/' refused for user 'nobody-here'" in str(e.value)


def test_wrong_password_is_refused_slowly_and_logged(broker: AdminBroker,
                                                     api: httpx.Client) -> None:
    add_user(api, "slow")
    t0 = time.monotonic()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(broker, "slow", "wrong")
    assert time.monotonic() - t0 >= 0.9
    assert "login failed for user 'slow'" in broker.proc.log()


def test_permission_change_applies_to_open_connections(broker: AdminBroker,
                                                       api: httpx.Client) -> None:
    add_user(api, "changing")
    with connect(broker, "changing", "pw") as c:
        ch = c.channel()
        assert refused(ch.queue_declare, "wide-q")[0] == 403
        ok(api.put("/api/permissions/%2F/changing",
                   json={"configure": ".*", "write": ".*", "read": ".*"}))
        ch = c.channel()
        ch.queue_declare("wide-q")
        ch.queue_delete("wide-q")


def test_vhosts_are_isolated(broker: AdminBroker, api: httpx.Client) -> None:
    assert ok(api.put("/api/vhosts/iso", json={"description": "isolated"})).status_code == 201
    # the creator got full permissions, as in RabbitMQ
    assert api.get("/api/permissions/iso/guest").json()["configure"] == ".*"
    with connect(broker) as a, connect(broker, vhost="iso") as b:
        ca, cb = a.channel(), b.channel()
        for ch in (ca, cb):
            ch.queue_declare("same-name")
        ca.basic_publish("", "same-name", b"in /")
        cb.basic_publish("", "same-name", b"in iso")
        time.sleep(0.2)
        assert ca.basic_get("same-name", auto_ack=True)[2] == b"in /"
        assert cb.basic_get("same-name", auto_ack=True)[2] == b"in iso"
        assert ca.basic_get("same-name")[0] is None
        ca.queue_delete("same-name")
    names = {v["name"] for v in api.get("/api/vhosts").json()}
    assert {"/", "iso"} <= names
    ok(api.delete("/api/vhosts/iso"))


def test_deleting_a_vhost_closes_its_connections(broker: AdminBroker,
                                                 api: httpx.Client) -> None:
    ok(api.put("/api/vhosts/doomed", json={}))
    c = connect(broker, vhost="doomed")
    ch = c.channel()
    ch.queue_declare("doomed-q", durable=True)
    ok(api.delete("/api/vhosts/doomed"))
    with pytest.raises(ConnectionClosedByBroker) as e:
        c.process_data_events(time_limit=2)
        ch.queue_declare("doomed-q", passive=True)
    assert (e.value.reply_code, e.value.reply_text) == (
        320, "CONNECTION_FORCED - vhost 'doomed' is deleted")
    assert api.get("/api/vhosts/doomed").status_code == 404
    assert all(q["vhost"] != "doomed" for q in api.get("/api/queues").json())
    with pytest.raises((ConnectionClosedByBroker, ProbableAccessDeniedError)):
        connect(broker, vhost="doomed")


def test_api_tags(broker: AdminBroker, api: httpx.Client) -> None:
    add_user(api, "plain", tags="")
    add_user(api, "pm", tags="policymaker")
    add_user(api, "mgmt", tags="management", perms=None)
    with broker.api(auth=("plain", "pw")) as c:
        assert c.get("/api/overview").status_code == 401
    with broker.api(auth=("pm", "pw")) as c:
        assert c.put("/api/policies/%2F/pm-pol",
                     json={"pattern": "^pm-", "definition": {"max-length": 1}}).status_code == 201
        # a declare acts as the user (RabbitMQ 3.10.8): its configure permission decides
        assert c.put("/api/queues/%2F/pm-q", json={}).status_code == 401
        assert c.put("/api/queues/%2F/app-pm-q", json={}).status_code == 201
        assert c.delete("/api/queues/%2F/app-pm-q").status_code == 204
        assert c.get("/api/users").status_code == 403
        assert c.delete("/api/policies/%2F/pm-pol").status_code == 204
    with broker.api(auth=("mgmt", "pw")) as c:
        assert c.get("/api/whoami").json()["tags"] == ["management"]
        assert c.get("/api/queues").json() == []  # no vhost of its own
        assert c.get("/api/queues/%2F").status_code == 401


def test_restart_keeps_users_vhosts_permissions(tmp_path: Path) -> None:
    b = start_admin_broker(tmp_path / "data")
    try:
        with b.api() as api:
            ok(api.put("/api/vhosts/kept", json={"description": "d"}))
            add_user(api, "keeper", vhost="kept", perms=("^k", "^k", "^k"), tags="monitoring")
            ok(api.delete("/api/users/monitor"))  # a config user, deleted for good
            ok(api.put("/api/users/guest", json={"password": "changed",
                                                 "tags": "administrator"}))
    finally:
        b.proc.stop()
    b.proc.start()
    wait_for(lambda: _answers(b), 30, what="admin API")
    with b.api(auth=("guest", "changed")) as api:
        assert api.get("/api/vhosts/kept").json()["description"] == "d"
        assert api.get("/api/permissions/kept/keeper").json()["read"] == "^k"
        assert api.get("/api/users/keeper").json()["tags"] == ["monitoring"]
        assert api.get("/api/users/monitor").status_code == 404  # not re-seeded
    with connect(b, "keeper", "pw", vhost="kept") as c:
        ch = c.channel()
        ch.queue_declare("k1")
        assert refused(ch.queue_declare, "x1")[0] == 403
    b.proc.stop()


def _answers(b: AdminBroker) -> bool:
    try:
        return httpx.get(b.admin_url + "/api/openapi.json", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_definitions_round_trip(tmp_path: Path) -> None:
    src = start_admin_broker(tmp_path / "src")
    try:
        with src.api() as api:
            ok(api.put("/api/vhosts/defs", json={"description": "exported"}))
            add_user(api, "def-user", vhost="defs", perms=("^d", "^d", "^d"),
                     tags="management")
            ok(api.put("/api/policies/defs/lim",
                       json={"pattern": "^d", "definition": {"max-length": 5}}))
            ok(api.put("/api/exchanges/defs/d-x", json={"type": "topic"}))
            ok(api.put("/api/queues/defs/d-q", json={"durable": True,
                                                     "arguments": {"x-max-priority": 3}}))
            ok(api.post("/api/bindings/defs/e/d-x/q/d-q", json={"routing_key": "a.*"}))
            exported = ok(api.get("/api/definitions")).json()
    finally:
        src.proc.stop()
    user = next(u for u in exported["users"] if u["name"] == "def-user")
    assert user["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    dst = start_admin_broker(tmp_path / "dst")
    try:
        with dst.api() as api:
            ok(api.post("/api/definitions", json=exported))
            again = ok(api.get("/api/definitions")).json()
        for key in ("users", "vhosts", "permissions", "policies", "exchanges", "queues",
                    "bindings"):
            assert again[key] == exported[key], key
        with connect(dst, "def-user", "pw", vhost="defs") as c:  # the hash logs in
            ch = c.channel()
            ch.basic_publish("d-x", "a.b", b"routed")
            time.sleep(0.2)
            assert ch.basic_get("d-q", auto_ack=True)[2] == b"routed"
    finally:
        dst.proc.stop()


def test_rabbitmq_export_imports(tmp_path: Path) -> None:
    """A file written by ``rabbitmqctl export_definitions`` (RabbitMQ 3.10.8): its users
    log in with their RabbitMQ passwords and its topology routes."""
    data = (Path(__file__).parent.parent / "admin" / "data" /
            "rabbitmq-3.10-definitions.json").read_text()
    b = start_admin_broker(tmp_path / "imported")
    try:
        with b.api() as api:
            ok(api.post("/api/definitions", content=data,
                        headers={"content-type": "application/json"}))
            assert api.get("/api/users/limited").json()["tags"] == ["management"]
            assert api.get("/api/policies/shop/lim").json()["definition"] == {"max-length": 10}
            q = api.get("/api/queues/shop/app-orders-q").json()
            assert q["arguments"]["x-max-priority"] == 5
        with connect(b, "limited", "pw", vhost="shop") as c:
            ch = c.channel()
            ch.basic_publish("app-orders", "order.1", b"from rabbit")
            time.sleep(0.2)
            assert ch.basic_get("app-orders-q", auto_ack=True)[2] == b"from rabbit"
            assert refused(ch.queue_declare, "billing")[1] == (
                "ACCESS_REFUSED - access to queue 'billing' in vhost 'shop' refused for user "
                "'limited'")
    finally:
        b.proc.stop()
