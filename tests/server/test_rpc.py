"""RPC clients against the real broker: aio-pika's patterns.RPC, pika over direct
reply-to, and FastStream's request/reply (which uses direct reply-to too)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import aio_pika
import pika
import pytest
from aio_pika.patterns import RPC

from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect

REPLY_TO = "amq.rabbitmq.reply-to"


async def _double(*, x: int) -> int:
    return x * 2


def test_aio_pika_rpc_call_and_close_twice(broker: BrokerProcess) -> None:
    async def main() -> list[int]:
        conn = await aio_pika.connect(broker.url)
        async with conn:
            results: list[int] = []
            for _ in range(2):  # a second RPC on the same channel after the first closed
                ch = await conn.channel()
                rpc = await RPC.create(ch)
                name = f"double-{uuid.uuid4().hex[:8]}"
                await rpc.register(name, _double, auto_delete=True)
                results.append(await rpc.call(name, kwargs={"x": 21}))
                results.append(await getattr(rpc.proxy, name)(x=5))
                await rpc.close()
                await rpc.close()  # a second close is a no-op
                await ch.close()
            return results

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [42, 10, 42, 10]


def test_pika_rpc_over_direct_reply_to(broker: BrokerProcess) -> None:
    server_conn, client_conn = connect(broker), connect(broker)
    try:
        server = server_conn.channel()
        q = f"rpc-{uuid.uuid4().hex[:8]}"
        server.queue_declare(q, auto_delete=True)

        def on_request(ch: Any, method: Any, props: Any, body: bytes) -> None:
            ch.basic_publish("", props.reply_to, body.upper(),
                             pika.BasicProperties(correlation_id=props.correlation_id))
            ch.basic_ack(method.delivery_tag)

        server.basic_consume(q, on_request)

        client = client_conn.channel()
        assert client.queue_declare(REPLY_TO, passive=True).method.queue == REPLY_TO
        replies: dict[str, bytes] = {}
        client.basic_consume(REPLY_TO, lambda c, m, p, b: replies.__setitem__(p.correlation_id, b),
                             auto_ack=True)
        for i in range(5):
            client.basic_publish("", q, f"req{i}".encode(),
                                 pika.BasicProperties(reply_to=REPLY_TO, correlation_id=str(i)))
        deadline = time.monotonic() + 10
        while len(replies) < 5:
            assert time.monotonic() < deadline, f"only {len(replies)} replies"
            server_conn.process_data_events(time_limit=0.01)
            client_conn.process_data_events(time_limit=0.01)
        assert replies == {str(i): f"REQ{i}".encode() for i in range(5)}
    finally:
        for c in (server_conn, client_conn):
            if c.is_open:
                c.close()


def test_faststream_subscriber_publisher_and_request(broker: BrokerProcess) -> None:
    rabbit = pytest.importorskip("faststream.rabbit")
    q = f"fs-{uuid.uuid4().hex[:8]}"
    out = f"{q}-out"

    async def main() -> tuple[Any, list[str]]:
        fs = rabbit.RabbitBroker(broker.url)
        forwarded: list[str] = []
        got = asyncio.Event()

        @fs.subscriber(rabbit.RabbitQueue(q, auto_delete=True))
        @fs.publisher(out)
        async def handle(msg: str) -> str:
            return f"hello {msg}"

        @fs.subscriber(rabbit.RabbitQueue(out, auto_delete=True))
        async def sink(msg: str) -> None:
            forwarded.append(msg)
            if len(forwarded) == 2:  # the request's result is forwarded too
                got.set()

        async with fs:
            await fs.start()
            reply = await fs.request("rpc", q, timeout=10)
            body = await reply.decode()
            await fs.publish("plain", q)
            await asyncio.wait_for(got.wait(), 10)
        return body, forwarded

    body, forwarded = asyncio.run(asyncio.wait_for(main(), 30))
    assert body == "hello rpc"
    assert sorted(forwarded) == ["hello plain", "hello rpc"]
