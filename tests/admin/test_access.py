"""Who reads what through the admin API (issue 22, items 4-7 and 9), against a real broker.

Message bodies need the user's AMQP read permission on the queue; a
``management`` user sees only its own connections, channels and consumers and
only its vhosts in the overview; a failed login is one escaped log line,
rate-limited per peer; a write must come as JSON; a peek stops at
``admin_peek_max_bytes``. Users are made through the API; statuses and texts
are RabbitMQ 3.10.8's (checked against a real node with the management plugin).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest

from amqplite.broker.auth import FAILED_LOGIN_BURST
from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for
from tests.server.test_security import connect, ok

#: the byte cap of this module's broker (a small one: the test publishes little)
PEEK_MAX = 64 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    """This module's own broker: a small byte cap, and a fresh failed-login budget."""
    b = start_admin_broker(tmp_path_factory.mktemp("access"),
                           env={"AMQPLITE_ADMIN_PEEK_MAX_BYTES": str(PEEK_MAX)})
    yield b
    b.proc.stop()


@pytest.fixture
def admin_broker(broker: AdminBroker) -> AdminBroker:
    """conftest's ``api`` fixture then talks to this module's broker."""
    return broker


def add_user(api: httpx.Client, name: str, tags: str,
             perms: dict[str, tuple[str, str, str]] | None = None) -> tuple[str, str]:
    ok(api.put(f"/api/users/{name}", json={"password": "pw", "tags": tags}))
    for vhost, (c, w, r) in (perms or {}).items():
        ok(api.put(f"/api/permissions/{quote(vhost, safe='')}/{name}",
                   json={"configure": c, "write": w, "read": r}))
    return name, "pw"


def publish(ch: Any, queue: str, bodies: list[bytes]) -> None:
    """Publish persistent messages; returns once the broker confirmed them."""
    if not ch._delivery_confirmation:
        ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


def refused_401(r: httpx.Response, reason: str) -> None:
    """RabbitMQ's answer to a logged-in user who may not: 401 with its reason and no
    Basic challenge (the login was right; a browser must not ask again)."""
    assert r.status_code == 401, r.text
    assert r.json() == {"error": "not_authorised", "reason": reason}
    assert "www-authenticate" not in r.headers


# ------------------------------------------------------- item 4: message bodies
def test_message_bodies_need_amqp_read_on_the_queue(broker: AdminBroker,
                                                     api: httpx.Client) -> None:
    with connect(broker) as c:
        ch = c.channel()
        ch.queue_declare("secret-q", durable=True)
        ch.queue_declare("secret-s", durable=True, arguments={"x-queue-type": "stream"})
        publish(ch, "secret-q", [b"card 4111"])
        publish(ch, "secret-s", [b"card 4222"])
    peek = "/api/queues/%2F/secret-q/messages"
    entries = "/api/streams/%2F/secret-s/entries"
    mon = add_user(api, "mon-noperm", "monitoring")
    mgr = add_user(api, "mgr-noread", "management", {"/": (".*", ".*", "^$")})
    reader = add_user(api, "mgr-reader", "management", {"/": ("", "", "^secret-")})
    with broker.api(auth=mon) as c:  # no permission in the vhost: not even its metadata
        for url in ("/api/queues/%2F/secret-q", peek, entries):
            refused_401(c.get(url), "User not authorised to access virtual host")
    with broker.api(auth=mgr) as c:
        assert c.get("/api/queues/%2F/secret-q").status_code == 200
        refused_401(c.get(peek), "ACCESS_REFUSED - access to queue 'secret-q' in vhost '/' "
                                 "refused for user 'mgr-noread'")
        refused_401(c.get(entries), "ACCESS_REFUSED - access to queue 'secret-s' in vhost "
                                    "'/' refused for user 'mgr-noread'")
    with broker.api(auth=reader) as c:  # read permission, nothing else: it reads
        assert [m["payload"] for m in ok(c.get(peek)).json()] == ["card 4111"]
        assert [e["payload"] for e in ok(c.get(entries)).json()["entries"]] == ["card 4222"]


# ---------------------------------------------- item 5: other vhosts, other users
def test_management_user_sees_its_own_connections_and_its_vhosts_totals(
        broker: AdminBroker, api: httpx.Client) -> None:
    for vh in ("vh-a", "vh-b"):
        ok(api.put(f"/api/vhosts/{vh}", json={}))  # the creator (guest) gets full rights
    mgr = add_user(api, "mgr-a", "management", {"vh-a": (".*", ".*", ".*")})
    mon = add_user(api, "mon-all", "monitoring")
    other = connect(broker, vhost="vh-b")
    own = connect(broker, "mgr-a", "pw", vhost="vh-a")
    try:
        och = other.channel()
        och.queue_declare("b-orders", durable=True)
        publish(och, "b-orders", [b"x"] * 3)
        och.basic_consume("b-orders", lambda *a: None, consumer_tag="b-secret-tag")
        own.channel().queue_declare("a-jobs", durable=True)

        def conns(client: httpx.Client) -> list[dict[str, Any]]:
            return ok(client.get("/api/connections")).json()  # type: ignore[no-any-return]

        def by_login() -> dict[tuple[str, str], str]:
            return {(c["user"], c["vhost"]): c["name"] for c in conns(api)}

        found = wait_for(lambda: {("guest", "vh-b"), ("mgr-a", "vh-a")} <= by_login().keys()
                         and by_login(), what="both connections listed")
        b_conn, a_conn = found[("guest", "vh-b")], found[("mgr-a", "vh-a")]
        b_chan, a_chan = f"{b_conn} (1)", f"{a_conn} (1)"
        wait_for(lambda: any(c["consumer_tag"] == "b-secret-tag"
                             for c in ok(api.get("/api/consumers")).json()),
                 what="the consumer listed")
        with broker.api(auth=mgr) as c:
            assert [x["name"] for x in conns(c)] == [a_conn]
            assert ok(c.get(f"/api/connections/{quote(a_conn, safe='')}")).json()["user"] == \
                "mgr-a"
            assert ok(c.get(f"/api/channels/{quote(a_chan, safe='')}")).json()["user"] == "mgr-a"
            for url in (f"/api/connections/{quote(b_conn, safe='')}",
                        f"/api/connections/{quote(b_conn, safe='')}/channels",
                        f"/api/channels/{quote(b_chan, safe='')}"):
                refused_401(c.get(url), "User not authorised to access object")
            assert [x["name"] for x in ok(c.get("/api/channels")).json()] == [a_chan]
            assert ok(c.get("/api/consumers")).json() == []
            assert ok(c.get("/api/consumers/vh-b")).json() == []  # RabbitMQ: 200, filtered
            ov = ok(c.get("/api/overview")).json()
            assert ov["object_totals"]["connections"] == 1
            assert ov["object_totals"]["channels"] == 1
            assert ov["object_totals"]["queues"] == 1  # a-jobs; not b-orders
            assert ov["object_totals"]["consumers"] == 0
            assert ov["queue_totals"]["messages"] == 0  # b-orders' 3 are not counted
            assert ov["object_totals"]["exchanges"] == len(ok(api.get("/api/exchanges/vh-a")).json())
            assert "listeners" not in ov
            for url in ("/api/nodes", "/api/nodes/amqplite@localhost", "/api/node/memory"):
                assert c.get(url).status_code == 403  # node-wide figures: monitoring only
        with broker.api(auth=mon) as c:  # monitoring sees every user's, as in RabbitMQ
            names = {x["name"] for x in conns(c)}
            assert {a_conn, b_conn} <= names
            assert ok(c.get(f"/api/channels/{quote(b_chan, safe='')}")).json()["user"] == "guest"
            assert "b-secret-tag" in {x["consumer_tag"] for x in ok(c.get("/api/consumers")).json()}
            ov = ok(c.get("/api/overview")).json()
            assert ov["object_totals"]["connections"] >= 2
            assert ov["queue_totals"]["messages"] >= 3
            assert ok(c.get("/api/nodes")).json()[0]["sockets_used"] >= 2
    finally:
        other.close()
        own.close()


# ------------------------------------------- monitoring: objects of its vhosts only
@pytest.fixture(scope="module")
def two_vhosts(broker: AdminBroker) -> Iterator[dict[str, str]]:
    """vhosts mv-a and mv-b, each with a queue holding a message, an exchange, a binding
    and a policy; a consumer on mv-b's queue over guest's connection; two monitoring
    users: ``mon-none`` without permissions, ``mon-a`` with ``^$`` ones in mv-a (any
    permission counts, as in RabbitMQ). Yields the names of mv-b's connection and
    channel."""
    with broker.api() as api:
        for vh in ("mv-a", "mv-b"):
            ok(api.put(f"/api/vhosts/{vh}", json={}))
            ok(api.put(f"/api/queues/{vh}/{vh}-q", json={"durable": True}))
            ok(api.put(f"/api/exchanges/{vh}/{vh}-x", json={"type": "direct"}))
            ok(api.post(f"/api/bindings/{vh}/e/{vh}-x/q/{vh}-q", json={"routing_key": "k"}))
            ok(api.put(f"/api/policies/{vh}/{vh}-pol",
                       json={"pattern": "^zz", "definition": {"max-length": 5}}))
            ok(api.post(f"/api/exchanges/{vh}/amq.default/publish",
                        json={"routing_key": f"{vh}-q", "payload": "m",
                              "payload_encoding": "string", "properties": {}}))
        add_user(api, "mon-none", "monitoring")
        add_user(api, "mon-a", "monitoring", {"mv-a": ("^$", "^$", "^$")})
        conn = connect(broker, vhost="mv-b")
        try:
            conn.channel().basic_consume("mv-b-q", lambda *a: None, consumer_tag="mv-b-tag")

            def named() -> str | None:
                return next((c["name"] for c in ok(api.get("/api/connections")).json()
                             if c["vhost"] == "mv-b"), None)

            name = wait_for(named, what="mv-b's connection listed")
            wait_for(lambda: any(c["consumer_tag"] == "mv-b-tag"
                                 for c in ok(api.get("/api/consumers")).json()),
                     what="mv-b's consumer listed")
            yield {"connection": name, "channel": f"{name} (1)"}
        finally:
            conn.close()


MV_LISTS = ("/api/queues", "/api/exchanges", "/api/bindings", "/api/policies")


def _vhosts_of(c: httpx.Client, url: str) -> set[str]:
    return {i["vhost"] for i in ok(c.get(url)).json()} & {"mv-a", "mv-b"}


def test_monitoring_lists_vhost_objects_only_where_it_has_a_permission(
        broker: AdminBroker, two_vhosts: dict[str, str]) -> None:
    """RabbitMQ 3.10.8: a monitoring user without permissions lists no queue, exchange,
    binding or policy (``[]``); with a permission in one vhost, that vhost's."""
    with broker.api(auth=("mon-none", "pw")) as c:
        for url in MV_LISTS:
            assert ok(c.get(url)).json() == [], url
    with broker.api(auth=("mon-a", "pw")) as c:
        for url in MV_LISTS:
            assert _vhosts_of(c, url) == {"mv-a"}, url
    with broker.api() as c:  # an administrator lists both
        for url in MV_LISTS:
            assert _vhosts_of(c, url) == {"mv-a", "mv-b"}, url


def test_monitoring_reads_no_object_of_a_vhost_without_a_permission(
        broker: AdminBroker, two_vhosts: dict[str, str]) -> None:
    """Any path naming a vhost the monitoring user has no permission in: RabbitMQ's 401."""
    with broker.api(auth=("mon-a", "pw")) as c:
        for url in ("/api/queues/mv-b", "/api/queues/mv-b/mv-b-q", "/api/exchanges/mv-b",
                    "/api/exchanges/mv-b/mv-b-x", "/api/bindings/mv-b",
                    "/api/bindings/mv-b/e/mv-b-x/q/mv-b-q", "/api/queues/mv-b/mv-b-q/bindings",
                    "/api/exchanges/mv-b/mv-b-x/bindings/source", "/api/policies/mv-b"):
            refused_401(c.get(url), "User not authorised to access virtual host")
        for url in ("/api/queues/mv-a/mv-a-q", "/api/exchanges/mv-a/mv-a-x",
                    "/api/bindings/mv-a/e/mv-a-x/q/mv-a-q", "/api/policies/mv-a"):
            ok(c.get(url))


def test_monitoring_sees_every_vhost_connection_channel_and_consumer(
        broker: AdminBroker, two_vhosts: dict[str, str]) -> None:
    """What monitoring does read across vhosts, as RabbitMQ: the vhosts list, every
    connection, channel and consumer (``/api/consumers/{vhost}`` too) and the node's
    totals in the overview."""
    conn, chan = two_vhosts["connection"], two_vhosts["channel"]
    with broker.api(auth=("mon-none", "pw")) as c:
        assert {"mv-a", "mv-b"} <= {v["name"] for v in ok(c.get("/api/vhosts")).json()}
        assert conn in {x["name"] for x in ok(c.get("/api/connections")).json()}
        assert ok(c.get(f"/api/connections/{quote(conn, safe='')}")).json()["vhost"] == "mv-b"
        assert ok(c.get(f"/api/channels/{quote(chan, safe='')}")).json()["vhost"] == "mv-b"
        assert chan in {x["name"] for x in ok(c.get("/api/channels")).json()}
        for url in ("/api/consumers", "/api/consumers/mv-b"):
            assert "mv-b-tag" in {x["consumer_tag"] for x in ok(c.get(url)).json()}, url
        with broker.api() as adm:
            totals = ok(adm.get("/api/overview")).json()["object_totals"]
        assert ok(c.get("/api/overview")).json()["object_totals"]["queues"] == totals["queues"]


def test_monitoring_traces_messages_of_its_vhosts_only(
        broker: AdminBroker, two_vhosts: dict[str, str]) -> None:
    """A message's trace rows name its exchange, queue and routing: vhost objects."""
    with connect(broker, vhost="mv-b") as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "mv-b-q", b"t", pika.BasicProperties(message_id="mv-b-traced"))
    with broker.api() as adm:
        wait_for(lambda: ok(adm.get("/api/trace/mv-b-traced")).json(),
                 what="the message's trace rows")
    with broker.api(auth=("mon-a", "pw")) as c:
        assert ok(c.get("/api/trace/mv-b-traced")).json() == []


# ----------------------------------------------- AMQP refusals over HTTP: 401
def test_amqp_permission_refusals_are_401_as_in_rabbitmq(broker: AdminBroker,
                                                           api: httpx.Client) -> None:
    """RabbitMQ 3.10.8 answers what the user's AMQP permissions refuse with 401
    ``not_authorised`` and no challenge (get with its ACCESS_REFUSED text), and a
    refused publish with 400 ``403 ACCESS_REFUSED - ...``; nothing changes."""
    ok(api.put("/api/vhosts/rf", json={}))
    ok(api.put("/api/queues/rf/rf-q", json={"durable": True}))
    ok(api.put("/api/exchanges/rf/rf-x", json={"type": "direct"}))
    ok(api.put("/api/queues/rf/rf-dst", json={"durable": True}))
    ok(api.post("/api/exchanges/rf/amq.default/publish",
                json={"routing_key": "rf-q", "payload": "keep", "properties": {}}))
    user = add_user(api, "rf-admin", "administrator", {"rf": ("^$", "^$", "^$")})
    get = {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}
    with broker.api(auth=user) as c:
        refused_401(c.post("/api/queues/rf/rf-q/get", json=get),
                    "ACCESS_REFUSED - access to queue 'rf-q' in vhost 'rf' refused for user "
                    "'rf-admin'")
        for method, url, body in (
                ("PUT", "/api/queues/rf/rf-new", {}),
                ("DELETE", "/api/queues/rf/rf-q", None),
                ("DELETE", "/api/queues/rf/rf-q/contents", None),
                ("PUT", "/api/exchanges/rf/rf-new-x", {"type": "direct"}),
                ("DELETE", "/api/exchanges/rf/rf-x", None),
                ("POST", "/api/bindings/rf/e/rf-x/q/rf-q", {"routing_key": "k"}),
                ("POST", "/api/queues/rf/rf-q/move", {"to_queue": "rf-dst"}),
                ("POST", "/api/queues/rf/rf-q/replay", {"queue": "rf-dst"}),
                ("GET", "/api/aliveness-test/rf", None)):
            r = c.request(method, url, json=body)
            assert r.status_code == 401, (method, url, r.text)
            assert r.json()["error"] == "not_authorised" and "www-authenticate" not in r.headers
            assert r.json()["reason"].startswith("ACCESS_REFUSED - access to "), r.text
        r = c.post("/api/exchanges/rf/rf-x/publish",
                   json={"routing_key": "k", "payload": "x", "properties": {}})
        assert r.status_code == 400 and r.json() == {
            "error": "bad_request", "reason": "403 ACCESS_REFUSED - access to exchange 'rf-x' "
                                              "in vhost 'rf' refused for user 'rf-admin'"}
    # nothing was made, deleted, purged, bound or moved
    assert api.get("/api/queues/rf/rf-new").status_code == 404
    assert api.get("/api/exchanges/rf/rf-new-x").status_code == 404
    assert api.get("/api/exchanges/rf/rf-x").status_code == 200
    assert ok(api.get("/api/bindings/rf/e/rf-x/q/rf-q")).json() == []
    assert [m["payload"] for m in ok(api.get("/api/queues/rf/rf-q/messages")).json()] == ["keep"]
    assert ok(api.get("/api/queues/rf/rf-dst/messages")).json() == []
    # the CLI says what it is: a refused permission, not wrong credentials
    r = broker.cli("purge", "rf-q", "--vhost", "rf", "--user", "rf-admin", "--password", "pw")
    assert r.returncode != 0 and "permission denied: ACCESS_REFUSED" in r.stderr, r.stderr


# ------------------------------------------------------- item 6: failed logins
def _failed_lines(b: AdminBroker) -> list[str]:
    text = b.proc.log_path.read_text(errors="replace")
    return [ln for ln in text.splitlines() if "login failed for user" in ln]


def test_failed_login_names_are_escaped_and_rate_limited_per_peer(broker: AdminBroker) -> None:
    before = len(_failed_lines(broker))
    forged = "evil\nFORGED admin API - login ok for user 'root'"
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(broker, forged, "nope")
    auth = base64.b64encode(f"{forged}:nope".encode()).decode()
    r = httpx.get(broker.admin_url + "/api/overview", headers={"authorization": f"Basic {auth}"})
    assert r.status_code == 401
    for _ in range(60):  # a flood from one peer
        assert httpx.get(broker.admin_url + "/api/overview",
                         auth=("nobody" + "x" * 5000, "nope")).status_code == 401
    # the same peer's lines stop at the burst; the log is written before the 401 is sent
    lines = _failed_lines(broker)[before:]
    assert 2 <= len(lines) <= FAILED_LOGIN_BURST, lines
    text = broker.proc.log_path.read_text(errors="replace")
    assert not any(ln.startswith("FORGED") for ln in text.splitlines())
    escaped = "login failed for user 'evil\\nFORGED admin API - login ok for user 'root''"
    assert sum(escaped in ln for ln in lines) == 2, lines  # AMQP's and HTTP's, one line each
    assert all(len(ln) < 1000 for ln in lines)  # a 5,000-character name is cut


# -------------------------------------------------------- item 7: JSON writes
def test_writes_must_be_json(broker: AdminBroker, api: httpx.Client) -> None:
    defs = b'{"queues": [{"name": "csrf-q", "vhost": "/", "durable": true, ' \
           b'"auto_delete": false, "arguments": {}}]}'
    for headers in ({"content-type": "text/plain"},
                    {"content-type": "application/x-www-form-urlencoded"},
                    {}):
        r = api.post("/api/definitions", content=defs, headers=headers)
        assert r.status_code == 415, r.text
        assert "application/json" in r.json()["reason"]
    assert api.get("/api/queues/%2F/csrf-q").status_code == 404  # nothing imported
    ok(api.put("/api/queues/%2F/csrf-target", json={}))
    # a bodiless POST with no type is what a page elsewhere can send without asking
    bind = "/api/bindings/%2F/e/amq.direct/q/csrf-target"
    assert api.post(bind).status_code == 415
    assert ok(api.get(f"{bind}")).json() == []
    # the dashboard's bodiless POST says who it is (a custom header needs a preflight)
    assert api.post(bind, headers={"x-requested-with": "XMLHttpRequest"}).status_code == 201
    ok(api.post("/api/definitions", content=defs,
                headers={"content-type": "application/json; charset=utf-8"}))
    assert api.get("/api/queues/%2F/csrf-q").status_code == 200
    assert api.delete("/api/queues/%2F/csrf-q").status_code == 204  # no body: fine


# ------------------------------------------------------- item 9: bounded peek
def test_peek_is_capped_by_bytes(broker: AdminBroker, api: httpx.Client) -> None:
    size = 10 * 1024
    bodies = [bytes([65 + i]) * size for i in range(20)]
    with connect(broker) as c:
        ch = c.channel()
        ch.queue_declare("big-q", durable=True)
        ch.queue_declare("huge-q", durable=True)
        ch.queue_declare("big-s", durable=True, arguments={"x-queue-type": "stream"})
        publish(ch, "big-q", bodies)
        publish(ch, "huge-q", [b"h" * (PEEK_MAX * 3)])
        publish(ch, "big-s", bodies)
    r = ok(api.get("/api/queues/%2F/big-q/messages?limit=20"))
    got = r.json()
    assert 1 <= len(got) < 20
    assert r.headers["x-max-bytes-reached"] == "true"
    assert r.headers["x-max-bytes"] == str(PEEK_MAX)
    assert sum(len(m["payload"]) for m in got) <= PEEK_MAX
    assert [m["payload"].encode() for m in got] == bodies[:len(got)]
    assert all(m["payload_bytes"] == size and m["truncated"] is False for m in got)

    r = ok(api.get("/api/queues/%2F/big-q/messages?limit=20&truncate=100"))
    assert len(r.json()) == 20 and "x-max-bytes-reached" not in r.headers
    assert all(m["truncated"] and len(m["payload"]) == 100 for m in r.json())

    (m,) = ok(api.get("/api/queues/%2F/big-q/messages", params={"filter": "body=C*"})).json()
    assert m["index"] == 2 and m["payload"].encode() == bodies[2]

    r = ok(api.get("/api/queues/%2F/huge-q/messages"))  # one message over the cap: its head
    (m,) = r.json()
    assert m["truncated"] is True and m["payload_bytes"] == PEEK_MAX * 3
    assert 0 < len(m["payload"]) <= PEEK_MAX and r.headers["x-max-bytes-reached"] == "true"

    page = ok(api.get("/api/streams/%2F/big-s/entries?count=20&truncate=-1")).json()
    n = len(page["entries"])
    assert page["max_bytes_reached"] is True and 1 <= n < 20
    assert sum(len(e["payload"]) for e in page["entries"]) <= PEEK_MAX
    assert page["next"] == page["entries"][-1]["offset"] + 1  # 'next' resumes after them
    rest = ok(api.get(f"/api/streams/%2F/big-s/entries?count=20&truncate=-1"
                      f"&from={page['next']}")).json()
    assert rest["entries"][0]["payload"].encode() == bodies[n]


def test_settings_name_the_cap(tmp_path: Path) -> None:
    from amqplite.config import ConfigError, load_settings

    s = load_settings(env={"AMQPLITE_ADMIN_PEEK_MAX_BYTES": "1MiB",
                           "AMQPLITE_DATA_DIR": str(tmp_path)})
    assert s.admin_peek_max_bytes_value == 1024 * 1024
    with pytest.raises((ConfigError, ValueError)):
        load_settings(env={"AMQPLITE_ADMIN_PEEK_MAX_BYTES": "lots",
                           "AMQPLITE_DATA_DIR": str(tmp_path)})
