"""aiormq (the asyncio client under aio-pika) against the real broker: the
RabbitMQ-parity cases its users hit, driven the way they write them.

pytest-trio is the default async mode here and aiormq is asyncio, so each test is
a plain sync test running ``asyncio.run(asyncio.wait_for(main(), deadline))``.
Every wait is on a future or a condition with that deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiormq
import pytest
from pamqp import commands as spec

from tests.brokerproc import BrokerProcess

REPLY_TO = "amq.rabbitmq.reply-to"


def run(main: Callable[[], Awaitable[Any]], timeout: float = 30) -> Any:
    return asyncio.run(asyncio.wait_for(main(), timeout))  # type: ignore[arg-type]


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_update_secret_returns_ok_and_connection_stays_usable(broker: BrokerProcess) -> None:
    async def main() -> Any:
        conn = await aiormq.connect(broker.url)
        try:
            ok = await conn.update_secret("guest", reason="rotation", timeout=10)
            ch = await conn.channel()
            q = await ch.queue_declare(name("secret"), auto_delete=True)
            await ch.basic_publish(b"after-rotation", routing_key=q.queue)
            got = await ch.basic_get(q.queue, no_ack=True)
            assert got.body == b"after-rotation"
            return ok
        finally:
            await conn.close()

    ok = run(main)
    assert isinstance(ok, spec.Connection.UpdateSecretOk)


def test_publish_with_confirms_acks_every_message(broker: BrokerProcess) -> None:
    async def main() -> tuple[list[Any], int, Any]:
        conn = await aiormq.connect(broker.url)
        try:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.queue_declare(name("confirm"), auto_delete=False)
            confirms = await asyncio.gather(*(
                ch.basic_publish(str(i).encode(), routing_key=q.queue) for i in range(50)))
            depth = (await ch.queue_declare(q.queue, passive=True)).message_count
            # unroutable + mandatory: the broker sends basic.return before the ack;
            # aiormq turns that into PublishError carrying the returned message
            with pytest.raises(aiormq.exceptions.PublishError) as ei:
                await ch.basic_publish(b"nowhere", routing_key=name("no-such-queue"),
                                       mandatory=True)
            unrouted = ei.value.message
            # the channel survived the return: confirms keep flowing on it
            after = await ch.basic_publish(b"after", routing_key=q.queue)
            assert isinstance(after, spec.Basic.Ack), after
            await ch.queue_delete(q.queue)
            return list(confirms), depth, unrouted
        finally:
            await conn.close()

    confirms, depth, unrouted = run(main)
    assert all(isinstance(c, spec.Basic.Ack) for c in confirms), confirms
    assert depth == 50
    assert isinstance(unrouted.delivery, spec.Basic.Return)
    assert (unrouted.delivery.reply_code, unrouted.delivery.reply_text) == (312, "NO_ROUTE")
    assert unrouted.body == b"nowhere"


def test_direct_reply_to_rpc_between_two_connections(broker: BrokerProcess) -> None:
    async def main() -> tuple[list[tuple[str, bytes]], list[str]]:
        server_conn = await aiormq.connect(broker.url)
        client_conn = await aiormq.connect(broker.url)
        try:
            server = await server_conn.channel()
            q = await server.queue_declare(name("rpc"), auto_delete=True)
            seen_reply_to: list[str] = []

            async def on_request(msg: aiormq.abc.DeliveredMessage) -> None:
                props = msg.header.properties
                seen_reply_to.append(props.reply_to)
                await server.basic_publish(
                    msg.body.upper(), routing_key=props.reply_to,
                    properties=spec.Basic.Properties(correlation_id=props.correlation_id))
                await server.basic_ack(msg.delivery.delivery_tag)

            await server.basic_consume(q.queue, on_request)

            client = await client_conn.channel()
            replies: dict[str, bytes] = {}
            done = asyncio.get_running_loop().create_future()

            async def on_reply(msg: aiormq.abc.DeliveredMessage) -> None:
                replies[msg.header.properties.correlation_id] = msg.body
                if len(replies) == 3 and not done.done():
                    done.set_result(None)

            await client.basic_consume(REPLY_TO, on_reply, no_ack=True)
            for i in range(3):
                await client.basic_publish(
                    f"req{i}".encode(), routing_key=q.queue,
                    properties=spec.Basic.Properties(reply_to=REPLY_TO, correlation_id=str(i)))
            await asyncio.wait_for(done, 10)
            return sorted(replies.items()), seen_reply_to
        finally:
            await client_conn.close()
            await server_conn.close()

    replies, seen = run(main)
    assert replies == [(str(i), f"REQ{i}".encode()) for i in range(3)]
    # the server side never sees the pseudo-queue name, only the rewritten private one
    assert len(seen) == 3
    assert all(r.startswith(REPLY_TO + ".") and len(r) > len(REPLY_TO) + 1 for r in seen), seen


def test_queue_unbind_after_exchange_deleted_succeeds(broker: BrokerProcess) -> None:
    async def main() -> tuple[Any, Any]:
        conn = await aiormq.connect(broker.url)
        try:
            ch = await conn.channel()
            ex, q = name("gone-ex"), name("unbind-q")
            await ch.exchange_declare(ex, exchange_type="direct")
            await ch.queue_declare(q, auto_delete=True)
            await ch.queue_bind(q, ex, routing_key="k")
            await ch.exchange_delete(ex)
            ok = await ch.queue_unbind(q, ex, routing_key="k")
            # the channel is still open: a further command on it answers
            again = await ch.queue_declare(q, passive=True)
            return ok, again
        finally:
            await conn.close()

    ok, again = run(main)
    assert isinstance(ok, spec.Queue.UnbindOk)
    assert again.message_count == 0


def test_channel_number_65535_opens_and_works(broker: BrokerProcess) -> None:
    async def main() -> tuple[int, bytes, bool]:
        conn = await aiormq.connect(broker.url)
        try:
            ch = await conn.channel(channel_number=65535)
            q = await ch.queue_declare(name("ch65535"), auto_delete=True)
            confirm = await ch.basic_publish(b"top", routing_key=q.queue)
            got = await ch.basic_get(q.queue, no_ack=True)
            await ch.close()
            return ch.number, got.body, isinstance(confirm, spec.Basic.Ack)
        finally:
            await conn.close()

    assert run(main) == (65535, b"top", True)


def test_consumer_x_priority_10_preferred_over_priority_0(broker: BrokerProcess) -> None:
    async def main() -> dict[str, int]:
        conn = await aiormq.connect(broker.url)
        try:
            ch = await conn.channel()
            q = await ch.queue_declare(name("prio"), auto_delete=True)
            counts = {"low": 0, "high": 0}
            done = asyncio.get_running_loop().create_future()

            def consumer(label: str) -> Callable[[aiormq.abc.DeliveredMessage], Awaitable[None]]:
                async def cb(msg: aiormq.abc.DeliveredMessage) -> None:
                    counts[label] += 1
                    await ch.basic_ack(msg.delivery.delivery_tag)
                    if counts["low"] + counts["high"] == 20 and not done.done():
                        done.set_result(None)
                return cb

            # the low-priority consumer subscribes first: order must not decide it
            await ch.basic_consume(q.queue, consumer("low"), arguments={"x-priority": 0})
            await ch.basic_consume(q.queue, consumer("high"), arguments={"x-priority": 10})
            pub = await conn.channel()
            for i in range(20):
                await pub.basic_publish(str(i).encode(), routing_key=q.queue)
            await asyncio.wait_for(done, 10)
            return counts
        finally:
            await conn.close()

    assert run(main) == {"low": 0, "high": 20}


def test_basic_get_empty_queue_name_on_fresh_channel_is_channel_404(
        broker: BrokerProcess) -> None:
    async def main() -> tuple[BaseException, bool, bool]:
        conn = await aiormq.connect(broker.url)
        try:
            ch = await conn.channel()
            with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as ei:
                await ch.basic_get("")
            # only the channel died: the connection opens another and works
            ch2 = await conn.channel()
            q = await ch2.queue_declare(name("after-404"), auto_delete=True)
            await ch2.basic_publish(b"still", routing_key=q.queue)
            got = await ch2.basic_get(q.queue, no_ack=True)
            assert got.body == b"still"
            return ei.value, ch.is_closed, conn.is_closed
        finally:
            await conn.close()

    err, ch_closed, conn_closed = run(main)
    assert ch_closed and not conn_closed
    # aiormq maps reply code 404 on channel.close to ChannelNotFoundEntity (checked
    # above); the text is RabbitMQ's
    assert err.args == ("NOT_FOUND - no previously declared queue",), err.args


def test_closing_connection_twice_is_harmless(broker: BrokerProcess) -> None:
    async def main() -> tuple[bool, bool]:
        conn = await aiormq.connect(broker.url)
        ch = await conn.channel()
        await ch.queue_declare(name("close2"), auto_delete=True)
        await conn.close()
        first = conn.is_closed
        await conn.close()
        # and a new connection afterwards is served normally
        other = await aiormq.connect(broker.url)
        try:
            ch2 = await other.channel()
            ok = await ch2.queue_declare(name("after-close"), auto_delete=True)
            return first and conn.is_closed, bool(ok.queue)
        finally:
            await other.close()

    assert run(main) == (True, True)
