"""Request bodies: each endpoint takes what fits it (1 MiB for most writes, more
for a publish and a definitions import), refused with 413 before the rest is read
or anything is parsed."""

from __future__ import annotations

import base64
import socket
from typing import Any

import httpx

from tests.admin.conftest import AdminBroker, qname

TWENTY_MIB = 20 * 1024 * 1024


def _head(admin_broker: AdminBroker, path: str, length: int) -> bytes:
    host = admin_broker.admin_url.split("//", 1)[1]
    auth = base64.b64encode(b"guest:guest").decode()
    return (f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {auth}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


def test_twenty_mib_policy_is_413_before_the_body_is_read(admin_broker: AdminBroker) -> None:
    """A policymaker's 20 MiB ``[{},{},...]``: the answer comes after the first 64 KiB
    of it, so the broker did not wait for (or parse) the rest; on the old code the
    broker read on, and the answer never came while the body was unfinished."""
    port = int(admin_broker.admin_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(_head(admin_broker, "/api/policies/%2F/big", TWENTY_MIB))
        s.sendall(b"[" + b"{}," * (64 * 1024 // 3))
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_twenty_mib_policy_with_httpx(api: httpx.Client) -> None:
    body = b"[" + b"{}," * (TWENTY_MIB // 3) + b"{}]"
    r = api.put("/api/policies/%2F/big", content=body,
                headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert "1048576 bytes" in r.json()["reason"]
    assert api.get("/api/overview").status_code == 200  # and the API goes on


def test_a_large_definitions_import_is_parsed_and_applied(api: httpx.Client) -> None:
    """Above the 1 MiB of other writes, a definitions import (parsed in a worker
    thread) still works: 3,000 queues with a padded argument, about 2 MiB."""
    prefix = qname("defs")
    queues: list[dict[str, Any]] = [
        {"name": f"{prefix}-{i}", "vhost": "/", "durable": False, "auto_delete": False,
         "arguments": {"x-pad": "p" * 600}} for i in range(3000)]
    body = httpx.Request("POST", "http://x", json={"queues": queues}).read()
    assert len(body) > 1024 * 1024
    r = api.post("/api/definitions", content=body,
                 headers={"content-type": "application/json"})
    assert r.status_code in (200, 204), r.text
    assert api.get(f"/api/queues/%2F/{prefix}-2999").status_code == 200
    for i in range(3000):
        api.delete(f"/api/queues/%2F/{prefix}-{i}")


def test_publish_takes_more_than_a_mebibyte(api: httpx.Client) -> None:
    """A publish is bounded by the broker's message size, not by 1 MiB."""
    q = qname("bigpub")
    assert api.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code in (201, 204)
    payload = base64.b64encode(b"x" * (2 * 1024 * 1024)).decode()
    r = api.post("/api/exchanges/%2F/amq.default/publish",
                 json={"routing_key": q, "payload": payload, "payload_encoding": "base64",
                       "properties": {}})
    assert r.status_code == 200 and r.json()["routed"] is True, r.text
    api.delete(f"/api/queues/%2F/{q}")
