"""Details of the management API that RabbitMQ's clients rely on (issue 26): status
lines with their reason phrase, ``contexts`` in the overview, a queue's ``node``,
numbers sent as strings, lists rabbitmqadmin asks for."""

from __future__ import annotations

import base64
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.admin.conftest import AdminBroker, publish, qname


def status_line(admin_url: str, request: bytes) -> bytes:
    """The raw first line of the answer: HTTP client libraries hide an empty phrase."""
    u = urlsplit(admin_url)
    assert u.hostname is not None and u.port is not None
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(request)
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            assert chunk, f"connection closed after {head!r}"
            head += chunk
    return head.split(b"\r\n", 1)[0]


def _get(path: str, auth: tuple[str, str] | None = None, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost", "Connection: close"]
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        lines.append(f"Authorization: Basic {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("request_bytes, line", [
    (_get("/api/overview"), b"HTTP/1.1 401 Unauthorized"),
    (_get("/api/overview", ("guest", "guest")), b"HTTP/1.1 200 OK"),
    (_get("/api/nothing-here", ("guest", "guest")), b"HTTP/1.1 404 Not Found"),
    (_get("/api/overview", ("guest", "guest"), "POST"), b"HTTP/1.1 405 Method Not Allowed"),
    (_get("/api/queues/%2F/no-such-queue", ("guest", "guest"), "DELETE"),
     b"HTTP/1.1 404 Not Found"),
    # one hypercorn answers itself, before the app: a request line it cannot parse
    (b"NOT HTTP AT ALL\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
], ids=["401", "200", "404-route", "405", "404-queue", "400-hypercorn"])
def test_every_status_line_has_its_reason_phrase(admin_broker: AdminBroker,
                                                 request_bytes: bytes, line: bytes) -> None:
    assert status_line(admin_broker.admin_url, request_bytes) == line


def test_overview_has_contexts_naming_the_node(api: httpx.Client,
                                                admin_broker: AdminBroker) -> None:
    o = api.get("/api/overview").json()
    ctx = o["contexts"]
    assert isinstance(ctx, list) and len(ctx) == 1
    # RabbitMQ's shape: the port a string; clients take contexts[0].node
    assert ctx[0]["node"] == o["node"]
    assert ctx[0]["path"] == "/" and ctx[0]["description"]
    assert ctx[0]["port"] == str(urlsplit(admin_broker.admin_url).port)


def test_queue_objects_name_their_node(api: httpx.Client, channel: Any) -> None:
    q = qname()
    channel.queue_declare(q)
    node = api.get("/api/overview").json()["node"]
    assert api.get(f"/api/queues/%2F/{q}").json()["node"] == node
    assert {x["node"] for x in api.get("/api/queues/%2F").json()} == {node}


def test_get_takes_numbers_as_strings_as_rabbitmq_does(api: httpx.Client,
                                                       channel: Any) -> None:
    """rabbitmqadmin sends ``"count": "1"``; RabbitMQ 3.10.8 takes count and truncate
    as strings, and count 0 gets an empty list (checked against it)."""
    q = qname()
    channel.queue_declare(q)
    for i in range(3):
        publish(channel, q, f"message-{i}".encode())
    url = f"/api/queues/%2F/{q}/get"
    r = api.post(url, json={"count": "2", "ackmode": "ack_requeue_true", "encoding": "auto",
                            "truncate": "3"})
    assert r.status_code == 200, r.text
    assert [m["payload"] for m in r.json()] == ["mes", "mes"]
    assert all("death" not in m for m in r.json())  # no null column for rabbitmqadmin
    r = api.post(url, json={"count": "0", "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert r.status_code == 200 and r.json() == []
    for bad, field in (({"count": "two"}, "count"), ({"truncate": "x"}, "truncate"),
                       ({"count": "-1"}, "count")):
        r = api.post(url, json={"ackmode": "ack_requeue_true", "encoding": "auto", **bad})
        assert r.status_code == 400 and r.json()["reason"].startswith(field), r.text
    # nothing was taken: every get above requeued or failed
    assert api.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 3


@pytest.mark.parametrize("path", ["/api/parameters", "/api/parameters/shovel",
                                  "/api/parameters/shovel/%2F", "/api/operator-policies",
                                  "/api/operator-policies/%2F", "/api/vhost-limits",
                                  "/api/vhost-limits/%2F"])
def test_lists_of_what_amqplite_has_none_of_are_empty(api: httpx.Client, path: str) -> None:
    """Operator policies and vhost limits: none, so empty; parameters (shovels) are real
    and answer a list (other tests on this broker may have left some)."""
    r = api.get(path)
    assert r.status_code == 200 and isinstance(r.json(), list)
    if "parameters" not in path:
        assert r.json() == []
    if "%2F" in path:
        assert api.get(path.replace("%2F", "no-such-vhost")).status_code == 404


def test_vhost_tracing_as_rabbitmqadmin_sends_it(api: httpx.Client) -> None:
    """``declare vhost name=v tracing=false`` works; tracing on (the firehose, which
    amqplite lacks) and a value RabbitMQ refuses are 400s that create nothing."""
    name = qname("vh")
    try:
        assert api.put(f"/api/vhosts/{name}", json={"tracing": "false"}).status_code == 201
        assert api.get(f"/api/vhosts/{name}").json()["tracing"] is False
        for bad in ("true", True, "maybe"):
            other = qname("vh")
            r = api.put(f"/api/vhosts/{other}", json={"tracing": bad})
            assert r.status_code == 400 and r.json()["reason"].startswith("tracing"), r.text
            assert api.get(f"/api/vhosts/{other}").status_code == 404
    finally:
        api.delete(f"/api/vhosts/{name}")


def test_queue_declared_on_a_node(api: httpx.Client) -> None:
    """``declare queue node=...``: this node is fine; another is refused (RabbitMQ:
    400 "could not be contacted"), never a queue silently made elsewhere."""
    node = api.get("/api/overview").json()["node"]
    q, other = qname(), qname()
    assert api.put(f"/api/queues/%2F/{q}", json={"node": node}).status_code == 201
    r = api.put(f"/api/queues/%2F/{other}", json={"node": "rabbit@elsewhere"})
    assert r.status_code == 400 and r.json()["reason"].startswith("node"), r.text
    assert api.get(f"/api/queues/%2F/{other}").status_code == 404
    api.delete(f"/api/queues/%2F/{q}")
