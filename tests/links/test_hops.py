"""The delivery log's ``shovelled`` rows: ``amqplite trace`` follows a message
across two real brokers by its message-id, through the broker that runs the
shovel (pushing from the source or pulling into the destination)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from amqplite.links.audit import hop_reason, parse_hop_reason, record_hop
from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for
from tests.links.test_shovel import depth, name, put_shovel


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[tuple[AdminBroker, AdminBroker]]:
    a, b = start_admin_broker(tmp_path / "a"), start_admin_broker(tmp_path / "b")
    yield a, b
    for x in (a, b):
        x.proc.stop()


def publish_with_id(broker: AdminBroker, queue: str, message_id: str) -> None:
    conn = broker.connect()
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"follow me",
                         pika.BasicProperties(delivery_mode=2, message_id=message_id))
    finally:
        conn.close()


def trace(broker: AdminBroker, message_id: str) -> list[dict[str, Any]]:
    r = broker.cli("trace", message_id, "--json")
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout))


def events(rows: list[dict[str, Any]]) -> list[str]:
    return [r["event"] for r in rows]


def test_trace_follows_a_message_across_brokers(
        brokers: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = brokers
    port_a, port_b = a.amqp_url.rsplit(":", 1)[1], b.amqp_url.rsplit(":", 1)[1]
    # push: the shovel runs on A, the source; its row is in A's log
    src, dst, push = name("src"), name("dst"), name("push")
    mid = f"m-{uuid.uuid4().hex}"
    put_shovel(a, push, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                         "dest-queue": dst})
    publish_with_id(a, src, mid)
    wait_for(lambda: depth(b, dst) == 1, 30, what="the message on B")

    def hop_on(broker: AdminBroker) -> list[dict[str, Any]]:
        return [r for r in trace(broker, mid) if r["event"] == "shovelled"] \
            if broker.cli("trace", mid, "--json").returncode == 0 else []

    wait_for(lambda: hop_on(a), 20, what="the shovelled row on A")
    on_a = trace(a, mid)
    assert events(on_a)[0] == "published" and "acked" in events(on_a)
    hop = hop_on(a)
    assert len(hop) == 1
    assert hop[0]["queue"] == src and hop[0]["exchange"] == "" and hop[0]["routing_key"] == dst
    assert hop[0]["consumer_tag"] == f"amq.ctag-shovel-{push}"
    assert [r["consumer_tag"] for r in on_a if r["event"] == "acked"] == [
        f"amq.ctag-shovel-{push}"]
    assert f"'{push}'" in hop[0]["reason"] and port_b in hop[0]["reason"]
    assert "guest:guest" not in hop[0]["reason"]
    # the destination has the same message under the same id
    on_b = trace(b, mid)
    assert events(on_b)[0] == "published" and on_b[0]["routing_key"] == dst
    assert "shovelled" not in events(on_b)
    # the human table names the hop too
    table = a.cli("trace", mid)
    assert table.returncode == 0 and "shovelled" in table.stdout and push in table.stdout

    # pull: the shovel runs on B, the destination; its row is in B's log, before
    # B's own publish of the copy
    src2, dst2, pull = name("src"), name("dst"), name("pull")
    mid2 = f"m-{uuid.uuid4().hex}"
    put_shovel(b, pull, {"src-uri": a.amqp_url, "src-queue": src2, "dest-uri": "amqp://",
                         "dest-queue": dst2})
    publish_with_id(a, src2, mid2)
    wait_for(lambda: depth(b, dst2) == 1, 30, what="the pulled message on B")
    wait_for(lambda: any(r["event"] == "shovelled" for r in trace(b, mid2)), 20,
             what="the shovelled row on B")
    on_b2 = trace(b, mid2)
    hop2 = [r for r in on_b2 if r["event"] == "shovelled"]
    assert len(hop2) == 1 and port_a in hop2[0]["reason"] and hop2[0]["queue"] == src2
    assert "published" in events(on_b2)
    on_a2 = trace(a, mid2)
    assert "acked" in events(on_a2) and "shovelled" not in events(on_a2)
    acked = [r for r in on_a2 if r["event"] == "acked"]
    # the source's ack names the shovel's consumer tag, as the hop row on B does
    assert acked[0]["consumer_tag"] == hop2[0]["consumer_tag"] == f"amq.ctag-shovel-{pull}"


def test_record_hop_row() -> None:
    """The row a federation link writes too: its kind, the message id, masked URIs."""
    from amqplite.protocol.properties import BasicProperties, encode_properties
    props = encode_properties(BasicProperties(message_id="abc"))
    row = record_hop("federated", vhost="/", link="up", consumer_tag="t", queue="q",
                     exchange="x", routing_key="k", properties=props, size=3,
                     src_uri="amqp://u:secret@h:1", dest_uri="amqp://", ts_us=5)
    assert row[:8] == (5, "federated", "/", "x", "k", "q", "abc", None)
    assert "secret" not in row[-1] and "'up'" in row[-1]
    assert record_hop("shovelled", vhost="/", link="s", consumer_tag="t", queue=None,
                      exchange="", routing_key="k", properties=b"\x00\x00", size=0,
                      src_uri="amqp://", dest_uri="amqp://")[6] == ""


def test_hop_reason_reads_back() -> None:
    """The audit groups hops by link from the reason text: it reads back, a quote in
    the link's name included, URIs masked; other text is no hop."""
    why = hop_reason("federated", "it's up", "amqp://u:pw@a:5672/v", "amqp://")
    assert parse_hop_reason(why) == ("federated", "it's up", "amqp://u:***@a:5672/v",
                                     "amqp://")
    assert parse_hop_reason(hop_reason("shovelled", "s", "amqp://", "amqp://h")) == (
        "shovelled", "s", "amqp://", "amqp://h")
    assert parse_hop_reason("rejected") is None and parse_hop_reason(None) is None
