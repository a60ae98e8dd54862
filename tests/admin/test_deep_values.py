"""Values nested too deep are a 400 wherever a JSON body can carry one (issue 33,
item 10): link parameters, policies, queue and exchange arguments, definitions,
and message headers published through the API (a 900-deep header was a 500,
a RecursionError in the codec)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.admin.conftest import qname


def nested(depth: int) -> Any:
    v: Any = 1
    for _ in range(depth):
        v = {"a": v}
    return v


DEEP = nested(900)
SHOVEL = {"src-uri": "amqp://", "src-queue": "s", "dest-uri": "amqp://"}


@pytest.mark.parametrize(("method", "path", "body"), [
    ("PUT", "/api/parameters/shovel/%2F/deep",
     {"value": {**SHOVEL, "src-consumer-args": DEEP}}),
    ("PUT", "/api/parameters/shovel/%2F/deep",
     {"value": {**SHOVEL, "dest-publish-properties": {"headers": DEEP}}}),
    ("PUT", "/api/parameters/federation-upstream/%2F/deep", {"value": {"uri": DEEP}}),
    ("PUT", "/api/policies/%2F/deep", {"pattern": "^deep$", "definition": {"x-a": DEEP}}),
    ("PUT", "/api/queues/%2F/deep", {"durable": True, "arguments": {"x-a": DEEP}}),
    ("PUT", "/api/exchanges/%2F/deep", {"type": "direct", "arguments": {"x-a": DEEP}}),
    ("POST", "/api/definitions", {"parameters": [
        {"vhost": "/", "component": "shovel", "name": "deep",
         "value": {**SHOVEL, "src-consumer-args": DEEP}}]}),
    ("POST", "/api/definitions", {"queues": [
        {"vhost": "/", "name": "deep", "durable": True, "auto_delete": False,
         "arguments": {"x-a": DEEP}}]}),
    ("POST", "/api/exchanges/%2F/amq.default/publish",
     {"routing_key": "deep", "payload": "x", "payload_encoding": "string",
      "properties": {"headers": DEEP}}),
])
def test_too_deep_is_a_400(api: httpx.Client, method: str, path: str, body: Any) -> None:
    r = api.request(method, path, json=body)
    assert r.status_code == 400, r.text
    assert "deep" in r.json()["reason"] or "not a publish property" in r.json()["reason"] \
        or "must be" in r.json()["reason"], r.text
    # and the broker is well: a write after it commits
    q = qname()
    assert api.put(f"/api/queues/%2F/{q}", json={"durable": True}).status_code == 201
    assert api.delete(f"/api/queues/%2F/{q}").status_code == 204
