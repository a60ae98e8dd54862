"""Super streams and ``amqplite stream tail`` against a real broker, real pika, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import pika
from pika.adapters.blocking_connection import BlockingChannel

from amqplite.broker.superstream import hash_partition
from tests.admin.conftest import AdminBroker, qname


def read_all(c: pika.BlockingConnection, queue: str, n: int) -> list[tuple[int, str, bytes]]:
    """(offset, routing key, body) of the first ``n`` entries of stream ``queue``."""
    got: list[tuple[int, str, bytes]] = []
    ch = c.channel()
    ch.basic_qos(prefetch_count=max(n, 1))
    ch.basic_consume(queue, lambda _c, m, p, b: got.append(
        (p.headers["x-stream-offset"], m.routing_key, b)), arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 20
    while len(got) < n:
        assert time.monotonic() < deadline, f"{queue}: got {len(got)} of {n}"
        c.process_data_events(time_limit=0.05)
    ch.close()
    return got


def confirm_publish(ch: BlockingChannel, exchange: str, items: list[tuple[str, bytes]],
                    headers: dict[str, Any] | None = None) -> None:
    ch.confirm_delivery()
    for rk, body in items:
        ch.basic_publish(exchange, rk, body, pika.BasicProperties(headers=headers),
                         mandatory=True)


def test_add_super_stream_builds_rabbitmqs_topology_and_routes_by_key(
        admin_broker: AdminBroker, api: httpx.Client, conn: pika.BlockingConnection) -> None:
    name = qname("inv")
    r = admin_broker.cli("stream", "add-super-stream", name, "--partitions", "3",
                         "--max-age", "7D")
    assert r.returncode == 0, r.stderr
    assert f"{name}-0, {name}-1, {name}-2" in r.stdout
    ex = api.get(f"/api/exchanges/%2F/{name}").json()
    assert (ex["type"], ex["durable"], ex["arguments"]) == ("direct", True,
                                                          {"x-super-stream": True})
    bs = sorted((b["destination"], b["routing_key"], b["arguments"])
                for b in api.get(f"/api/exchanges/%2F/{name}/bindings/source").json())
    assert bs == [(f"{name}-{i}", str(i), {"x-stream-partition-order": i}) for i in range(3)]
    for i in range(3):
        q = api.get(f"/api/queues/%2F/{name}-{i}").json()
        assert q["type"] == "stream" and q["durable"]
        assert q["arguments"] == {"x-queue-type": "stream", "x-max-age": "7D"}
    again = admin_broker.cli("stream", "add-super-stream", name, "--partitions", "2")
    assert again.returncode == 1
    assert again.stderr.strip() == f"amqplite: there is already an exchange named {name}"
    items = [(str(i % 3), b"k%d-%d" % (i % 3, i)) for i in range(30)]
    confirm_publish(conn.channel(), name, items)
    for p in range(3):
        got = read_all(conn, f"{name}-{p}", 10)
        assert [o for o, _, _ in got] == list(range(10))
        assert [b for _, _, b in got] == [b for rk, b in items if rk == str(p)]
    r = admin_broker.cli("stream", "delete-super-stream", name)
    assert r.returncode == 0, r.stderr
    assert api.get(f"/api/exchanges/%2F/{name}").status_code == 404
    assert all(api.get(f"/api/queues/%2F/{name}-{i}").status_code == 404 for i in range(3))
    missing = admin_broker.cli("stream", "delete-super-stream", name)
    assert missing.returncode == 1 and missing.stderr.startswith("amqplite: no super stream")


def test_hash_routing_keeps_each_key_in_one_partition_in_order(
        admin_broker: AdminBroker, api: httpx.Client, conn: pika.BlockingConnection) -> None:
    name = qname("hash")
    r = admin_broker.cli("stream", "add-super-stream", name, "--routing-keys", "eu,us,ap",
                         "--routing", "hash")
    assert r.returncode == 0, r.stderr
    parts = [f"{name}-eu", f"{name}-us", f"{name}-ap"]  # partition order 0, 1, 2
    keys = [f"order-{i}" for i in range(40)]
    items = [(k, f"{k}/{seq}".encode()) for seq in range(3) for k in keys]
    confirm_publish(conn.channel(), name, items)
    expected: dict[str, list[bytes]] = {p: [] for p in parts}
    for k, body in items:
        expected[parts[hash_partition(k, 3)]].append(body)
    assert all(expected.values()), "40 keys spread over every partition"
    for p in parts:
        got = read_all(conn, p, len(expected[p]))
        assert [b for _, _, b in got] == expected[p]  # per key: seq 0, 1, 2 in order
        assert {rk for _, rk, _ in got} == {k for k in keys if parts[hash_partition(k, 3)] == p}
    assert api.get(f"/api/super-streams/%2F/{name}").json()["routing"] == "hash"
    assert api.delete(f"/api/super-streams/%2F/{name}").status_code == 204


def test_tail_prints_entries_without_consuming(admin_broker: AdminBroker, api: httpx.Client,
                                               conn: pika.BlockingConnection) -> None:
    s = qname("tail")
    ch = conn.channel()
    ch.queue_declare(s, durable=True, arguments={"x-queue-type": "stream"})
    confirm_publish(ch, "", [(s, b'{"n": %d}' % i) for i in range(12)], headers={"h": "v"})
    r = admin_broker.cli("stream", "tail", s, "--from", "first", "--count", "5")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 5
    assert lines[0].split()[0] == "0" and s in lines[0] and '{"h":"v"}' in lines[0]
    assert lines[0].endswith('{"n":0}') and lines[4].endswith('{"n":4}')
    r = admin_broker.cli("stream", "tail", s, "--from", "10", "--json")
    assert [e["offset"] for e in json.loads(r.stdout)] == [10, 11]
    r = admin_broker.cli("stream", "tail", s)  # default: from the last entry
    assert [ln.split()[0] for ln in r.stdout.splitlines()] == ["11"]
    page = api.get(f"/api/streams/%2F/{s}/entries", params={"from": "first", "count": 4}).json()
    assert ([e["offset"] for e in page["entries"]], page["next"]) == ([0, 1, 2, 3], 4)
    def offsets(frm: str) -> list[int]:
        page = api.get(f"/api/streams/%2F/{s}/entries", params={"from": frm}).json()
        return [e["offset"] for e in page["entries"]]

    assert offsets("10m") == list(range(12))
    assert offsets(f"@{int(time.time()) - 600}") == list(range(12))
    assert offsets(f"@{int(time.time()) + 600}") == []
    assert offsets("2000-01-01T00:00:00Z") == list(range(12))
    assert offsets("next") == [] and offsets("-5") == list(range(12))
    q = api.get(f"/api/queues/%2F/{s}").json()
    assert q["consumers"] == 0 and q["stream"]["messages"] == 12  # nothing attached or taken
    missing = admin_broker.cli("stream", "tail", qname("nope"))
    assert missing.returncode == 1
    assert missing.stderr.startswith("amqplite: no queue") and missing.stderr.count("\n") == 1
    plain = qname("plain")
    ch.queue_declare(plain, durable=True)
    notstream = admin_broker.cli("stream", "tail", plain)
    assert notstream.stderr.strip() == f"amqplite: queue '{plain}' in vhost '/' is not a stream"
    err = api.get(f"/api/streams/%2F/{plain}/entries")
    assert err.status_code == 400 and err.json()["error"] == "bad_request"
    err = api.get(f"/api/streams/%2F/{s}/entries", params={"from": "yesterday"})
    assert err.status_code == 400 and "invalid from" in err.json()["reason"]
    assert api.get(f"/api/streams/%2F/{s}/entries", params={"count": 5000}).status_code == 400


def test_tail_follow_prints_new_entries(admin_broker: AdminBroker,
                                        conn: pika.BlockingConnection) -> None:
    s = qname("follow")
    ch = conn.channel()
    ch.queue_declare(s, durable=True, arguments={"x-queue-type": "stream"})
    confirm_publish(ch, "", [(s, b"old")])
    env = dict(os.environ, AMQPLITE_ADMIN_URL=admin_broker.admin_url)
    # from offset 1, the next to come: what it prints can only be appended later
    proc = subprocess.Popen([sys.executable, "-m", "amqplite", "stream", "tail", s,
                             "--from", "1", "--follow", "--count", "3"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        confirm_publish(ch, "", [(s, b"new%d" % i) for i in range(3)])
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert [ln.split()[0] for ln in lines] == ["1", "2", "3"]
    assert [ln.rsplit(" ", 1)[1] for ln in lines] == ["new0", "new1", "new2"]


def test_add_super_stream_is_all_or_nothing(api: httpx.Client,
                                            admin_broker: AdminBroker) -> None:
    name = qname("undo")
    r = api.put(f"/api/super-streams/%2F/{name}", json={"partitions": 2,
                                                         "arguments": {"x-max-age": "7X"}})
    assert r.status_code == 400 and r.json()["reason"].startswith("invalid arg 'x-max-age'")
    assert api.get(f"/api/exchanges/%2F/{name}").status_code == 404
    # an administrator who may configure the exchange and the first partition only
    user = qname("ss-admin")
    assert api.put(f"/api/users/{user}", json={"password": "pw", "tags": "administrator"}
                   ).status_code == 201
    assert api.put(f"/api/permissions/%2F/{user}", json={
        "configure": f"^{name}(-0)?$", "write": ".*", "read": ".*"}).status_code == 201
    with admin_broker.api(auth=(user, "pw")) as limited:
        r = limited.put(f"/api/super-streams/%2F/{name}", json={"partitions": 2})
    assert r.status_code == 401, r.text  # an AMQP refusal: RabbitMQ's 401
    assert api.get(f"/api/exchanges/%2F/{name}").status_code == 404
    assert api.get(f"/api/queues/%2F/{name}-0").status_code == 404
    api.delete(f"/api/users/{user}")
