"""aio-pika (asyncio) against the real broker: the same flows a service would run."""

from __future__ import annotations

import asyncio
import uuid

import aio_pika

from tests.brokerproc import BrokerProcess


def test_aio_pika_publish_consume_ack(broker: BrokerProcess) -> None:
    async def main() -> list[bytes]:
        conn = await aio_pika.connect_robust(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            await ch.set_qos(prefetch_count=5)
            q = await ch.declare_queue(f"aio-{uuid.uuid4().hex[:8]}", durable=True)
            ex = await ch.declare_exchange("aio-topic", aio_pika.ExchangeType.TOPIC)
            await q.bind(ex, "orders.#")
            for i in range(20):
                await ex.publish(
                    aio_pika.Message(str(i).encode(),
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=f"orders.eu.{i}",
                )
            got: list[bytes] = []
            async with q.iterator() as it:
                async for msg in it:
                    async with msg.process():
                        got.append(msg.body)
                    if len(got) == 20:
                        break
            await q.delete()
            return got

    got = asyncio.run(asyncio.wait_for(main(), 30))
    assert got == [str(i).encode() for i in range(20)]


def test_aio_pika_get_and_reject(broker: BrokerProcess) -> None:
    async def main() -> tuple[bool, bool]:
        conn = await aio_pika.connect(broker.url)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue(exclusive=True)
            await ch.default_exchange.publish(aio_pika.Message(b"x"), routing_key=q.name)
            m = await q.get(timeout=5)
            first = m.redelivered
            await m.reject(requeue=True)
            m2 = await q.get(timeout=5)
            await m2.ack()
            return bool(first), bool(m2.redelivered)

    assert asyncio.run(asyncio.wait_for(main(), 30)) == (False, True)
