"""The OpenAPI document matches the implementation: same routes, valid spec, and live
responses that validate against the documented schemas and status codes."""

from __future__ import annotations

import contextlib
import re
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from amqplite.admin.openapi import document
from amqplite.admin.routes import ROUTES
from tests.admin.conftest import AdminBroker, publish, qname
from tests.brokerproc import wait_for


@pytest.fixture(scope="module")
def doc(admin_broker: AdminBroker) -> dict[str, Any]:
    with admin_broker.api(auth=None) as c:
        return c.get("/api/openapi.json").json()  # type: ignore[no-any-return]


def test_served_document_is_valid_openapi_31(doc: dict[str, Any]) -> None:
    validate(doc)
    assert doc["openapi"] == "3.1.0"
    assert doc == document()


def test_every_route_is_documented_and_vice_versa(doc: dict[str, Any]) -> None:
    table = {(r.method.lower(), r.path) for r in ROUTES}
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert table == documented
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    for p, ops in doc["paths"].items():
        names = set(re.findall(r"\{(\w+)\}", p))
        for op in ops.values():
            declared = {x["name"] for x in op.get("parameters", []) if x["in"] == "path"}
            assert declared == names, (p, op["operationId"])


BASE = "urn:amqplite-admin"


def _validator(doc: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Validator:
    """A JSON Schema 2020-12 validator for ``schema`` whose $refs resolve into ``doc``."""
    registry: Registry = Registry().with_resource(
        BASE, Resource.from_contents(doc, default_specification=DRAFT202012))
    return jsonschema.Draft202012Validator(_rebase(schema), registry=registry)


def _rebase(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: (BASE + v if k == "$ref" else _rebase(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_rebase(x) for x in schema]
    return schema


def check_response(doc: dict[str, Any], method: str, path: str, r: httpx.Response) -> None:
    op = doc["paths"][path][method.lower()]
    assert str(r.status_code) in op["responses"], (
        f"{method} {path} answered {r.status_code}, documented {list(op['responses'])}: "
        f"{r.text[:300]}")
    spec = op["responses"][str(r.status_code)]
    if "text/plain" in spec.get("content", {}):
        assert r.headers["content-type"].startswith("text/plain")
    elif "content" in spec:
        schema = spec["content"]["application/json"]["schema"]
        _validator(doc, schema).validate(r.json())
    else:
        assert r.content == b"" or r.status_code >= 400


def test_live_responses_match_the_document(admin_broker: AdminBroker, doc: dict[str, Any],
                                           channel: Any, api: httpx.Client) -> None:
    """Call every documented operation with real arguments; check status and body shape."""
    q, q2, x, pol = qname("oa"), qname("oa2"), qname("oax"), qname("oap")
    channel.queue_declare(q, durable=True)
    channel.queue_declare(q2, durable=True)
    channel.exchange_declare(x, "direct", durable=True)
    channel.queue_bind(q, x, "rk")
    x2 = qname("oax2")
    channel.exchange_declare(x2, "fanout", durable=True)
    channel.exchange_bind(destination=x2, source=x, routing_key="rk")
    from tests.admin.conftest import death_headers

    for i in range(3):
        publish(channel, q, f"m{i}".encode(), headers=death_headers(q2))
    channel.basic_consume(q2, lambda *a: None)
    before = {c["name"] for c in api.get("/api/connections").json()}
    victim = admin_broker.connect()  # the one DELETE /api/connections/{name} closes
    (conn_name,) = {c["name"] for c in api.get("/api/connections").json()} - before
    port = admin_broker.admin_url.rsplit(":", 1)[1]
    oa_vh, oa_user = qname("oa-vh"), qname("oa-user")
    assert api.put(f"/api/vhosts/{oa_vh}", json={}).status_code == 201
    assert api.put(f"/api/users/{oa_user}", json={"password": "x"}).status_code == 201
    assert api.put(f"/api/permissions/{oa_vh}/{oa_user}", json={}).status_code == 201
    assert api.put(f"/api/topic-permissions/%2F/{oa_user}",
                   json={"exchange": "amq.topic"}).status_code == 201
    qs, sup, sup_new = qname("oas"), qname("oass"), qname("oassn")
    channel.queue_declare(qs, durable=True, arguments={"x-queue-type": "stream"})
    assert api.put(f"/api/super-streams/%2F/{sup}", json={"partitions": 1}).status_code == 201
    lvc = qname("oalvc")  # the retained routes: a retaining exchange with a value for "rk"
    channel.exchange_declare(lvc, "x-lvc")
    channel.basic_publish(lvc, "rk", b"v")
    # a federation link (to port 1, where nothing listens: it only retries) for the
    # restart route
    fed_up, fed_pol = qname("oa-up"), qname("oa-fed")
    assert api.put(f"/api/parameters/federation-upstream/%2F/{fed_up}", json={
        "value": {"uri": "amqp://u:pw@127.0.0.1:1"}}).status_code == 201
    assert api.put(f"/api/policies/%2F/{fed_pol}", json={
        "pattern": f"^{x}$", "apply-to": "exchanges",
        "definition": {"federation-upstream": fed_up}}).status_code == 201
    link_id = wait_for(lambda: next((lk["id"] for lk in api.get("/api/federation-links").json()
                                     if lk["exchange"] == x), None), 20, what="a link")
    values = {"vhost": "/", "name": q, "exchange": x, "queue": q, "props": "rk", "source": x,
              "destination": x2, "port": port, "protocol": "amqp091", "message": "m0",
              "user": oa_user, "key": "rk", "component": "shovel", "id": link_id}
    bodies: dict[str, Any] = {
        "ExchangePut": {"type": "direct"}, "QueuePut": {"durable": True},
        "PublishRequest": {"routing_key": "rk", "payload": "hi"},
        "GetRequest": {"count": 1, "ackmode": "ack_requeue_true"},
        "MoveRequest": {"to_queue": q2, "limit": 1},
        "ReplayRequest": {"limit": 1},
        "BindingPost": {"routing_key": "rk"},
        "PolicyPut": {"pattern": "^oap-none$", "definition": {"max-length": 100}},
        "MemoryPut": {"memory_high_watermark": "0.4"},
        "VHostLimitPut": {"value": -1},  # a negative limit is none: "/" stays unlimited
        "VHostPut": {"description": "openapi"}, "UserPut": {"password": "y", "tags": ""},
        "PermissionPut": {"configure": "^oa", "write": "^oa", "read": "^oa"},
        "TopicPermissionPut": {"exchange": "amq.topic", "write": "^oa", "read": "^oa"},
        "Definitions": {"queues": [{"name": "oa-defs", "durable": False}]},
        "SuperStreamPut": {"partitions": 2, "routing": "hash"},
        # nothing listens on port 1: the shovel only retries
        "ParameterPut": {"value": {"src-uri": "amqp://u:pw@127.0.0.1:1", "src-queue": "a",
                                   "dest-uri": "amqp://u:pw@127.0.0.1:1", "dest-queue": "b"}},
    }
    order = {"GET": 0, "PUT": 1, "POST": 2, "DELETE": 3}
    # deeper DELETEs first: a binding goes before its exchange
    routes = sorted(ROUTES, key=lambda r: (order[r.method], r.path.count("/") * (
        -1 if r.method == "DELETE" else 1)))
    seen = 0
    for r in routes:
        v = dict(values)
        if r.path.startswith("/api/connections/"):
            v["name"] = conn_name
        elif r.path.startswith("/api/policies/"):
            v["name"] = pol
        elif r.path.startswith(("/api/parameters/", "/api/shovels/")):
            v["name"], v["component"] = pol, "shovel"
        elif r.path.startswith("/api/exchanges/{vhost}/{name}/retained"):
            v["name"] = lvc
        elif r.path.startswith("/api/exchanges/"):
            v["name"] = x
        elif r.path.startswith("/api/vhost-limits/"):
            v["name"] = "max-queues"
        elif r.path.startswith("/api/channels/"):
            v["name"] = api.get("/api/channels").json()[0]["name"]
        elif r.path.startswith("/api/streams/"):
            v["name"] = qs
        elif r.path.startswith("/api/super-streams/"):
            v["name"] = sup_new if r.method == "PUT" else sup
        elif r.path.startswith(("/api/nodes/", "/api/healthchecks/node/")):
            v["name"] = "amqplite@localhost"
        if r.path.startswith(("/api/vhosts/", "/api/permissions/", "/api/definitions/")):
            v["vhost"] = oa_vh  # never delete or import into "/" of the shared broker
        if r.method == "DELETE" and r.path == "/api/queues/{vhost}/{name}":
            v["name"] = q2
        if r.method == "GET" and r.path in ("/api/policies/{vhost}/{name}",
                                            "/api/parameters/{component}/{vhost}/{name}"):
            continue  # checked after PUT below
        if r.path == "/api/kafka/groups/{vhost}/{group}":
            continue  # needs a Kafka listener: tests/admin/test_kafka_groups_admin.py
        url = re.sub(r"\{(\w+)\}", lambda m, v=v: quote(v[m.group(1)], safe=""), r.path)
        body = bodies.get(r.body) if r.body else None
        resp = api.request(r.method, url, json=body)
        check_response(doc, r.method, r.path, resp)
        assert resp.status_code < 400, (r.method, url, resp.text)
        seen += 1
    assert seen == len(ROUTES) - 3
    api.delete(f"/api/policies/%2F/{fed_pol}")
    api.delete(f"/api/parameters/federation-upstream/%2F/{fed_up}")
    assert api.put(f"/api/parameters/shovel/%2F/{pol}",
                   json=bodies["ParameterPut"]).status_code == 201
    resp = api.get(f"/api/parameters/shovel/%2F/{pol}")
    check_response(doc, "GET", "/api/parameters/{component}/{vhost}/{name}", resp)
    api.delete(f"/api/parameters/shovel/%2F/{pol}")
    assert api.put(f"/api/policies/%2F/{pol}", json=bodies["PolicyPut"]).status_code == 201
    resp = api.get(f"/api/policies/%2F/{pol}")
    check_response(doc, "GET", "/api/policies/{vhost}/{name}", resp)
    api.delete(f"/api/policies/%2F/{pol}")
    if victim.is_open:
        with contextlib.suppress(Exception):  # the broker closed it: pika may object
            victim.close()


def test_error_responses_match_the_document(admin_broker: AdminBroker, doc: dict[str, Any],
                                            api: httpx.Client) -> None:
    for method, path, url, body, status in [
        ("GET", "/api/queues/{vhost}/{name}", "/api/queues/%2F/nope", None, 404),
        ("POST", "/api/queues/{vhost}/{name}/get", "/api/queues/%2F/nope/get", {}, 404),
        ("PUT", "/api/policies/{vhost}/{name}", "/api/policies/%2F/p", {"pattern": "("}, 400),
        ("GET", "/api/overview", "/api/overview", None, 401),
    ]:
        client = api if status != 401 else admin_broker.api(auth=None)
        r = client.request(method, url, json=body)
        assert r.status_code == status
        check_response(doc, method, path, r)
