"""Retained publications through a server inside a trio nursery, so a test can
look at what the broker holds in RAM (pika runs in a worker thread)."""

from __future__ import annotations

from pathlib import Path

import pika
import trio

from amqplite.config import Settings
from amqplite.server.app import Server

N = 5
BODY = 64 * 1024


def _publish(port: int) -> None:
    """A durable history exchange and queue, and N persistent (confirmed) publishes."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("hist", "x-recent-history", durable=True)
        ch.queue_declare("kept", durable=True)
        ch.queue_bind("kept", "hist")
        for i in range(N):
            ch.basic_publish("hist", "k", bytes([i]) * BODY,
                             pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


async def test_after_a_restart_retained_and_queued_share_one_body(tmp_path: Path) -> None:
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path))
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(settings).run)
        await trio.to_thread.run_sync(_publish, server.listen_ports[0])
        server.stop()
    async with trio.open_nursery() as nursery:
        server = await nursery.start(Server(settings).run)
        broker = server.broker
        rs = broker.retained.find(("/", "exchange", "hist"))
        assert rs is not None and len(rs) == N
        entries = list(broker.vhosts["/"].queues["kept"].ready)
        assert len(entries) == N
        bodies = [bytes([i]) * BODY for i in range(N)]
        assert [e.message.body for e in entries] == bodies  # oldest first, intact
        for r, e in zip(rs, entries, strict=True):
            assert r.message.key == e.message.key
            # one object, so one body in RAM, not one per index
            assert e.message is r.message
            assert e.message.body is not None and len(e.message.body) == BODY
        assert broker.retained.totals_all() == (N, N * BODY)
        server.stop()
