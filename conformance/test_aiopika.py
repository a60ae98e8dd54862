"""The same broker through aio-pika (asyncio), the other client family we must serve.

pytest-asyncio is not used: each test runs its coroutine with asyncio.run and
bounds it with asyncio.timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aio_pika
import aio_pika.exceptions
import aiormq.exceptions
import pytest

from conformance.conftest import Names, amqp_url

TIMEOUT = 10.0


def run(scenario: Callable[[aio_pika.abc.AbstractConnection], Awaitable[None]]) -> None:
    async def main() -> None:
        async with asyncio.timeout(TIMEOUT):
            conn = await aio_pika.connect(amqp_url())
            try:
                await scenario(conn)
            finally:
                await conn.close()

    asyncio.run(main())


def test_publish_confirm_and_iterate(names: Names) -> None:
    queue_name = names.queue()

    async def scenario(conn: aio_pika.abc.AbstractConnection) -> None:
        ch = await conn.channel()  # publisher confirms on by default
        await ch.set_qos(prefetch_count=10)
        queue = await ch.declare_queue(queue_name, durable=True)
        for i in range(20):
            await ch.default_exchange.publish(
                aio_pika.Message(str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                 headers={"i": i}),
                routing_key=queue_name,
            )
        got: list[tuple[bytes, object]] = []
        async with queue.iterator() as it:
            async for message in it:
                async with message.process():
                    got.append((message.body, message.headers["i"]))
                if len(got) == 20:
                    break
        assert got == [(str(i).encode(), i) for i in range(20)]

    run(scenario)


def test_topic_exchange_and_get(names: Names) -> None:
    ex_name, queue_name = names.exchange(), names.queue()

    async def scenario(conn: aio_pika.abc.AbstractConnection) -> None:
        ch = await conn.channel()
        ex = await ch.declare_exchange(ex_name, aio_pika.ExchangeType.TOPIC)
        queue = await ch.declare_queue(queue_name)
        await queue.bind(ex, "orders.*.created")
        await ex.publish(aio_pika.Message(b"yes"), routing_key="orders.eu.created")
        await ex.publish(aio_pika.Message(b"no"), routing_key="orders.eu.deleted")
        message = await queue.get(no_ack=True)
        assert message.body == b"yes"
        assert message.routing_key == "orders.eu.created"
        assert await queue.get(fail=False) is None

    run(scenario)


def test_mandatory_unroutable_is_returned(names: Names) -> None:
    async def scenario(conn: aio_pika.abc.AbstractConnection) -> None:
        ch = await conn.channel(on_return_raises=True)
        with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
            await ch.default_exchange.publish(aio_pika.Message(b"x"),
                                              routing_key=names.queue("nobody"), mandatory=True)
        returned = info.value.message
        assert returned is not None
        assert returned.delivery.reply_code == 312  # type: ignore[union-attr]
        assert returned.delivery.reply_text == "NO_ROUTE"  # type: ignore[union-attr]

    run(scenario)


def test_passive_declare_missing_queue(names: Names) -> None:
    missing = names.queue("missing")

    async def scenario(conn: aio_pika.abc.AbstractConnection) -> None:
        ch = await conn.channel()
        with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as info:
            await ch.declare_queue(missing, passive=True)
        assert f"NOT_FOUND - no queue '{missing}' in vhost '/'" in str(info.value)

    run(scenario)


def test_reply_to_rpc_round_trip(names: Names) -> None:
    service = names.queue("service")

    async def scenario(conn: aio_pika.abc.AbstractConnection) -> None:
        server_ch = await conn.channel()
        client_ch = await conn.channel()
        requests = await server_ch.declare_queue(service)
        callback = await client_ch.declare_queue("", exclusive=True)
        assert callback.name.startswith("amq.gen-")

        async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                await server_ch.default_exchange.publish(
                    aio_pika.Message(message.body.upper(), correlation_id=message.correlation_id),
                    routing_key=message.reply_to or "",
                )

        await requests.consume(serve)
        await client_ch.default_exchange.publish(
            aio_pika.Message(b"ping", reply_to=callback.name, correlation_id="c-1"),
            routing_key=service,
        )
        async with callback.iterator(no_ack=True) as it:
            async for reply in it:
                assert (reply.body, reply.correlation_id) == (b"PING", "c-1")
                break

    run(scenario)


def test_nack_requeue_redelivers(names: Names) -> None:
    queue_name = names.queue()

    async def scenario(conn: aio_pika.abc.AbstractConnection) -> None:
        ch = await conn.channel()
        queue = await ch.declare_queue(queue_name)
        await ch.default_exchange.publish(aio_pika.Message(b"again"), routing_key=queue_name)
        first = await queue.get()
        assert not first.redelivered
        await first.nack(requeue=True)
        second = await queue.get()
        assert second.redelivered and second.body == b"again"
        await second.ack()

    run(scenario)
