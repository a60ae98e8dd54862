"""Compare amqplite's management API with RabbitMQ's, request by request.

Sends the same requests to both (a real RabbitMQ with the management plugin and an
amqplite broker) and prints where the answers differ: the status line (code and
reason phrase), the headers clients look at, and the body's shape (JSON type, the
keys of objects, of list items and of nested objects; values are not compared,
they differ by nature: node names, timestamps, rates). Each side gets the same
objects first (a vhost, a queue with a message, an exchange, a binding, a policy),
made through the API itself, and loses them afterwards.

    python scripts/compare_api.py --amqplite http://127.0.0.1:15673 \\
        --rabbitmq http://127.0.0.1:15672 [--user guest --password guest]

Start a RabbitMQ with the management plugin as scripts/rabbitmq.sh does, with
``[rabbitmq_management].`` in its enabled_plugins file and ``management.tcp.port``
in its rabbitmq.conf. Exit status: 0 when nothing differs, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import httpx

#: headers a client may read; others (date, server, content-length) differ by nature,
#: and content-security-policy only governs pages a browser renders (RabbitMQ sends it
#: on JSON too; amqplite's dashboard sets its own on its pages)
HEADERS = ("content-type", "vary", "cache-control", "www-authenticate", "allow",
           "x-frame-options")
VH = "compare-vh"
Q, X = "compare-q", "compare-x"

#: (method, path, body or None, what it shows); paths relative to /api
REQUESTS: list[tuple[str, str, Any, str]] = [
    ("GET", "/overview", None, ""),
    ("GET", "/cluster-name", None, ""),
    ("GET", "/nodes", None, ""),
    ("GET", "/extensions", None, ""),
    ("GET", "/whoami", None, ""),
    ("GET", "/vhosts", None, ""),
    ("GET", f"/vhosts/{VH}", None, ""),
    ("GET", f"/vhosts/{VH}/permissions", None, ""),
    ("GET", "/users", None, ""),
    ("GET", "/users/guest", None, ""),
    ("GET", "/users/guest/permissions", None, ""),
    ("GET", "/permissions", None, ""),
    ("GET", f"/permissions/{VH}/guest", None, ""),
    ("GET", "/connections", None, ""),
    ("GET", "/channels", None, ""),
    ("GET", "/consumers", None, ""),
    ("GET", f"/consumers/{VH}", None, ""),
    ("GET", "/exchanges", None, ""),
    ("GET", f"/exchanges/{VH}", None, ""),
    ("GET", f"/exchanges/{VH}/{X}", None, ""),
    ("GET", f"/exchanges/{VH}/{X}/bindings/source", None, ""),
    ("GET", f"/exchanges/{VH}/{X}/bindings/destination", None, ""),
    ("GET", "/queues", None, ""),
    ("GET", f"/queues/{VH}", None, ""),
    ("GET", f"/queues/{VH}/{Q}", None, ""),
    ("GET", f"/queues/{VH}/{Q}/bindings", None, ""),
    ("GET", "/bindings", None, ""),
    ("GET", f"/bindings/{VH}", None, ""),
    ("GET", f"/bindings/{VH}/e/{X}/q/{Q}", None, ""),
    ("GET", f"/bindings/{VH}/e/{X}/q/{Q}/rk", None, ""),
    ("GET", "/policies", None, ""),
    ("GET", f"/policies/{VH}", None, ""),
    ("GET", f"/policies/{VH}/compare-p", None, ""),
    ("GET", "/parameters", None, ""),
    ("GET", "/operator-policies", None, ""),
    ("GET", "/vhost-limits", None, ""),
    ("GET", "/definitions", None, ""),
    ("GET", f"/definitions/{VH}", None, ""),
    ("GET", "/healthchecks/node", None, ""),
    ("GET", "/health/checks/alarms", None, ""),
    ("GET", "/health/checks/local-alarms", None, ""),
    ("GET", "/health/checks/virtual-hosts", None, ""),
    ("GET", "/health/checks/node-is-quorum-critical", None, ""),
    ("GET", "/health/checks/protocol-listener/amqp091", None, ""),
    ("GET", f"/aliveness-test/{VH}", None, ""),
    ("POST", f"/queues/{VH}/{Q}/get",
     {"count": "1", "ackmode": "ack_requeue_true", "encoding": "auto"}, "rabbitmqadmin's get"),
    ("POST", f"/exchanges/{VH}/amq.default/publish",
     {"routing_key": Q, "payload": "x", "payload_encoding": "string", "properties": {}}, ""),
    ("PUT", f"/queues/{VH}/{Q}", {"durable": "true", "auto_delete": "false",
                                 "arguments": {}}, "redeclare (204)"),
    ("PUT", f"/queues/{VH}/compare-q2", {"durable": "false"}, "declare (201)"),
    ("DELETE", f"/queues/{VH}/compare-q2", None, ""),
    ("DELETE", f"/queues/{VH}/{Q}/contents", None, "purge"),
    # errors
    ("GET", "/queues/no-such-vhost", None, "unknown vhost"),
    ("GET", f"/queues/{VH}/no-such-queue", None, "unknown queue"),
    ("GET", "/no-such-route", None, "unknown route"),
    ("POST", "/overview", None, "method not allowed"),
    ("PUT", f"/queues/{VH}/compare-bad", {"durable": "maybe"}, "bad boolean"),
    ("POST", f"/queues/{VH}/{Q}/get", {"count": "x", "ackmode": "ack_requeue_true",
                                      "encoding": "auto"}, "bad count"),
    ("PUT", f"/policies/{VH}/compare-bad", {"pattern": ".*", "definition": {},
                                           "priority": "1"}, "priority as a string"),
]

#: sent without credentials / with a wrong password
ANON = [("GET", "/overview"), ("GET", "/queues")]


def shape(v: Any, depth: int = 0) -> Any:
    """A value's JSON type, with the keys of objects (two levels down)."""
    if isinstance(v, dict):
        if depth >= 2:
            return "object"
        return {k: shape(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return ["list", shape(v[0], depth + 1)] if v else ["list"]
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "null"


def diff_shape(a: Any, r: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(r, dict):
        for k in sorted(set(r) - set(a)):
            out.append(f"  body{path}.{k}: missing in amqplite (RabbitMQ: {_short(r[k])})")
        for k in sorted(set(a) - set(r)):
            out.append(f"  body{path}.{k}: only in amqplite")
        for k in sorted(set(a) & set(r)):
            diff_shape(a[k], r[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(r, list):
        if len(a) > 1 and len(r) > 1:
            diff_shape(a[1], r[1], f"{path}[]", out)
    elif a != r and "null" not in (a, r):
        out.append(f"  body{path}: amqplite {_short(a)}, RabbitMQ {_short(r)}")


def _short(s: Any) -> str:
    text = json.dumps(s) if not isinstance(s, str) else s
    return text if len(text) < 60 else text[:57] + "..."


def describe(resp: httpx.Response) -> tuple[str, dict[str, str], Any]:
    line = f"{resp.status_code} {resp.reason_phrase}".rstrip()
    heads = {h: resp.headers[h] for h in HEADERS if h in resp.headers}
    if not resp.content:
        body: Any = "(no body)"
    else:
        try:
            body = shape(resp.json())
        except ValueError:
            body = f"(not JSON: {resp.headers.get('content-type')})"
    return line, heads, body


def compare(label: str, a: httpx.Response, r: httpx.Response) -> list[str]:
    (la, ha, ba), (lr, hr, br) = describe(a), describe(r)
    out: list[str] = []
    if la != lr:
        out.append(f"  status: amqplite '{la}', RabbitMQ '{lr}'")
    for h in HEADERS:
        va, vr = ha.get(h), hr.get(h)
        if (va is None) != (vr is None) or (h == "content-type" and va != vr):
            out.append(f"  header {h}: amqplite {va!r}, RabbitMQ {vr!r}")
    if isinstance(ba, str) or isinstance(br, str):
        if ba != br:
            out.append(f"  body: amqplite {_short(ba)}, RabbitMQ {_short(br)}")
    else:
        diff_shape(ba, br, "", out)
    return [label, *out] if out else []


def _client(url: str, auth: tuple[str, str] | None) -> httpx.Client:
    return httpx.Client(base_url=url.rstrip("/") + "/api", auth=auth, timeout=30,
                        headers={"content-type": "application/json"})


def setup(c: httpx.Client) -> None:
    """The same objects on both sides, made through the API."""
    for method, path, body in (
            ("PUT", f"/vhosts/{VH}", None),
            ("PUT", f"/permissions/{VH}/guest", {"configure": ".*", "write": ".*",
                                                 "read": ".*"}),
            ("PUT", f"/queues/{VH}/{Q}", {"durable": True}),
            ("PUT", f"/exchanges/{VH}/{X}", {"type": "direct"}),
            ("POST", f"/bindings/{VH}/e/{X}/q/{Q}", {"routing_key": "rk"}),
            ("PUT", f"/policies/{VH}/compare-p", {"pattern": "^none$",
                                                  "definition": {"max-length": 1}}),
            ("POST", f"/exchanges/{VH}/amq.default/publish",
             {"routing_key": Q, "payload": "hello", "payload_encoding": "string",
              "properties": {"content_type": "text/plain"}})):
        r = c.request(method, path, content=None if body is None else json.dumps(body))
        if r.status_code >= 300:
            sys.exit(f"setup {method} {path} on {c.base_url}: {r.status_code} {r.text}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--amqplite", required=True, help="amqplite's admin URL")
    ap.add_argument("--rabbitmq", required=True, help="RabbitMQ's management URL")
    ap.add_argument("--user", default="guest")
    ap.add_argument("--password", default="guest")
    args = ap.parse_args()
    auth = (args.user, args.password)
    sides = [_client(args.amqplite, auth), _client(args.rabbitmq, auth)]
    differences: list[list[str]] = []
    try:
        for c in sides:
            setup(c)
        for method, path, body, note in REQUESTS:
            content = None if body is None else json.dumps(body)
            a, r = (c.request(method, path, content=content) for c in sides)
            label = f"{method} /api{path}" + (f"  ({note})" if note else "")
            differences.append(compare(label, a, r))
        for creds, what in ((None, "no credentials"), ((args.user, "wrong"), "wrong password")):
            anon = [_client(args.amqplite, creds), _client(args.rabbitmq, creds)]
            for method, path in ANON:
                a, r = (c.request(method, path) for c in anon)
                differences.append(compare(f"{method} /api{path}  ({what})", a, r))
    finally:
        for c in sides:
            c.delete(f"/vhosts/{VH}")
    found = [d for d in differences if d]
    for d in found:
        print("\n".join(d))
    print(f"{len(found)} of {len(differences)} requests differ")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
