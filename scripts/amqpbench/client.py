"""A lean asyncio AMQP 0-9-1 client: one connection, one channel, no codec in the hot path.

pika and aio-pika spend more CPU per message than a broker like RabbitMQ, so
a benchmark built on them measures the client. This one parses frames in
place out of one bytearray, hands deliveries and confirms to plain callbacks,
and lets callers write pre-built frame batches straight to the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections import deque
from collections.abc import Callable

from amqpbench import wire

UNPACK_HEAD = wire.FRAME_HEAD.unpack_from
UNPACK_IDS = struct.Struct(">HH").unpack_from
UNPACK_TAG = struct.Struct(">Q").unpack_from
UNPACK_STAMP = struct.Struct(">q").unpack_from

# on_deliver(delivery_tag, stamp): once per message, stamp = first 8 body bytes (int64)
DeliverCallback = Callable[[int, int], None]
# on_confirm(delivery_tag, multiple, is_ack)
ConfirmCallback = Callable[[int, bool, bool], None]


class BrokerClosed(Exception):
    """The broker closed the connection or channel."""


class AmqpProtocol(asyncio.Protocol):
    """Frame parser plus flow control; RPC replies go to a queue of futures."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.replies: deque[tuple[tuple[int, int], bytes]] = deque()
        self.reply_waiter: asyncio.Future[None] | None = None
        self.on_deliver: DeliverCallback | None = None
        self.on_confirm: ConfirmCallback | None = None
        self.after_batch: Callable[[], None] | None = None
        self.pending_tag = 0
        self.first_body = False
        self.closed: BaseException | None = None
        self.write_ok = asyncio.Event()
        self.write_ok.set()

    # -- asyncio.Protocol -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=4 * 1024 * 1024, low=1024 * 1024)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = exc or BrokerClosed("connection lost")
        self.write_ok.set()
        self._wake()

    def pause_writing(self) -> None:
        self.write_ok.clear()

    def resume_writing(self) -> None:
        self.write_ok.set()

    def data_received(self, data: bytes) -> None:  # the hot path
        buf = self.buffer
        buf += data
        size = len(buf)
        pos = 0
        on_deliver = self.on_deliver
        while size - pos >= 7:
            kind, _channel, length = UNPACK_HEAD(buf, pos)
            end = pos + 7 + length
            if end >= size:
                break
            start = pos + 7
            if kind == wire.FRAME_BODY:
                if self.first_body and on_deliver is not None:
                    self.first_body = False
                    on_deliver(self.pending_tag, UNPACK_STAMP(buf, start)[0])
            elif kind == wire.FRAME_METHOD:
                ids = UNPACK_IDS(buf, start)
                if ids == wire.BASIC_DELIVER:
                    tag_at = start + 5 + buf[start + 4]
                    self.pending_tag = UNPACK_TAG(buf, tag_at)[0]
                    self.first_body = True
                elif ids == wire.BASIC_ACK or ids == wire.BASIC_NACK:
                    if self.on_confirm is not None:
                        tag = UNPACK_TAG(buf, start + 4)[0]
                        self.on_confirm(tag, bool(buf[start + 12] & 1), ids == wire.BASIC_ACK)
                else:
                    self.replies.append((ids, bytes(buf[start + 4 : end])))
                    self._wake()
            pos = end + 1
        del buf[:pos]
        if self.after_batch is not None:
            self.after_batch()

    # -- helpers ------------------------------------------------------------------

    def _wake(self) -> None:
        if self.reply_waiter is not None and not self.reply_waiter.done():
            self.reply_waiter.set_result(None)

    async def next_reply(self) -> tuple[tuple[int, int], bytes]:
        while not self.replies:
            if self.closed is not None:
                raise BrokerClosed(str(self.closed))
            self.reply_waiter = asyncio.get_running_loop().create_future()
            await self.reply_waiter
        ids, args = self.replies.popleft()
        if ids in (wire.CONNECTION_CLOSE, wire.CHANNEL_CLOSE):
            code, tlen = struct.unpack_from(">HB", args)
            raise BrokerClosed(f"{code} {args[3:3 + tlen].decode()}")
        return ids, args


class Connection:
    """One AMQP connection with channel 1 open."""

    def __init__(self, protocol: AmqpProtocol) -> None:
        self.protocol = protocol
        self.frame_max = 131072  # as tuned: body frames are split to fit

    @property
    def transport(self) -> asyncio.Transport:
        assert self.protocol.transport is not None
        return self.protocol.transport

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport's buffer is above its high-water mark."""
        await self.protocol.write_ok.wait()
        if self.protocol.closed is not None:
            raise BrokerClosed(str(self.protocol.closed))

    async def rpc(self, ids: tuple[int, int], args: bytes, expect: tuple[int, int],
                  channel: int = 1) -> bytes:
        self.write(wire.method(channel, ids, args))
        got, reply = await self.protocol.next_reply()
        if got != expect:
            raise BrokerClosed(f"expected {expect}, got {got}")
        return reply

    @classmethod
    async def open(cls, url: str) -> Connection:
        target = wire.Url(url)
        loop = asyncio.get_running_loop()
        _transport, protocol = await loop.create_connection(AmqpProtocol, target.host,
                                                            target.port)
        conn = cls(protocol)
        conn.write(wire.PROTOCOL_HEADER)
        ids, _ = await protocol.next_reply()
        assert ids == wire.CONNECTION_START, ids
        auth = f"\0{target.user}\0{target.password}"
        conn.write(wire.method(0, wire.CONNECTION_START_OK,
                               wire.table({"product": "amqpbench"}) + wire.shortstr("PLAIN")
                               + wire.longstr(auth) + wire.shortstr("en_US")))
        ids, tune = await protocol.next_reply()
        assert ids == wire.CONNECTION_TUNE, ids
        channel_max, frame_max, _ = struct.unpack(">HIH", tune)
        conn.frame_max = frame_max or 131072
        conn.write(wire.method(0, wire.CONNECTION_TUNE_OK,
                               struct.pack(">HIH", channel_max, conn.frame_max, 0)))
        await conn.rpc(wire.CONNECTION_OPEN, wire.shortstr(target.vhost) + b"\x00\x00",
                       wire.CONNECTION_OPEN_OK, channel=0)
        await conn.rpc(wire.CHANNEL_OPEN, b"\x00", wire.CHANNEL_OPEN_OK)
        return conn

    async def queue_declare(self, name: str, durable: bool,
                            arguments: dict[str, str | bool | int] | None = None) -> None:
        bits = 2 if durable else 0
        await self.rpc(wire.QUEUE_DECLARE, b"\x00\x00" + wire.shortstr(name)
                       + struct.pack(">B", bits) + wire.table(arguments), wire.QUEUE_DECLARE_OK)

    async def exchange_declare(self, name: str, kind: str, durable: bool) -> None:
        await self.rpc(wire.EXCHANGE_DECLARE, b"\x00\x00" + wire.shortstr(name)
                       + wire.shortstr(kind) + struct.pack(">B", 2 if durable else 0)
                       + wire.table(), wire.EXCHANGE_DECLARE_OK)

    async def exchange_delete(self, name: str) -> None:
        await self.rpc(wire.EXCHANGE_DELETE, b"\x00\x00" + wire.shortstr(name) + b"\x00",
                       wire.EXCHANGE_DELETE_OK)

    async def queue_bind(self, queue: str, exchange: str, routing_key: str) -> None:
        await self.rpc(wire.QUEUE_BIND, b"\x00\x00" + wire.shortstr(queue)
                       + wire.shortstr(exchange) + wire.shortstr(routing_key) + b"\x00"
                       + wire.table(), wire.QUEUE_BIND_OK)

    async def queue_delete(self, name: str) -> int:
        reply = await self.rpc(wire.QUEUE_DELETE, b"\x00\x00" + wire.shortstr(name) + b"\x00",
                               wire.QUEUE_DELETE_OK)
        return int(struct.unpack(">I", reply)[0])

    async def qos(self, prefetch: int) -> None:
        await self.rpc(wire.BASIC_QOS, struct.pack(">IHB", 0, prefetch, 0), wire.BASIC_QOS_OK)

    async def confirm_select(self) -> None:
        await self.rpc(wire.CONFIRM_SELECT, b"\x00", wire.CONFIRM_SELECT_OK)

    async def consume(self, queue: str, no_ack: bool) -> None:
        await self.rpc(wire.BASIC_CONSUME, b"\x00\x00" + wire.shortstr(queue) + b"\x00"
                       + struct.pack(">B", 2 if no_ack else 0) + wire.table(),
                       wire.BASIC_CONSUME_OK)

    async def close(self) -> None:
        """connection.close handshake: close-ok means the broker processed all we sent."""
        try:
            await self.rpc(wire.CONNECTION_CLOSE, struct.pack(">HBHH", 200, 0, 0, 0),
                           wire.CONNECTION_CLOSE_OK, channel=0)
        finally:
            self.transport.close()


async def drain(url: str, queue: str, count: int, prefetch: int,
                timeout: float | None = None) -> tuple[int, float]:
    """Consume ``queue`` (manual acks, multiple, ``prefetch``) until ``count`` arrived
    or ``timeout``: how many did, and the seconds from consume to the last."""
    conn = await Connection.open(url)
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    state = {"n": 0, "tag": 0, "acked": 0}

    def on_deliver(tag: int, _stamp: int) -> None:
        state["n"] += 1
        state["tag"] = tag
        if state["n"] >= count and not done.done():
            done.set_result(None)

    def after_batch() -> None:
        # a tag once (a read ending inside a delivery brings no new one: 406 if acked again)
        if state["tag"] > state["acked"]:
            state["acked"] = state["tag"]
            conn.write(wire.ack(1, state["tag"], multiple=True))

    conn.protocol.on_deliver = on_deliver
    conn.protocol.after_batch = after_batch
    await conn.qos(prefetch)
    t0 = time.perf_counter()
    await conn.consume(queue, no_ack=False)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done, timeout)
    secs = time.perf_counter() - t0
    await conn.close()
    return state["n"], secs
