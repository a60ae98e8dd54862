"""Exchange federation between two real amqplite brokers, A (upstream) and B
(downstream), with real pika clients: a policy on B federates exchange X from
A; only what B's queues are bound to crosses (A's bindings show it); unbinding
stops the flow; two brokers federating each other do not echo; SIGKILL of B
or of A under on-confirm loses nothing confirmed on A; the link survives B's restart."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for


def node(tmp_path: Path, tag: str) -> AdminBroker:
    return start_admin_broker(tmp_path / tag, env={"AMQPLITE_CLUSTER_NAME": f"node-{tag}"})


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[AdminBroker, AdminBroker]]:
    a, b = node(tmp_path, "a"), node(tmp_path, "b")
    yield a, b
    for x in (a, b):
        x.proc.stop()


def name(prefix: str = "fed") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


def put(broker: AdminBroker, path: str, body: dict[str, Any]) -> None:
    with broker.api() as api:
        r = api.put(path, json=body)
        assert r.status_code in (201, 204), r.text


def federate(down: AdminBroker, up: AdminBroker, **fields: Any) -> None:
    """An upstream on ``down`` pointing at ``up`` and a policy federating ``fed.*``."""
    put(down, "/api/parameters/federation-upstream/%2F/up",
        {"value": {"uri": up.amqp_url, "reconnect-delay": 0.2, **fields}})
    put(down, "/api/policies/%2F/federate", {
        "pattern": r"^fed\.", "apply-to": "exchanges",
        "definition": {"federation-upstream-set": "all"}})


def links(broker: AdminBroker) -> list[dict[str, Any]]:
    try:
        with broker.api() as api:
            return list(api.get("/api/federation-links").json())
    except httpx.ConnectError:
        return []


def running(broker: AdminBroker, exchange: str) -> bool:
    return any(lk["exchange"] == exchange and lk["status"] == "running" for lk in links(broker))


def messages(broker: AdminBroker, queue: str) -> int:
    """The depth of ``queue``; 0 while the broker's API is not up (yet)."""
    try:
        with broker.api() as api:
            return int(api.get(f"/api/queues/%2F/{queue}").json().get("messages", 0))
    except httpx.ConnectError:
        return 0


def upstream_keys(up: AdminBroker, exchange: str) -> set[str]:
    """Routing keys of the exchange bindings the link made on ``up``."""
    with up.api() as api:
        rows = api.get(f"/api/exchanges/%2F/{exchange}/bindings/source").json()
    return {r["routing_key"] for r in rows if r["destination_type"] == "exchange"
            and r["destination"].startswith("federation: ")}


def declare(broker: AdminBroker, exchange: str, bindings: dict[str, str]) -> None:
    """A durable direct ``exchange`` and durable queues bound to it (queue -> key)."""
    conn = broker.connect()
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange, "direct", durable=True)
        for q, key in bindings.items():
            ch.queue_declare(q, durable=True)
            ch.queue_bind(q, exchange, key)
    finally:
        conn.close()


def linked(a: AdminBroker, b: AdminBroker, **fields: Any) -> tuple[str, str]:
    """Exchange X on A federated to B, B's durable queue Q bound to it with key ``k``,
    the link running and ``k`` bound upstream: ``(X, Q)``."""
    x, q = name(), name("q")
    declare(a, x, {})
    declare(b, x, {q: "k"})
    federate(b, a, **fields)
    wait_for(lambda: running(b, x), 30, what="the link to run")
    wait_for(lambda: upstream_keys(a, x) == {"k"}, 20, what="k bound on A")
    return x, q


def publish(broker: AdminBroker, exchange: str, key: str, bodies: list[bytes]) -> None:
    conn = broker.connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish(exchange, key, body, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def drain(broker: AdminBroker, queue: str) -> list[tuple[bytes, dict[str, Any]]]:
    conn = broker.connect()
    try:
        ch = conn.channel()
        out = []
        while True:
            m, props, body = ch.basic_get(queue, auto_ack=True)
            if m is None:
                return out
            out.append((body, props.headers or {}))
    finally:
        conn.close()


def collect(broker: AdminBroker, queue: str, until: bytes,
            timeout: float = 30) -> list[tuple[bytes, dict[str, Any]]]:
    """Drain ``queue`` until the message ``until`` came (everything got, in order)."""
    got: list[tuple[bytes, dict[str, Any]]] = []

    def done() -> bool:
        got.extend(drain(broker, queue))
        return any(b == until for b, _ in got)

    wait_for(done, timeout, what=f"{until!r} on {queue}")
    return got


def test_bindings_propagate_and_messages_follow(
        pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    x, q, q2 = name(), name("q"), name("q")
    declare(a, x, {})
    declare(b, x, {q: "k"})
    federate(b, a, expires=3_600_000, **{"message-ttl": 60_000})
    wait_for(lambda: running(b, x), 30, what="the link to run")
    wait_for(lambda: upstream_keys(a, x) == {"k"}, 20, what="k bound on A")
    publish(a, x, "other", [b"nope"])
    publish(a, x, "k", [b"k-%d" % i for i in range(20)] + [b"end"])
    got = collect(b, q, b"end")
    assert [body for body, _ in got] == [b"k-%d" % i for i in range(20)] + [b"end"]
    hop = got[0][1]["x-received-from"]
    assert len(hop) == 1 and hop[0]["cluster-name"] == "node-a"
    assert hop[0]["exchange"] == x and hop[0]["vhost"] == "/"
    assert hop[0]["redelivered"] is False and "guest" not in hop[0]["uri"]
    row = next(lk for lk in links(b) if lk["exchange"] == x)
    assert row["upstream"] == "up" and row["type"] == "exchange" and row["vhost"] == "/"
    assert row["upstream_exchange"] == x and "guest" not in row["uri"]
    assert row["local_connection"] and row["id"] and row["forwarded"] == 21
    with a.api() as api:  # RabbitMQ's names and arguments on the upstream
        qname = f"federation: {x} -> node-b"
        upq = api.get(f"/api/queues/%2F/{qname}").json()
        assert upq["durable"] is True
        assert upq["arguments"] == {"x-expires": 3_600_000, "x-message-ttl": 60_000,
                                    "x-internal-purpose": "federation"}
        ix = api.get(f"/api/exchanges/%2F/{qname} A").json()
        assert ix["type"] == "x-federation-upstream" and ix["internal"] is True
        assert ix["arguments"]["x-max-hops"] == 1
        assert ix["arguments"]["x-downstream-name"] == "node-b"
    # a second queue with the same key binds nothing more upstream; a new key does
    declare(b, x, {q2: "k2"})
    wait_for(lambda: upstream_keys(a, x) == {"k", "k2"}, 20, what="k2 bound on A")
    # unbinding k stops k's flow: k2's marker arrives, nothing for k does
    conn = b.connect()
    conn.channel().queue_unbind(q, x, "k")
    conn.close()
    wait_for(lambda: upstream_keys(a, x) == {"k2"}, 20, what="k unbound on A")
    publish(a, x, "k", [b"late"])
    publish(a, x, "k2", [b"marker"])
    collect(b, q2, b"marker")
    assert drain(b, q) == []
    with a.api() as api:
        assert api.get(f"/api/queues/%2F/{qname}").json()["messages"] == 0
    metrics = httpx.get(b.admin_url + "/metrics").text
    assert 'amqplite_federation_links{state="running"} 1.0' in metrics
    assert 'rabbitmq_cluster="node-b"' in metrics  # the cluster_name setting, everywhere
    with b.api() as api:
        assert api.get("/api/cluster-name").json() == {"name": "node-b"}
        assert api.get("/api/overview").json()["cluster_name"] == "node-b"
    # the delivery log on B has the hop, so a trace follows the message across
    conn = a.connect()
    conn.channel().basic_publish(x, "k2", b"traced", pika.BasicProperties(message_id=f"id-{x}"))
    conn.close()
    collect(b, q2, b"traced")
    with b.api() as api:
        events = [r["event"] for r in api.get(f"/api/trace/id-{x}").json()]
    assert events[0] == "federated" and "routed" in events, events


def test_two_brokers_federating_each_other_do_not_echo(
        pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    x, qa, qb = name(), name("qa"), name("qb")
    declare(a, x, {qa: "k"})
    declare(b, x, {qb: "k"})
    federate(a, b)
    federate(b, a)
    wait_for(lambda: running(a, x) and running(b, x), 30, what="both links to run")
    wait_for(lambda: upstream_keys(a, x) == {"k"} and upstream_keys(b, x) == {"k"}, 20,
             what="k bound both ways")
    publish(a, x, "k", [b"from-a-%d" % i for i in range(10)])
    publish(b, x, "k", [b"from-b-%d" % i for i in range(10)])
    # each marker follows the other side's messages over the same link, so an echo
    # of them would arrive before it
    publish(a, x, "k", [b"end-a"])
    publish(b, x, "k", [b"end-b"])
    on_a = [body for body, _ in collect(a, qa, b"end-b")]
    on_b = [body for body, _ in collect(b, qb, b"end-a")]
    on_a += [body for body, _ in drain(a, qa)]
    on_b += [body for body, _ in drain(b, qb)]
    want = sorted([b"from-a-%d" % i for i in range(10)] + [b"from-b-%d" % i for i in range(10)]
                  + [b"end-a", b"end-b"])
    assert sorted(on_a) == want
    assert sorted(on_b) == want


def test_on_confirm_survives_kill_of_downstream_and_restart_keeps_link(
        pair: tuple[AdminBroker, AdminBroker]) -> None:
    """Every message A confirmed after the link was up reaches B's durable queue at
    least once, though B is killed -9 mid-stream; B's restart brings the link back
    from its durable parameter and policy."""
    a, b = pair
    x, q = linked(a, b, **{"prefetch-count": 50})
    bodies = [b"m-%d" % i for i in range(3000)]
    publish(a, x, "k", bodies[:1500])
    with b.api() as api:
        wait_for(lambda: api.get(f"/api/queues/%2F/{q}").json().get("messages", 0) > 0, 30,
                 what="forwarding to begin")
    b.proc.kill()
    publish(a, x, "k", bodies[1500:])
    b.proc.start()
    wait_for(lambda: running(b, x), 30, what="the link back after the restart")
    got: set[bytes] = set()

    def all_there() -> bool:
        got.update(body for body, _ in drain(b, q))
        return got >= set(bodies)

    wait_for(all_there, 90, what="every confirmed message on B")
    assert got == set(bodies)
    with a.api() as api:  # nothing left behind upstream, unacked included
        qname = f"/api/queues/%2F/federation: {x} -> node-b"
        wait_for(lambda: api.get(qname).json()["messages"] == 0, 20, what="A's queue empty")
        # one internal exchange (the restart built the other one, then dropped the old)
        names = [e["name"] for e in api.get("/api/exchanges/%2F").json()
                 if e["name"].startswith(f"federation: {x} ")]
        assert names == [f"federation: {x} -> node-b B"]


def test_on_confirm_survives_kill_of_upstream_and_restart(
        pair: tuple[AdminBroker, AdminBroker]) -> None:
    """Every message A confirmed to its publishers reaches B's durable queue at least
    once, though A (the upstream, holding the federation queue) is killed -9 while
    publishers publish and the link drains a backlog; A restarts on its data dir, the
    link on B reconnects, and what is published after the restart follows too."""
    a, b = pair
    x, q = linked(a, b, **{"prefetch-count": 50})
    # a backlog in A's federation queue (the link keeps up with live publishers, so it
    # is built while B is down): at the kill A holds messages ready and unacked
    b.proc.stop()
    backlog = [b"b-%d" % i for i in range(1000)]
    publish(a, x, "k", backlog)
    bodies = [[b"u%d-%d" % (p, i) for i in range(4000)] for p in range(2)]
    confirmed: list[list[bytes]] = [[], []]
    failed: list[BaseException] = []

    def publisher(p: int) -> None:
        """Publishes with confirms until A goes away; ``confirmed[p]`` is what A confirmed."""
        try:
            conn = a.connect()
            ch = conn.channel()
            ch.confirm_delivery()
            for body in bodies[p]:
                ch.basic_publish(x, "k", body, pika.BasicProperties(delivery_mode=2))
                confirmed[p].append(body)
        except (pika.exceptions.AMQPError, OSError) as exc:
            failed.append(exc)

    threads = [threading.Thread(target=publisher, args=(p,), daemon=True) for p in range(2)]
    for t in threads:
        t.start()
    b.proc.start()
    fed_queue = f"/api/queues/%2F/federation: {x} -> node-b"
    wait_for(lambda: messages(b, q) > 0 and sum(map(len, confirmed)) > 0, 60,
             what="forwarding under way")
    a.proc.kill()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads) and len(failed) == 2, \
        f"the publishers did not all see A die: {failed}"
    sent = set(backlog) | {m for ms in bodies for m in ms}
    acked = set(backlog) | {m for ms in confirmed for m in ms}
    assert len(acked) < len(sent), "A was killed after the publishers finished"
    assert messages(b, q) < len(backlog)  # A died mid-stream: B had only part of it
    a.proc.start()
    wait_for(lambda: running(b, x), 30, what="the link back after A's restart")
    after = [b"after-%d" % i for i in range(50)]
    publish(a, x, "k", after)
    got: list[bytes] = []

    def all_there() -> bool:
        got.extend(body for body, _ in drain(b, q))
        return set(got) >= acked | set(after)

    wait_for(all_there, 90, what="every message A confirmed on B")
    # duplicates allowed (at least once), nothing else; a message in flight at the kill
    # may or may not have been stored
    assert set(got) <= sent | set(after)
    with a.api() as api:  # nothing left behind upstream, unacked included
        wait_for(lambda: api.get(fed_queue).json()["messages"] == 0, 20,
                 what="A's queue empty")


def test_bad_input_and_refused_credentials(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    with b.api() as api:
        r = api.put("/api/parameters/federation-upstream/%2F/up",
                    json={"value": {"uri": a.amqp_url, "max-hopz": 2}})
        assert r.status_code == 400 and "max-hopz" in r.json()["reason"]
        r = api.put("/api/parameters/federation-upstream/%2F/up",
                    json={"value": {"uri": "http://x"}})
        assert r.status_code == 400 and "uri" in r.json()["reason"]
        r = api.put("/api/parameters/federation-upstream-set/%2F/s",
                    json={"value": [{"upstream": "up", "ack-mode": "sometimes"}]})
        assert r.status_code == 400 and "ack-mode" in r.json()["reason"]
        r = api.put("/api/policies/%2F/p", json={
            "pattern": ".", "apply-to": "exchanges",
            "definition": {"federation-upstream": "a", "federation-upstream-set": "all"}})
        assert r.status_code == 400 and "together" in r.json()["reason"]
        r = api.put("/api/parameters/federation-upstream-set/%2F/s",
                    json={"value": [{"upstream": "up", "max-hops": 2}]})
        assert r.status_code == 201, r.text
        got = api.get("/api/parameters/federation-upstream-set/%2F/s").json()["value"]
        assert got == [{"upstream": "up", "max-hops": 2}]
    x = name()
    declare(b, x, {name("q"): "k"})
    bad = a.amqp_url.replace("guest:guest", "guest:wrong-pw")
    put(b, "/api/parameters/federation-upstream/%2F/up",
        {"value": {"uri": bad, "reconnect-delay": 0.2}})
    put(b, "/api/policies/%2F/federate", {
        "pattern": r"^fed\.", "apply-to": "exchanges",
        "definition": {"federation-upstream": "up"}})
    # the row as it was in error (0.2 s later it is "starting" again)
    row = wait_for(lambda: next((lk for lk in links(b) if lk["status"] == "error"), None), 30,
                   what="the link to fail")
    assert row["error"] and "wrong-pw" not in str(row)
    # fixed: the link retries and runs
    put(b, "/api/parameters/federation-upstream/%2F/up",
        {"value": {"uri": a.amqp_url, "reconnect-delay": 0.2}})
    wait_for(lambda: running(b, x), 30, what="the fixed link to run")
    with b.api() as api:
        rid = links(b)[0]["id"]
        assert api.delete(f"/api/federation-links/vhost/%2F/{rid}/restart").status_code == 204
        assert api.delete("/api/federation-links/vhost/%2F/nope/restart").status_code == 404
        assert api.delete("/api/policies/%2F/federate").status_code == 204
    wait_for(lambda: links(b) == [], 20, what="the link to go with its policy")
    with a.api() as api:  # and its upstream queue with it (resource-cleanup-mode default)
        wait_for(lambda: api.get(f"/api/queues/%2F/federation: {x} -> node-b").status_code
                 == 404, 20, what="the upstream queue removed")


def test_cli_add_list_restart_delete(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    x = name()
    declare(b, x, {name("q"): "k"})
    r = b.cli("federation", "add-upstream", "up", "--uri", a.amqp_url, "--max-hops", "2",
              "--set", "reconnect-delay=0.2")
    assert r.returncode == 0, r.stderr
    put(b, "/api/policies/%2F/federate", {
        "pattern": r"^fed\.", "apply-to": "exchanges",
        "definition": {"federation-upstream": "up"}})
    wait_for(lambda: running(b, x), 30, what="the link to run")
    r = b.cli("federation")
    assert r.returncode == 0 and x in r.stdout and "running" in r.stdout
    assert "guest:guest" not in r.stdout
    rows = json.loads(b.cli("federation", "list", "--json").stdout)
    assert [(lk["exchange"], lk["upstream"]) for lk in rows] == [(x, "up")]
    assert b.cli("federation", "restart", rows[0]["id"]).returncode == 0
    bad = b.cli("federation", "add-upstream", "up2", "--uri", a.amqp_url, "--set", "hops=3")
    assert bad.returncode != 0 and "hops" in bad.stderr + bad.stdout
    with b.api() as api:  # definitions carry the upstream and the federation policy
        d = api.get("/api/definitions").json()
    assert [p["value"]["max-hops"] for p in d["parameters"]
            if p["component"] == "federation-upstream"] == [2]
    assert any(p["definition"] == {"federation-upstream": "up"} for p in d["policies"])
    assert b.cli("federation", "delete-upstream", "up").returncode == 0
    wait_for(lambda: links(b) == [], 20, what="the link to stop")
    with b.api() as api:  # an import brings both back, and the link with them
        r = api.post("/api/definitions", json={
            "parameters": d["parameters"], "policies": d["policies"]})
        assert r.status_code in (200, 201, 204), r.text
    wait_for(lambda: running(b, x), 30, what="the link back from the import")
