"""The stream scenario: one publisher with confirms appends to a stream, then three
consumers read it from ``first`` at the same time (1 KiB entries by default).

Reported: the publish rate (confirmed entries per second) and the read rate of
each consumer (entries per second from its first to its last delivery); the
bench prints the median consumer. Publisher and consumers are separate
processes, as in the other scenarios.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import statistics
import struct
import time
import uuid
from multiprocessing.synchronize import Event
from typing import Any

from amqpbench import wire
from amqpbench.client import Connection
from amqpbench.scenario import drive
from amqpbench.topology import (
    Sampler,
    Topology,
    TopologyResult,
    _names,
    _publisher_entry,
    broker_process,
)

READERS = 3
PREFETCH = 1000
STREAM = Topology("stream", "stream: 1 publisher with confirms, then 3 consumers reading "
                  "from first concurrently (rate = publish; extra = median read rate)", "", 1)


async def _setup(url: str, queue: str, delete: bool = False) -> None:
    conn = await Connection.open(url)
    if delete:
        await conn.queue_delete(queue)
    else:
        await conn.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
    await conn.close()


async def _read(url: str, queue: str, expect: int, ready: Event, go: Event,
                deadline: float) -> dict[str, Any]:
    conn = await Connection.open(url)
    now = time.perf_counter_ns
    state = {"n": 0, "first": 0, "last": 0, "tag": 0, "acked": 0}
    done = asyncio.get_running_loop().create_future()

    def on_deliver(dtag: int, _stamp: int) -> None:
        t = now()
        if not state["n"]:
            state["first"] = t
        state["n"] += 1
        state["last"], state["tag"] = t, dtag
        if state["n"] >= expect and not done.done():
            done.set_result(None)

    def after_batch() -> None:
        # only a tag not acked yet: a read that ends inside a delivery brings no new
        # tag, and acking the same tag twice is a 406 (on RabbitMQ too)
        if state["tag"] > state["acked"]:
            state["acked"] = state["tag"]
            conn.write(wire.ack(1, state["tag"], multiple=True))

    conn.protocol.on_deliver = on_deliver
    conn.protocol.after_batch = after_batch
    await conn.qos(PREFETCH)
    ready.set()
    while not go.wait(0.01):
        await asyncio.sleep(0)
    started = now()
    await conn.rpc(wire.BASIC_CONSUME, b"\x00\x00" + wire.shortstr(queue) + b"\x00"
                   + struct.pack(">B", 0) + wire.table({"x-stream-offset": "first"}),
                   wire.BASIC_CONSUME_OK)
    error = ""
    try:
        await asyncio.wait_for(done, max(1.0, deadline - time.monotonic()))
    except TimeoutError:
        error = f"timeout: read {state['n']} of {expect}"
    await conn.close()
    secs = (state["last"] - started) / 1e9 if state["n"] else 0.0
    return {"received": state["n"], "rate": state["n"] / secs if secs > 0 else 0.0,
            "error": error}


def _reader_entry(url: str, queue: str, expect: int, ready: Event, go: Event, deadline: float,
                  results: Any, who: str) -> None:
    try:
        out = asyncio.run(_read(url, queue, expect, ready, go, deadline))
    except Exception as exc:
        out = {"error": f"{who}: {exc!r}"}
    results.put((who, out))


def run_stream(url: str, count: int, size: int, timeout: float = 180.0) -> TopologyResult:
    """Fresh stream; publish ``count`` entries with confirms, then read them three times
    at once; the stream is deleted afterwards."""
    ctx = mp.get_context("spawn")
    tag = uuid.uuid4().hex[:8]
    _, (queue,) = _names(STREAM, tag)
    asyncio.run(_setup(url, queue))
    sampler = Sampler(broker_process(url))
    deadline = time.monotonic() + timeout
    try:
        results = ctx.Queue()
        ready, go = ctx.Event(), ctx.Event()
        pub = ctx.Process(target=_publisher_entry, args=(url, STREAM, tag, count, size, ready,
                                                         go, results))
        outcome = drive([pub], [ready], go, results, deadline, on_go=sampler.start)
        p = outcome.get("publisher", {"error": "no publisher result"})
        if p.get("error") or p.get("nacks"):
            return TopologyResult(error=p.get("error") or f"{p['nacks']} nacks")
        readies = [ctx.Event() for _ in range(READERS)]
        go2 = ctx.Event()
        procs = [ctx.Process(target=_reader_entry, args=(url, queue, count, readies[i], go2,
                                                         deadline, results, f"reader{i}"))
                 for i in range(READERS)]
        reads = drive(procs, readies, go2, results, deadline)
    finally:
        cpu, rss = sampler.stop() if sampler.started else (0.0, 0.0)
        asyncio.run(_setup(url, queue, delete=True))
    errors = [r.get("error", "") for r in reads.values() if r.get("error")]
    if len(reads) < READERS:
        errors.append(f"{READERS - len(reads)} readers gave no result")
    rates = sorted(float(r.get("rate", 0.0)) for r in reads.values())
    per = "/".join(f"{r:.0f}" for r in rates)
    median = statistics.median(rates or [0])
    return TopologyResult(rate=float(p.get("rate", 0.0)), cpu_pct=cpu, rss_mib=rss,
                          extra=f"read median {median:.0f} msg/s ({per})",
                          error="; ".join(errors), read_rate=median)
