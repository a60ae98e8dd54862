"""A lean asyncio MQTT 3.1.1 load generator for scripts/bench_mqtt.py: many
publishers, subscribers or idle connections per worker process, so the clients
are not what a broker's figure measures (paho's loop costs a thread and far more
Python per message). Packets are encoded by conformance/mqtt/_raw.py; only the
parsing of a byte stream into packets lives here. Load generation only: no
retransmission, no keepalive pings (connections ask for a keepalive of 600 s).

A worker runs one ``Plan`` and reports one ``Outcome`` through a queue; the
parent and the workers meet at a barrier once everyone is connected and
subscribed (and, for idle connections, again when the parent has measured).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from multiprocessing.synchronize import Barrier
from typing import Any

import attrs

from conformance.mqtt import _raw

KEEPALIVE = 600
LINGER_RESET = struct.pack("ii", 1, 0)  # close with RST: no TIME_WAIT for 10,000 sockets


@attrs.frozen
class Plan:
    """What one worker does: ``subs`` subscriber topics (each expects ``expect``
    messages), ``pubs`` (topic, count) publishers, or ``idle`` bare connections."""

    port: int
    qos: int = 0
    size: int = 100
    subs: tuple[str, ...] = ()
    expect: int = 0
    pubs: tuple[tuple[str, int], ...] = ()
    idle: int = 0
    window: int = 10
    timeout: float = 120.0


@attrs.frozen
class Outcome:
    first_send: float  # time.monotonic(): one clock across processes on Linux
    last_recv: float
    received: int
    expected: int
    connected: int


class Parser:
    """Bytes in, (type, flags, body) out, whatever the chunking."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        self.buf += data
        out: list[tuple[int, int, bytes]] = []
        buf = self.buf
        i = 0
        while True:
            if len(buf) - i < 2:
                break
            length, mult, j = 0, 1, i + 1
            while j < len(buf):
                b = buf[j]
                length += (b & 0x7F) * mult
                mult *= 128
                j += 1
                if not b & 0x80:
                    break
            else:
                break
            if len(buf) - j < length:
                break
            out.append((buf[i] >> 4, buf[i] & 0x0F, bytes(buf[j:j + length])))
            i = j + length
        del buf[:i]
        return out


class Conn:
    """One MQTT 3.1.1 connection: CONNECT/CONNACK done in ``open``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = Parser()
        self.pending: list[tuple[int, int, bytes]] = []

    @classmethod
    async def open(cls, port: int, client_id: str) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        c = cls(reader, writer)
        writer.write(_raw.connect(client_id, 4, keepalive=KEEPALIVE, user="guest",
                                  password="guest"))
        ptype, _f, body = await c.next()
        if ptype != _raw.CONNACK or body[1] != 0:
            raise RuntimeError(f"CONNECT refused: {ptype} {body!r}")
        return c

    async def packets(self) -> list[tuple[int, int, bytes]]:
        """The next batch of whole packets ([] once the broker closed)."""
        while True:
            data = await self.reader.read(262144)
            if not data:
                return []
            got = self.parser.feed(data)
            if got:
                return got

    async def next(self) -> tuple[int, int, bytes]:
        while not self.pending:
            self.pending = await self.packets()
            if not self.pending:
                raise ConnectionError("broker closed the connection")
        return self.pending.pop(0)

    async def subscribe(self, topic: str, qos: int) -> None:
        self.writer.write(_raw.subscribe(1, topic, qos))
        ptype, _f, body = await self.next()
        if ptype != _raw.SUBACK or body[2] == 0x80:
            raise RuntimeError(f"SUBSCRIBE refused: {ptype} {body!r}")

    def reset(self) -> None:
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
        self.writer.close()


class Subscriber:
    def __init__(self, conn: Conn, expect: int) -> None:
        self.conn, self.expect = conn, expect
        self.received, self.last = 0, 0.0

    async def run(self) -> None:
        """Count PUBLISHes (PUBACK each QoS 1 one, in one write per batch)."""
        puback = _raw.PUBACK << 4
        while self.received < self.expect:
            batch = self.conn.pending or await self.conn.packets()
            self.conn.pending = []
            if not batch:
                return
            acks = bytearray()
            for ptype, flags, body in batch:
                if ptype != _raw.PUBLISH:
                    continue
                self.received += 1
                if flags & 0x06:
                    n = (body[0] << 8 | body[1]) + 2
                    acks += bytes((puback, 2)) + body[n:n + 2]
            self.last = time.monotonic()
            if acks:
                self.conn.writer.write(bytes(acks))


async def publish(conn: Conn, topic: str, count: int, qos: int, size: int, window: int) -> None:
    """``count`` PUBLISHes; at QoS 1 at most ``window`` unacknowledged."""
    body = b"x" * size
    if qos == 0:
        packet = _raw.publish(topic, body)
        for i in range(count):
            conn.writer.write(packet)
            if i % 64 == 63:
                await conn.writer.drain()
        await conn.writer.drain()
        return
    credit = asyncio.Semaphore(window)
    acked = 0

    async def acks() -> None:
        nonlocal acked
        while acked < count:
            batch = await conn.packets()
            if not batch:
                raise ConnectionError("broker closed the publisher")
            for ptype, _f, _b in batch:
                if ptype == _raw.PUBACK:
                    acked += 1
                    credit.release()

    reader = asyncio.create_task(acks())
    for i in range(count):
        await credit.acquire()
        conn.writer.write(_raw.publish(topic, body, 1, i % 65535 + 1))
    await reader


async def gather_limited(coros: list[Any], limit: int = 100) -> list[Any]:
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with sem:
            return await c
    return await asyncio.gather(*(one(c) for c in coros))


async def _work(plan: Plan, tag: str, barrier: Barrier) -> Outcome:
    loop = asyncio.get_running_loop()
    wait = lambda: loop.run_in_executor(None, barrier.wait)  # noqa: E731
    if plan.idle:
        conns = await gather_limited([Conn.open(plan.port, f"{tag}-i{i}")
                                      for i in range(plan.idle)])
        await wait()  # all connected: the parent measures
        await wait()  # measured
        for c in conns:
            c.reset()
        return Outcome(0.0, 0.0, 0, 0, len(conns))
    async def subscriber(i: int, topic: str) -> Subscriber:
        c = await Conn.open(plan.port, f"{tag}-s{i}")
        await c.subscribe(topic, plan.qos)
        return Subscriber(c, plan.expect)

    subs = await gather_limited([subscriber(i, t) for i, t in enumerate(plan.subs)])
    pubs = [await Conn.open(plan.port, f"{tag}-p{i}") for i in range(len(plan.pubs))]
    await wait()
    first = time.monotonic()
    tasks = [asyncio.create_task(s.run()) for s in subs]
    tasks += [asyncio.create_task(publish(c, t, n, plan.qos, plan.size, plan.window))
              for c, (t, n) in zip(pubs, plan.pubs, strict=True)]
    _done, late = await asyncio.wait(tasks, timeout=plan.timeout)
    for t in late:
        t.cancel()
    for c in [s.conn for s in subs] + pubs:
        c.reset()
    return Outcome(first, max((s.last for s in subs), default=0.0),
                   sum(s.received for s in subs), plan.expect * len(subs),
                   len(subs) + len(pubs))


def worker(plan: Plan, tag: str, barrier: Barrier, results: Any) -> None:
    """A worker process' body: run ``plan``, put its Outcome on ``results``."""
    try:
        results.put(asyncio.run(_work(plan, tag, barrier)))
    except BaseException as exc:  # reported, so the parent does not wait forever
        barrier.abort()
        results.put(exc)
        raise
