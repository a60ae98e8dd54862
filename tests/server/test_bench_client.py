"""The benchmark's load generator (scripts/amqpbench) speaks valid AMQP for big bodies."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from amqpbench.client import Connection
from amqpbench.scenario import publish

SIZE = 300_000  # three body frames at the default frame_max of 131,072


def test_bodies_above_frame_max_are_split_and_arrive_whole(broker: BrokerProcess) -> None:
    """One body frame above frame_max is a framing error that closes the connection
    (both brokers): the 1 MiB points of bench_scale.py measured nothing but that."""
    async def run() -> int:
        conn = await Connection.open(broker.url)
        await conn.queue_declare("bench-big-bodies", durable=True)
        nacks = await publish(conn, "bench-big-bodies", 3, SIZE, persistent=True,
                              confirms=True)
        await conn.close()
        return nacks

    assert asyncio.run(asyncio.wait_for(run(), 30)) == 0
    c = connect(broker)
    try:
        ch = c.channel()
        sizes = []
        for _ in range(3):
            _m, _p, body = ch.basic_get("bench-big-bodies", auto_ack=True)
            sizes.append(len(body) if body is not None else None)
        assert sizes == [SIZE] * 3
        ch.queue_delete("bench-big-bodies")
    finally:
        c.close()
