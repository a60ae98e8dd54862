"""The audit job over hop rows (``shovelled``, ``federated``) as links write them
(``amqplite.links.audit.record_hop``), beside the broker's own rows, with a real
SparkSession and a real SQLite delivery log, one of them written by a real broker
running a shovel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amqplite.audit.config import AuditConfig, sqlite_target
from amqplite.audit.job import run_audit
from amqplite.links.audit import record_hop
from amqplite.protocol.properties import BasicProperties, encode_properties
from tests.admin.conftest import start_admin_broker
from tests.audit.logdb import MS, US, LogDB, ts
from tests.brokerproc import wait_for
from tests.links.test_shovel import depth, publish, put_shovel

pytestmark = pytest.mark.spark

T0 = ts("2024-03-01T10:00:00")
AS_OF = ts("2024-03-01T10:30:00")  # stuck threshold 1 h: nothing here is stuck
SHOVEL_DEST = "amqp://shovel:secret@b.example:5672/%2F"
UPSTREAM = "amqp://fed:secret@a.example:5672/%2F"


def hop(kind: str, link: str, t: int, *, queue: str, exchange: str, key: str, mid: str,
        tag: str, src: str, dest: str, size: int = 100) -> tuple[Any, ...]:
    """A hop row exactly as the link builds it (a tuple in LOG_FIELDS order)."""
    return record_hop(kind, vhost="/", link=link, consumer_tag=tag, queue=queue,
                      exchange=exchange, routing_key=key, size=size, src_uri=src,
                      dest_uri=dest, ts_us=t,
                      properties=encode_properties(BasicProperties(message_id=mid)))


def test_hops_are_counted_per_link_and_never_lost_or_in_flight(
        spark: Any, tmp_path: Path) -> None:
    """This broker runs a shovel draining its queue ``src`` to another broker (4
    messages) and is the downstream of a federation link (3 messages into ``local-q``
    from the upstream's queue). The report counts each link's messages and bytes, with
    passwords masked; the upstream's queue, named by the hop rows, is no queue of this
    broker; and the hop rows open no (message, queue) pair, so the shovelled messages
    (acked on ``src``) are settled and only the one unacked federated copy is in flight."""
    db = LogDB(tmp_path / "data")
    rows: list[Any] = []
    for i in range(4):
        t = T0 + i * US
        _, mid, r = db.message(t, ["src"], exchange="", routing_key="src",
                               message_id=f"s-{i}", size=10)
        rows += r
        rows.append(db.ev(r[0], "delivered", t + MS, "src", attempt=1, consumer_tag="sh-tag"))
        rows.append(hop("shovelled", "to-b", t + 2 * MS, queue="src", exchange="",
                        key="dst", mid=mid, tag="sh-tag", src="amqp://", dest=SHOVEL_DEST,
                        size=10))
        rows.append(db.ev(r[0], "acked", t + 3 * MS, "src", attempt=1, consumer_tag="sh-tag"))
    fed_queue = "federation: fx -> node-b"
    for i in range(3):
        t = T0 + 60 * US + i * US
        rows.append(hop("federated", "up", t, queue=fed_queue, exchange="fx", key="k",
                        mid=f"f-{i}", tag="federation-link-1", src=UPSTREAM, dest="amqp://",
                        size=20))
        _, _, r = db.message(t, ["local-q"], exchange="fx", routing_key="k",
                             message_id=f"f-{i}", size=20)
        rows += r
        if i < 2:
            rows.append(db.ev(r[0], "acked", t + MS, "local-q", attempt=1, consumer_tag="c"))
    db.add(rows)
    cfg = AuditConfig(db=sqlite_target(tmp_path / "data" / "amqplite.db"), out=tmp_path / "out")
    res = run_audit(cfg, spark=spark, now_us=AS_OF)
    rep = json.loads((res.report_dir / "report.json").read_text())

    assert rep["links"] == [
        {"vhost": "/", "kind": "federated", "link": "up", "queue": fed_queue,
         "from": "amqp://fed:***@a.example:5672/%2F", "to": "amqp://", "count": 3,
         "bytes": 60},
        {"vhost": "/", "kind": "shovelled", "link": "to-b", "queue": "src",
         "from": "amqp://", "to": "amqp://shovel:***@b.example:5672/%2F", "count": 4,
         "bytes": 40},
    ]
    assert rep["totals"]["shovelled"] == 4 and rep["totals"]["federated"] == 3
    queues = {d["queue"]: d for d in rep["queues"]}
    assert set(queues) == {"src", "local-q"}  # the upstream's queue is not one of ours
    assert (queues["src"]["routed"], queues["src"]["acked"]) == (4, 4)
    assert rep["unacked"]["by_queue"] == [
        {"vhost": "/", "queue": "local-q", "dead_lettered": 0, "rejected": 0, "expired": 0,
         "purged": 0, "in_flight": 1, "stuck": 0, "total": 1}]
    assert rep["stuck"]["count"] == 0 and rep["redelivered"]["count"] == 0
    (day_dir,) = res.daily_dirs  # the day's report has the same links
    assert json.loads((day_dir / "report.json").read_text())["links"] == rep["links"]
    html = (res.report_dir / "report.html").read_text()
    assert "Forwarded by shovels and federation links" in html and "to-b" in html
    assert "secret" not in html and "secret" not in json.dumps(rep)


def test_a_real_shovel_run_is_reported_per_link(spark: Any, tmp_path: Path) -> None:
    """A real broker shovels 20 messages from ``src`` to ``dst`` (both local); a client
    takes and acks them on ``dst``. The audit of its log counts the 20 under the
    shovel, and every message is settled on both queues: none in flight, none stuck."""
    broker = start_admin_broker(tmp_path / "data")
    try:
        publish(broker, "src", [b"m-%d" % i for i in range(20)])
        put_shovel(broker, "s1", {"src-uri": "amqp://", "src-queue": "src",
                                  "dest-uri": "amqp://", "dest-queue": "dst"})
        wait_for(lambda: depth(broker, "dst") == 20 and depth(broker, "src") == 0, 30,
                 what="the 20 messages shovelled")
        conn = broker.connect()
        ch = conn.channel()
        for _ in range(20):
            m, _, _ = ch.basic_get("dst")
            assert m is not None
            ch.basic_ack(m.delivery_tag)
        conn.close()
    finally:
        assert broker.proc.stop() == 0  # flushes the store: every event is in the log
    cfg = AuditConfig(db=sqlite_target(tmp_path / "data" / "amqplite.db"), out=tmp_path / "out")
    rep = json.loads((run_audit(cfg, spark=spark).report_dir / "report.json").read_text())
    assert [(d["kind"], d["link"], d["queue"], d["from"], d["to"], d["count"])
            for d in rep["links"]] == [("shovelled", "s1", "src", "amqp://", "amqp://", 20)]
    queues = {d["queue"]: d for d in rep["queues"]}
    assert (queues["src"]["acked"], queues["dst"]["routed"], queues["dst"]["acked"]) == (
        20, 20, 20)
    assert rep["unacked"]["by_queue"] == [] and rep["stuck"]["count"] == 0
