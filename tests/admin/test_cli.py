"""The admin CLI: the real ``amqplite`` command against a real broker, output checked."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tests.admin.conftest import AdminBroker, counts, death_headers, publish, qname
from tests.brokerproc import free_port, wait_for


def ok(r: Any) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout  # type: ignore[no-any-return]


def fails(r: Any, text: str) -> None:
    """Exit status 1 and one clear line on stderr, no traceback."""
    assert r.returncode == 1, r.stdout
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("amqplite: ") and text in lines[-1], r.stderr
    assert "Traceback" not in r.stderr


def row(out: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is ``first``."""
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{out}")


# ------------------------------------------------------------------ listing
def test_queues_table_and_json(admin_broker: AdminBroker, channel: Any) -> None:
    q = qname("cliq")
    channel.queue_declare(q, durable=True)
    for _ in range(3):
        publish(channel, q, b"12345")
    out = ok(admin_broker.cli("queues"))
    cells = row(out, q)
    assert cells[1:4] == ["3", "0", "0"]  # ready, unacked, consumers
    assert "15 B" in " ".join(cells)
    assert re.search(r"\n\d+ queues?, \d+ messages? \(\d+ ready, \d+ unacked\)", out)
    data = json.loads(ok(admin_broker.cli("queues", "--json")))
    mine = next(x for x in data if x["name"] == q)
    assert mine["messages_ready"] == 3 and mine["durable"] is True


def test_exchanges_bindings_connections_consumers(admin_broker: AdminBroker, conn: Any,
                                                  channel: Any) -> None:
    x, q = qname("clix"), qname("cliq")
    channel.exchange_declare(x, "topic")
    channel.queue_declare(q)
    channel.queue_bind(q, x, "a.#")
    tag = channel.basic_consume(q, lambda *a: None)
    assert row(ok(admin_broker.cli("exchanges")), x)[1] == "topic"
    assert row(ok(admin_broker.cli("bindings")), x)[1:4] == [q, "queue", "a.#"]
    assert "(default)" not in ok(admin_broker.cli("bindings"))
    assert "(default)" in ok(admin_broker.cli("bindings", "--all"))
    out = ok(admin_broker.cli("connections"))
    assert "Pika Python Client Library" in out
    assert re.search(r"\n\d+ connections?\b", out)
    conns = json.loads(ok(admin_broker.cli("connections", "--json")))
    assert any(c["user"] == "guest" for c in conns)
    cells = row(ok(admin_broker.cli("consumers")), q)
    assert cells[1] == tag and "manual" in cells
    cons = json.loads(ok(admin_broker.cli("consumers", "--json")))
    assert any(c["consumer_tag"] == tag for c in cons)


def test_connections_close(admin_broker: AdminBroker) -> None:
    with admin_broker.api() as api:
        before = {x["name"] for x in api.get("/api/connections").json()}
        c = admin_broker.connect()
        (name,) = {x["name"] for x in api.get("/api/connections").json()} - before
    try:
        out = ok(admin_broker.cli("connections", "close", name))
        assert f"Closed connection {name}." in out
        with admin_broker.api() as api:
            # gone, or closing while the (idle) client has not yet answered close-ok
            assert all(x["state"] == "closing" for x in api.get("/api/connections").json()
                       if x["name"] == name)
    finally:
        with contextlib.suppress(Exception):
            c.close()
    fails(admin_broker.cli("connections", "close", "1.2.3.4:5"), "no connection")


def test_policies_set_list_clear(admin_broker: AdminBroker) -> None:
    name = qname("pol")
    ok(admin_broker.cli("policies", "set", name, "^cli-dlq", '{"max-length": 1000}',
                        "--priority", "2"))
    cells = row(ok(admin_broker.cli("policies")), name)
    assert cells[1:4] == ["^cli-dlq", "queues", "2"]
    listed = json.loads(ok(admin_broker.cli("policies", "list", "--json")))
    assert {"name": name, "definition": {"max-length": 1000}}.items() <= next(
        p for p in listed if p["name"] == name).items()
    fails(admin_broker.cli("policies", "set", name, "(", '{"max-length": 1}'), "regex")
    fails(admin_broker.cli("policies", "set", name, ".", "{not json"), "not valid JSON")
    ok(admin_broker.cli("policies", "clear", name))
    assert name not in ok(admin_broker.cli("policies"))
    fails(admin_broker.cli("policies", "clear", name), "no policy")


# ------------------------------------------------------- publish/get/purge
def test_publish_get_purge_delete(admin_broker: AdminBroker, channel: Any) -> None:
    q = qname("cliq")
    channel.queue_declare(q, durable=True)
    out = ok(admin_broker.cli("publish", "-k", q, '{"n": 1}', "-P",
                              "content_type=application/json", "-H", "tenant=acme"))
    assert "Published 8 bytes" in out
    r = admin_broker.cli("publish", "-k", q, "--file", "-", input=b"\x00\x01\x02")
    assert r.returncode == 0
    out = ok(admin_broker.cli("get", q, "-n", "5"))
    assert row(out, "1")[-1] == '{"n":1}'
    assert "00 01 02" in out and "2 messages" in out
    got = json.loads(ok(admin_broker.cli("get", q, "--json")))
    assert got[0]["properties"]["headers"] == {"tenant": "acme"}
    assert got[0]["redelivered"] is True  # the previous get requeued it, as RabbitMQ does
    with admin_broker.api() as api:
        assert counts(api, q) == (2, 0)
    got = json.loads(ok(admin_broker.cli("get", q, "--ackmode", "ack_requeue_false", "--json")))
    assert got[0]["message_count"] == 1
    assert "Purged 1 message from queue" in ok(admin_broker.cli("purge", q))
    assert json.loads(ok(admin_broker.cli("purge", q, "--json"))) == {"purged": 0}
    ok(admin_broker.cli("delete", "queue", q))
    fails(admin_broker.cli("purge", q), f"no queue '{q}' in vhost '/'")
    r = admin_broker.cli("publish", "-k", "nowhere", "x")
    assert r.returncode == 0 and "no queue matched" in r.stderr


# ------------------------------------------------------------------- errors
def test_errors_are_one_line(admin_broker: AdminBroker) -> None:
    fails(admin_broker.cli("queues", "--password", "wrong"), "wrong credentials for user 'guest'")
    fails(admin_broker.cli("queues", env={"AMQPLITE_USER": "nobody"}), "wrong credentials")
    fails(admin_broker.cli("vhosts", "add", "v-mon", "--user", "monitor", "--password", "monitor-secret"),
          "permission denied")
    url = f"http://127.0.0.1:{free_port()}"
    fails(admin_broker.cli("queues", "--admin-url", url),
          f"cannot reach the admin API at {url} (is the broker running with --admin-port?)")
    fails(admin_broker.cli("dlq", "list", "no-such-queue"), "no queue 'no-such-queue'")
    fails(admin_broker.cli("dlq", "list", "q", "--filter", "colour=red"), "unknown filter field")
    # a usage error is in the same style (after click's usage line), status 2
    r = admin_broker.cli("queues", "--no-such-flag")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("amqplite: ")


@pytest.mark.parametrize("where", ["wrong path", "AMQP port"])
def test_admin_url_that_is_not_the_admin_api(admin_broker: AdminBroker, where: str) -> None:
    url = (admin_broker.admin_url + "/management" if where == "wrong path"
           else f"http://127.0.0.1:{admin_broker.proc.port}")
    for args in (["queues"], ["trace", "some-id"], ["purge", "q"]):
        fails(admin_broker.cli(*args, "--admin-url", url), f"no amqplite admin API at {url}")


def test_get_requeue_counts_requeued_messages_as_left(admin_broker: AdminBroker,
                                                      channel: Any) -> None:
    q = qname("left")
    channel.queue_declare(q, durable=True)
    for i in range(3):
        publish(channel, q, f"m{i}".encode())
    assert "2 messages, 3 left in the queue" in ok(admin_broker.cli("get", q, "-n", "2"))
    out = ok(admin_broker.cli("get", q, "-n", "2", "--ackmode", "reject_requeue_true"))
    assert "2 messages, 3 left in the queue" in out
    out = ok(admin_broker.cli("get", q, "-n", "2", "--ackmode", "ack_requeue_false"))
    assert "2 messages, 1 left in the queue" in out


def test_trace_goes_through_the_admin_api(admin_broker: AdminBroker, channel: Any) -> None:
    q = qname("traced")
    channel.queue_declare(q, durable=True)
    publish(channel, q, b"x", message_id="trace-me-" + q)
    method, _p, _b = channel.basic_get(q)
    channel.basic_ack(method.delivery_tag)
    mid = "trace-me-" + q

    def events() -> list[str]:
        r = admin_broker.cli("trace", mid, "--json")
        return [e["event"] for e in json.loads(r.stdout)] if r.returncode == 0 else []

    wait_for(lambda: events()[-1:] == ["acked"], 10, what="the ack in the delivery log")
    assert events()[0] == "published" and "routed" in events()
    out = ok(admin_broker.cli("trace", mid))
    assert f"Message {mid}" in out and "acked" in out and q in out
    # no rows: the same error and exit status with or without --json
    for extra in ([], ["--json"]):
        r = admin_broker.cli("trace", "no-such-message", *extra)
        fails(r, "no delivery-log rows for message 'no-such-message'")
        assert r.stdout == ""


# ---------------------------------------------------------------------- dlq
def _dlq_setup(channel: Any, n_work: int = 2) -> tuple[str, str]:
    work, dlq = qname("work"), qname("cli-dlq")
    channel.queue_declare(work, durable=True)
    channel.queue_declare(dlq, durable=True)
    t = dt.datetime(2024, 5, 1, 12, 0, 0)
    publish(channel, dlq, b'{"order": 1}', death_headers(work, "rejected", 3, t),
            content_type="application/json", message_id="o-1")
    publish(channel, dlq, b"plain text", death_headers(work, "expired", 1, t,
                                                      routing_keys=["orders.eu"]),
            message_id="o-2")
    publish(channel, dlq, bytes(range(250, 256)), death_headers("other", "maxlen"),
            message_id="o-3")
    return work, dlq


def test_dlq_list_does_not_consume(admin_broker: AdminBroker, channel: Any) -> None:
    work, dlq = _dlq_setup(channel)
    out = ok(admin_broker.cli("dlq", "list", dlq))
    r1 = row(out, "1")
    assert r1[1:4] == ["rejected", work, "(default)"] and r1[4] == work and r1[5] == "3"
    assert "2024-05-01T12:00:00Z" in r1 and r1[-1] == '{"order":1}'
    assert row(out, "2")[1] == "expired" and "orders.eu" in row(out, "2")
    assert row(out, "3")[-6:] == ["fa", "fb", "fc", "fd", "fe", "ff"]
    assert f"3 messages in '{dlq}'" in out
    data = json.loads(ok(admin_broker.cli("dlq", "list", dlq, "--json")))
    assert [m["reason"] for m in data] == ["rejected", "expired", "maxlen"]
    first = data[0]
    for key in ("reason", "queue", "exchange", "routing_keys", "count", "first_death_at",
                "size", "body"):
        assert key in first
    assert (first["queue"], first["exchange"], first["routing_keys"], first["count"]) == (
        work, "", [work], 3)
    assert first["first_death_at"] == "2024-05-01T12:00:00Z" and first["size"] == 12
    assert first["body"] == '{"order":1}' and data[1]["body"] == "plain text"
    assert data[2]["body_encoding"] == "hex"
    only = json.loads(ok(admin_broker.cli("dlq", "list", dlq, "--json", "--filter",
                                          "reason=exp*")))
    assert [m["message_id"] for m in only] == ["o-2"]
    with admin_broker.api() as api:
        assert counts(api, dlq) == (3, 0)
        peek = api.get(f"/api/queues/%2F/{dlq}/messages").json()
    assert all(m["redelivered"] is False and m["delivery_count"] == 0 for m in peek)


def test_dlq_show(admin_broker: AdminBroker, channel: Any) -> None:
    work, dlq = _dlq_setup(channel)
    out = ok(admin_broker.cli("dlq", "show", dlq, "1"))
    assert "Died: rejected in queue" in out and "(3 times)" in out
    assert '"x-first-death-queue": "' + work in out
    assert '"order": 1' in out  # pretty-printed JSON body
    out = ok(admin_broker.cli("dlq", "show", dlq, "--id", "o-3"))
    assert "00000000  fa fb fc fd fe ff" in out
    m = json.loads(ok(admin_broker.cli("dlq", "show", dlq, "2", "--json")))
    assert m["death"]["reason"] == "expired" and m["payload"] == "plain text"
    fails(admin_broker.cli("dlq", "show", dlq, "9"), "no message #9")


def test_dlq_replay_to_origin_and_queue(admin_broker: AdminBroker, channel: Any) -> None:
    work, dlq = _dlq_setup(channel)
    r = admin_broker.cli("dlq", "replay", dlq)
    # o-3 died in 'other', which does not exist: reported, left in place, exit 1
    fails(r, "1 message could not be replayed (origin queue 'other' does not exist)")
    assert f"Replayed 2 messages from '{dlq}'; 1 left." in r.stdout
    with admin_broker.api() as api:
        assert counts(api, work) == (2, 0) and counts(api, dlq) == (1, 0)
        back = api.get(f"/api/queues/%2F/{work}/messages").json()
    assert [m["message_id"] for m in back] == ["o-1", "o-2"]
    assert back[0]["properties"]["content_type"] == "application/json"
    res = json.loads(ok(admin_broker.cli("dlq", "replay", dlq, "--queue", work, "--json")))
    assert res == {"replayed": 1, "skipped": 0, "errors": [], "remaining": 0}


def test_dlq_replay_limit_and_filter(admin_broker: AdminBroker, channel: Any) -> None:
    work, dlq = _dlq_setup(channel)
    res = json.loads(ok(admin_broker.cli("dlq", "replay", dlq, "--filter", "reason=expired",
                                         "--json")))
    assert res["replayed"] == 1 and res["remaining"] == 2
    res = json.loads(ok(admin_broker.cli("dlq", "replay", dlq, "--limit", "1", "--json")))
    assert res["replayed"] == 1
    with admin_broker.api() as api:
        ids = [m["message_id"] for m in api.get(f"/api/queues/%2F/{work}/messages").json()]
    assert ids == ["o-2", "o-1"]


def test_dlq_replay_of_real_dead_letters(admin_broker: AdminBroker, channel: Any) -> None:
    """Messages dead-lettered by the broker itself (basic.reject) go back to their queue."""
    work, dlq = qname("work"), qname("cli-dlq")
    channel.queue_declare(dlq, durable=True)
    channel.queue_declare(work, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    for i in range(3):
        publish(channel, work, f"job {i}".encode())
    for _ in range(3):
        method, _, _ = channel.basic_get(work)
        channel.basic_reject(method.delivery_tag, requeue=False)
    with admin_broker.api() as api:
        wait_for(lambda: counts(api, dlq) == (3, 0), 10, what="dead letters")
    data = json.loads(ok(admin_broker.cli("dlq", "list", dlq, "--json")))
    assert [(m["reason"], m["queue"], m["count"]) for m in data] == [("rejected", work, 1)] * 3
    assert all(m["first_death_at"] for m in data)
    assert "Replayed 3 messages" in ok(admin_broker.cli("dlq", "replay", dlq))
    with admin_broker.api() as api:
        assert counts(api, work) == (3, 0) and counts(api, dlq) == (0, 0)


def test_dlq_export_json_and_cbor(admin_broker: AdminBroker, channel: Any,
                                  tmp_path: Path) -> None:
    _, dlq = _dlq_setup(channel)
    f = tmp_path / "dead.json"
    out = ok(admin_broker.cli("dlq", "export", dlq, str(f)))
    assert f"Exported 3 messages from '{dlq}'" in out
    data = json.loads(f.read_text())
    assert [m["message_id"] for m in data] == ["o-1", "o-2", "o-3"]
    assert data[0]["death"]["reason"] == "rejected" and data[2]["payload_encoding"] == "base64"
    c = tmp_path / "dead.cbor"
    ok(admin_broker.cli("dlq", "export", dlq, str(c), "--format", "cbor"))
    items = cbor2.loads(c.read_bytes())
    assert items[2]["body"] == bytes(range(250, 256))
    assert items[0]["properties"]["headers"]["x-first-death-reason"] == "rejected"
    with admin_broker.api() as api:
        assert counts(api, dlq) == (3, 0)  # export never consumes


def test_dlq_purge(admin_broker: AdminBroker, channel: Any) -> None:
    _, dlq = _dlq_setup(channel)
    assert f"Purged 3 dead letters from '{dlq}'." in ok(admin_broker.cli("dlq", "purge", dlq))
    with admin_broker.api() as api:
        assert counts(api, dlq) == (0, 0)
