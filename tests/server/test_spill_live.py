"""Spilling against a real broker process: bounded RAM per queue, order kept, restarts.

A small ``body_window`` makes queues spill after a few hundred messages; a
paging ratio near zero puts the broker under memory pressure from the start
(so transient messages spill too) while the alarm itself stays far away.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pika

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

N = 6000
WINDOW = 200


def _broker(data: Path) -> BrokerProcess:
    return BrokerProcess(data, None, env={"AMQPLITE_BODY_WINDOW": str(WINDOW),
                                          "AMQPLITE_MEMORY_PAGING_RATIO": "0.0001"}).start()


def _queue(b: BrokerProcess, name: str) -> dict:  # type: ignore[type-arg]
    r = httpx.get(f"{b.admin_url}/api/queues/%2F/{name}", auth=("guest", "guest"), timeout=10)
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def _publish(ch: pika.adapters.blocking_connection.BlockingChannel, q: str, n: int,
             mode: int, start: int = 0) -> None:
    ch.confirm_delivery()
    for i in range(start, start + n):
        ch.basic_publish("", q, b"%06d" % i + b"x" * 1000,
                         pika.BasicProperties(delivery_mode=mode))


def _drain(ch: pika.adapters.blocking_connection.BlockingChannel, q: str, n: int) -> list[int]:
    got: list[int] = []
    ch.basic_qos(prefetch_count=500)
    for method, _props, body in ch.consume(q, inactivity_timeout=20):
        assert method is not None, f"stalled after {len(got)} of {n}"
        got.append(int(body[:6]))
        ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    ch.cancel()
    return got


def test_transient_backlog_spills_and_drains_in_order(tmp_path: Path) -> None:
    b = _broker(tmp_path / "d")
    try:
        c = connect(b)
        ch = c.channel()
        ch.queue_declare("tq")
        _publish(ch, "tq", N, 1)
        info = wait_for(lambda: (i := _queue(b, "tq"))["messages_paged_out"] > N // 2 and i,
                        20, what="transient entries to spill")
        assert info["messages_ready"] == N
        assert info["messages_ram"] < N // 2
        assert _drain(ch, "tq", N) == list(range(N))
        assert _queue(b, "tq")["messages"] == 0
        c.close()
    finally:
        b.stop()


def test_spilled_durable_queue_survives_kill_9_and_transient_rows_do_not(
        tmp_path: Path) -> None:
    data = tmp_path / "d"
    b = _broker(data)
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("dq", durable=True)
    _publish(ch, "dq", N, 2)  # confirmed: on disk
    _publish(ch, "dq", 500, 1, start=N)  # transient, in a durable queue
    wait_for(lambda: _queue(b, "dq")["messages_paged_out"] > N // 2, 20,
             what="entries to spill")
    b.kill()  # SIGKILL
    b = BrokerProcess(data, b.port, env=b.env).start()
    try:
        info = _queue(b, "dq")
        assert info["messages_ready"] == N, "every confirmed message, no transient one"
        assert info["messages_paged_out"] > N // 2, "recovery leaves the spilled run on disk"
        c = connect(b)
        assert _drain(c.channel(), "dq", N) == list(range(N))
        c.close()
    finally:
        b.stop()
