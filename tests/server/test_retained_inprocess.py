"""Retained publications through a server inside a trio nursery, so a test can
look at what the broker holds in RAM (pika runs in a worker thread)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
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


@contextlib.asynccontextmanager
async def _restarted(settings: Settings) -> AsyncIterator[Server]:
    """A server that took the publishes and stopped; then a new one on its data."""
    async with trio.open_nursery() as nursery:
        first: Server = await nursery.start(Server(settings).run)
        await trio.to_thread.run_sync(_publish, first.listen_ports[0])
        first.stop()
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(settings).run)
        yield server
        server.stop()


async def test_after_a_restart_retained_and_queued_share_one_body(tmp_path: Path) -> None:
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path))
    async with _restarted(settings) as server:
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


def _get(port: int, n: int) -> list[bytes]:
    """basic.get ``n`` messages from "kept" (acked)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        got: list[bytes] = []
        while len(got) < n:
            m, _p, body = ch.basic_get("kept", auto_ack=True)
            if m is not None:
                got.append(body)
        return got
    finally:
        conn.close()


async def test_spilled_entries_read_back_share_the_retained_body(tmp_path: Path) -> None:
    """Entries past the body window stay in the store at start-up; read back as the
    queue drains, they take the retained message too."""
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path), body_window=2)
    async with _restarted(settings) as server:
        q = server.broker.vhosts["/"].queues["kept"]
        assert q.ready.disk_count == N - 2  # spilled at start-up
        with trio.fail_after(20):  # the third get finds the head empty: a read-back
            got = await trio.to_thread.run_sync(_get, server.listen_ports[0], 3)
        assert got == [bytes([i]) * BODY for i in range(3)]
        assert q.ready.disk_count == 0
        rs = server.broker.retained.find(("/", "exchange", "hist"))
        assert rs is not None
        kept = {r.message.key: r.message for r in rs}
        entries = list(q.ready)
        assert len(entries) == N - 3
        assert all(e.message is kept[e.message.key] for e in entries)
