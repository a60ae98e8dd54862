"""One benchmark run: a publisher process and a consumer process against one broker.

Separate processes give each side its own core, so the figure is the
broker's, not one Python event loop's. Each message body starts with the
publish time (perf_counter_ns: CLOCK_MONOTONIC, shared by all processes on
Linux) so the consumer measures end-to-end latency on receipt.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue as queue_mod
import struct
import time
import uuid
from array import array
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from typing import Any

from amqpbench import wire
from amqpbench.client import Connection


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    persistent: bool  # durable queue + delivery_mode 2
    confirms: bool
    manual_ack: bool
    prefetch: int
    rate: int = 0  # publishes per second, paced by the clock (0: as fast as windows allow)


SCENARIOS = {
    "persistent": Scenario("persistent", "persistent, confirms, manual ack, prefetch 100",
                           persistent=True, confirms=True, manual_ack=True, prefetch=100),
    "transient": Scenario("transient", "transient, no confirms, no-ack consumer",
                          persistent=False, confirms=False, manual_ack=False, prefetch=0),
    "fixedrate": Scenario("fixedrate", "persistent, confirms, manual ack, prefetch 100, "
                          "5,000 msgs/s paced by the clock (latency at a steady load)",
                          persistent=True, confirms=True, manual_ack=True, prefetch=100,
                          rate=5000),
}


@dataclass
class RunResult:
    received: int
    seconds: float  # first publish -> last receive
    rate: float  # msgs/s end to end
    p50_ms: float
    p99_ms: float
    nacks: int = 0
    error: str = ""
    p999_ms: float = 0.0
    in_flight: float = 0.0  # mean messages published and not yet received, per send
    unconfirmed: float = 0.0  # mean messages published and not yet confirmed, per send


# -- consumer ---------------------------------------------------------------------


async def _consume(url: str, queue: str, sc: Scenario, count: int, ready: Event,
                   deadline: float, progress: Any) -> dict[str, Any]:
    conn = await Connection.open(url)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    latencies = array("q")
    now = time.perf_counter_ns
    state = {"count": 0, "tag": 0, "acked": 0, "first_stamp": 0, "last": 0}

    def on_deliver(tag: int, stamp: int) -> None:
        t = now()
        latencies.append(t - stamp)
        if not state["count"]:
            state["first_stamp"] = stamp
        state["count"] += 1
        state["tag"] = tag
        state["last"] = t
        if state["count"] >= count and not done.done():
            done.set_result(None)

    def after_batch() -> None:
        # One multiple-ack per read batch: at most prefetch (100) messages each.
        if sc.manual_ack and state["tag"] > state["acked"]:
            conn.write(wire.ack(1, state["tag"], multiple=True))
            state["acked"] = state["tag"]
        progress.value = state["count"]  # tells the publisher how far we are

    conn.protocol.on_deliver = on_deliver
    conn.protocol.after_batch = after_batch
    if sc.manual_ack:
        await conn.qos(sc.prefetch)
    await conn.consume(queue, no_ack=not sc.manual_ack)
    ready.set()
    error = ""
    try:
        await asyncio.wait_for(done, max(1.0, deadline - time.monotonic()))
    except TimeoutError:
        error = f"timeout: received {state['count']} of {count}"
    await conn.close()
    ordered = sorted(latencies)
    n = len(ordered)
    seconds = (state["last"] - state["first_stamp"]) / 1e9 if n else 0.0
    return {
        "received": n,
        "seconds": seconds,
        "rate": n / seconds if seconds > 0 else 0.0,
        "p50_ms": ordered[n // 2] / 1e6 if n else 0.0,
        "p99_ms": ordered[min(n - 1, int(n * 0.99))] / 1e6 if n else 0.0,
        "p999_ms": ordered[min(n - 1, int(n * 0.999))] / 1e6 if n else 0.0,
        "error": error,
    }


def consumer_entry(url: str, queue: str, sc: Scenario, count: int, ready: Event,
                   results: Any, deadline: float, progress: Any) -> None:
    try:
        out = asyncio.run(_consume(url, queue, sc, count, ready, deadline, progress))
    except Exception as exc:  # report instead of dying silently in a child
        out = {"error": f"consumer: {exc!r}"}
    results.put(("consumer", out))


# -- publisher --------------------------------------------------------------------


async def publish(conn: Connection, queue: str, count: int, size: int, persistent: bool,
                  confirms: bool, window: int = 1000, batch: int = 64,
                  progress: Any = None, inflight: int = 0, rate: int = 0,
                  sampled: dict[str, float] | None = None) -> int:
    """Publish `count` messages of `size` bytes; return the number of nacks.

    Frames are pre-built; per message only the 8-byte timestamp is packed.
    With confirms, at most `window` messages are unconfirmed at any time.
    With `progress` (the consumer's received count in shared memory) and
    `inflight`, at most `inflight` messages are published but not yet
    received, so the queue stays short and latency means transit time, not
    the depth of a backlog a flooding publisher built. With `rate`, message
    number i leaves at start + i / rate (small batches, one per millisecond):
    an open loop, so latency is the broker's and not set by the windows.
    `sampled` gets the mean in-flight and unconfirmed counts seen at each send:
    by Little's law, latency ~ in flight / throughput.
    """
    prefix = (wire.method(1, wire.BASIC_PUBLISH, b"\x00\x00" + wire.shortstr("")
                          + wire.shortstr(queue) + b"\x00")
              + wire.content_header(1, size, 2 if persistent else 1)
              + wire.FRAME_HEAD.pack(wire.FRAME_BODY, 1, size))
    tail = bytes(size - 8) + wire.FRAME_END
    pack_stamp = struct.Struct(">q").pack
    now = time.perf_counter_ns
    state = {"confirmed": 0, "nacks": 0}
    wakeup = asyncio.Event()

    def on_confirm(tag: int, _multiple: bool, is_ack: bool) -> None:
        # Confirms arrive in ascending tag order (the conformance suite checks it),
        # so the highest tag seen is the number of settled messages.
        state["confirmed"] = max(state["confirmed"], tag)
        if not is_ack:
            state["nacks"] += 1
        wakeup.set()

    conn.protocol.on_confirm = on_confirm
    if confirms:
        await conn.confirm_select()
    sent = 0
    started = time.monotonic()
    if rate:
        batch = max(1, rate // 1000)
    while sent < count:
        room = count - sent
        if rate:
            due = started + sent / rate
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        if confirms:
            room = min(room, window - (sent - state["confirmed"]))
            if room <= 0:
                wakeup.clear()
                await wakeup.wait()
                continue
        if inflight and progress is not None:
            room = min(room, inflight - (sent - progress.value))
            if room <= 0:
                await asyncio.sleep(0.0005)  # throttle: poll the consumer's progress
                continue
        n = min(room, batch)
        if sampled is not None:
            sampled["n"] = sampled.get("n", 0) + 1
            sampled["unconfirmed"] = sampled.get("unconfirmed", 0) + sent - state["confirmed"]
            if progress is not None:
                sampled["in_flight"] = sampled.get("in_flight", 0) + sent - progress.value
        parts: list[bytes] = []
        for _ in range(n):
            parts += (prefix, pack_stamp(now()), tail)
        conn.write(b"".join(parts))
        sent += n
        await conn.drain()
        await asyncio.sleep(0)  # let confirms be read between batches
    while confirms and state["confirmed"] < count:
        wakeup.clear()
        await wakeup.wait()
    return state["nacks"]


async def _publish_main(url: str, queue: str, sc: Scenario, count: int, size: int,
                        ready: Event, go: Event, progress: Any,
                        inflight: int) -> dict[str, Any]:
    conn = await Connection.open(url)
    if sc.confirms:
        await conn.confirm_select()
    ready.set()
    go.wait()  # blocking on purpose: nothing else runs until the start signal
    sampled: dict[str, float] = {}
    nacks = await publish(conn, queue, count, size, sc.persistent, sc.confirms,
                          progress=progress, inflight=0 if sc.rate else inflight, rate=sc.rate,
                          sampled=sampled)
    await conn.close()
    n = sampled.get("n", 0) or 1
    return {"nacks": nacks, "in_flight": sampled.get("in_flight", 0) / n,
            "unconfirmed": sampled.get("unconfirmed", 0) / n if sc.confirms else 0.0}


def publisher_entry(url: str, queue: str, sc: Scenario, count: int, size: int,
                    ready: Event, go: Event, results: Any, progress: Any,
                    inflight: int) -> None:
    try:
        out = asyncio.run(_publish_main(url, queue, sc, count, size, ready, go, progress,
                                        inflight))
    except Exception as exc:
        out = {"error": f"publisher: {exc!r}"}
    results.put(("publisher", out))


# -- orchestration ------------------------------------------------------------------


async def _setup(url: str, queue: str, durable: bool, delete_only: bool = False) -> None:
    conn = await Connection.open(url)
    await conn.queue_delete(queue)
    if not delete_only:
        await conn.queue_declare(queue, durable=durable)
    await conn.close()


def drive(procs: list[Any], ready: list[Event], go: Event, results: Any, deadline: float,
          on_result: Any = None, on_go: Any = None) -> dict[str, dict[str, Any]]:
    """Start the processes, wait until each is ready, give the start signal and
    collect one result per process (``on_result(who)`` runs as each arrives);
    the processes are always joined (terminated if stuck)."""
    outcome: dict[str, dict[str, Any]] = {}
    try:
        for proc in procs:
            proc.start()
        for event in ready:
            if not event.wait(timeout=60):
                raise RuntimeError("benchmark processes did not get ready in 60 s")
        if on_go is not None:
            on_go()
        go.set()
        while len(outcome) < len(procs):
            try:
                who, out = results.get(timeout=max(1.0, deadline - time.monotonic() + 10))
            except queue_mod.Empty:
                break
            outcome[who] = out
            if on_result is not None:
                on_result(who)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    return outcome


def run_once(url: str, sc: Scenario, count: int, size: int, timeout: float = 120.0,
             inflight: int = 1000, on_go: Any = None) -> RunResult:
    """Fresh queue, consumer first, then the publisher; always cleans up."""
    if size < 16:
        raise ValueError("--size must be at least 16 bytes (the body carries a timestamp)")
    ctx = mp.get_context("spawn")
    queue = f"amqpbench-{sc.key}-{uuid.uuid4().hex[:8]}"
    asyncio.run(_setup(url, queue, durable=sc.persistent))
    results = ctx.Queue()
    ready_c, ready_p, go = ctx.Event(), ctx.Event(), ctx.Event()
    progress = ctx.RawValue("q", 0)  # single writer (consumer), single reader
    deadline = time.monotonic() + timeout
    consumer = ctx.Process(target=consumer_entry,
                           args=(url, queue, sc, count, ready_c, results, deadline, progress))
    publisher = ctx.Process(target=publisher_entry,
                            args=(url, queue, sc, count, size, ready_p, go, results, progress,
                                  inflight))
    try:
        outcome = drive([consumer, publisher], [ready_c, ready_p], go, results, deadline,
                        on_go=on_go)
    finally:
        asyncio.run(_setup(url, queue, durable=sc.persistent, delete_only=True))
    cons = outcome.get("consumer", {"error": "no consumer result"})
    pub = outcome.get("publisher", {"error": "no publisher result"})
    error = "; ".join(e for e in (cons.get("error", ""), pub.get("error", "")) if e)
    return RunResult(
        received=int(cons.get("received", 0)), seconds=float(cons.get("seconds", 0.0)),
        rate=float(cons.get("rate", 0.0)), p50_ms=float(cons.get("p50_ms", 0.0)),
        p99_ms=float(cons.get("p99_ms", 0.0)), nacks=int(pub.get("nacks", 0)), error=error,
        p999_ms=float(cons.get("p999_ms", 0.0)), in_flight=float(pub.get("in_flight", 0.0)),
        unconfirmed=float(pub.get("unconfirmed", 0.0)),
    )
