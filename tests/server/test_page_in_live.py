"""Page-in end to end: a server inside a trio nursery with a tiny body window
takes persistent messages beyond it, and pika consumes them all back (a
consumer, then basic.get).

A queue with a length limit keeps its entries in RAM and pages only their
bodies, so delivery goes through ``PageIn`` and the server's ``_page_in``
(a plain durable queue would spill whole entries instead). pika and the
/metrics scrape run in worker threads.
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pika
import trio
from prometheus_client.parser import text_string_to_metric_families

from amqplite.admin.http import run_admin
from amqplite.config import Settings
from amqplite.server.app import Server

WINDOW = 10
N = 300
QUEUE = "paged"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _page_ins(admin_url: str) -> float:
    r = httpx.get(admin_url + "/metrics", timeout=30)
    assert r.status_code == 200, r.text
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            if s.name == "amqplite_store_page_ins_total":
                return float(s.value)
    raise AssertionError("amqplite_store_page_ins_total not served")


def _body(i: int) -> bytes:
    return b"%05d:" % i + bytes([i % 251]) * (100 + i % 37)


def _publish(port: int, first: int = 0) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(QUEUE, durable=True, arguments={"x-max-length": 1_000_000})
        for i in range(first, first + N):
            ch.basic_publish("", QUEUE, _body(i), pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def _consume(port: int) -> list[bytes]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        got: list[bytes] = []
        for method, _props, body in ch.consume(QUEUE, inactivity_timeout=30):
            assert method is not None, f"stalled after {len(got)} of {N}"
            got.append(body)
            ch.basic_ack(method.delivery_tag)
            if len(got) == N:
                break
        ch.cancel()
        return got
    finally:
        conn.close()


def _get_all(port: int) -> list[bytes]:
    """basic.get until empty: a get whose head is paged out waits for the read."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        ch = conn.channel()
        got: list[bytes] = []
        while True:
            method, _props, body = ch.basic_get(QUEUE, auto_ack=True)
            if method is None:
                return got
            got.append(body)
    finally:
        conn.close()


async def test_bodies_paged_out_arrive_intact_and_in_order(tmp_path: Path) -> None:
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path),
                        body_window=WINDOW, admin_port=_free_port())
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(
            lambda task_status: Server(settings).run(services=[run_admin],
                                                     task_status=task_status))
        port = server.listen_ports[0]
        await trio.to_thread.run_sync(_publish, port)
        q = server.broker.vhosts["/"].queues[QUEUE]
        paged_out = sum(1 for e in q.ready if e.message.body is None)
        assert paged_out >= N - WINDOW - 50, "bodies beyond the window left RAM"
        assert q.ready.disk_count == 0  # bodies paged, not whole entries
        assert server.admin_url is not None
        before = await trio.to_thread.run_sync(_page_ins, server.admin_url)
        got = await trio.to_thread.run_sync(_consume, port)
        assert got == [_body(i) for i in range(N)]
        after = await trio.to_thread.run_sync(_page_ins, server.admin_url)
        assert after > before
        # basic.get too: the head's body is read back before get-ok
        await trio.to_thread.run_sync(_publish, port, N)
        got = await trio.to_thread.run_sync(_get_all, port)
        assert got == [_body(i) for i in range(N, 2 * N)]
        assert await trio.to_thread.run_sync(_page_ins, server.admin_url) > after
        server.stop()
