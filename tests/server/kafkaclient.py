"""Helpers of the Kafka end-to-end tests: a broker subprocess with a Kafka listener on a
free port, and the clients' bootstrap address."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server.mqttclient import listening


@contextlib.contextmanager
def kafka_broker(data_dir: Path, *extra: str) -> Iterator[BrokerProcess]:
    """A broker subprocess with a Kafka listener on a free port, stopped afterwards."""
    b = BrokerProcess(data_dir, None, "--kafka-port", str(free_port()), *extra).start()
    try:
        wait_for(lambda: listening(kafka_port(b)), 30, what="the Kafka listener")
        yield b
    finally:
        b.stop()


def kafka_port(b: BrokerProcess) -> int:
    return int(b.extra[b.extra.index("--kafka-port") + 1])


def bootstrap(b: BrokerProcess) -> str:
    return f"127.0.0.1:{kafka_port(b)}"


async def aiokafka_read(bs: str, topic: str, n: int, deadline: float,
                        group_id: str | None = None) -> list[bytes]:
    """``n`` values read by an aiokafka consumer from the earliest offset (in a group,
    committed afterwards), within ``deadline`` seconds."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    co = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group_id,
                          auto_offset_reset="earliest")
    await co.start()
    out: list[bytes] = []
    try:
        async with asyncio.timeout(deadline):
            while len(out) < n:
                for msgs in (await co.getmany(timeout_ms=500)).values():
                    out += [m.value for m in msgs]
        if group_id is not None:
            await co.commit()
    finally:
        await co.stop()
    return out
