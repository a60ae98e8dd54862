"""Scenarios with more than one queue, exchange or connection (S3-S6 of the
performance issue), plus the broker's CPU and RSS while each one runs.

- fanout:  a durable fanout exchange to 10 durable queues, 10 consumers (one
  connection each, manual ack, prefetch 100), persistent, confirms.
- topic:   a durable topic exchange with 1,000 bindings over 10 queues; each
  routing key matches one binding; otherwise as fanout.
- backlog: publish the whole count (persistent, confirms) into one durable
  queue with no consumer, then drain it: publish rate, drain rate, peak RSS.
- idle200: 200 connections, each consuming its own queue; one publisher sends
  1,000 msg/s in total, round robin: latency and CPU of mostly idle clients.

As in scenario.py the publisher and the consumers are separate processes
(the consumers share one event loop); bodies carry their publish time.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import struct
import threading
import time
import uuid
from array import array
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from typing import Any

import psutil

from amqpbench import wire
from amqpbench.client import Connection
from amqpbench.scenario import drive


@dataclass(frozen=True)
class Topology:
    key: str
    title: str
    exchange_type: str  # "" for the default exchange
    queues: int
    bindings_per_queue: int = 1
    persistent: bool = True
    confirms: bool = True
    rate: int = 0  # total publishes per second, 0: as fast as confirms allow
    backlog: bool = False
    #: with a rate: publishes written together per step (0: rate // 200, a step every
    #: 5 ms); the broker wakes once per step, so this splits per-wake-up from
    #: per-message cost
    step: int = 0


TOPOLOGIES = {
    "fanout": Topology("fanout", "fanout to 10 durable queues, 10 consumers, confirms "
                       "(rate = deliveries/s)", "fanout", 10),
    "topic": Topology("topic", "topic exchange, 1,000 bindings, 10 queues, confirms "
                      "(rate = publishes/s)", "topic", 10, bindings_per_queue=100),
    "backlog": Topology("backlog", "persistent backlog into one durable queue, then drained "
                        "(rate = publish; extra = drain rate)", "", 1, backlog=True),
    "idle200": Topology("idle200", "200 connections, each consuming its own queue, "
                        "1,000 msg/s in total (latency and broker CPU)", "", 200,
                        persistent=False, confirms=False, rate=1000),
}


@dataclass
class TopologyResult:
    rate: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    cpu_pct: float = 0.0  # broker CPU over the run, % of one core
    rss_mib: float = 0.0  # broker peak RSS over the run
    extra: str = ""
    error: str = ""
    read_rate: float = 0.0  # stream: median consumer's read rate
    p999_ms: float = 0.0
    in_flight: float = 0.0  # S1/S2/fixedrate: see scenario.RunResult
    unconfirmed: float = 0.0


def broker_process(url: str) -> psutil.Process | None:
    """The process listening on the URL's port (amqplite or RabbitMQ's beam)."""
    port = wire.Url(url).port
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return psutil.Process(c.pid)
    return None


def _tree(proc: psutil.Process | None) -> list[psutil.Process]:
    """The broker process and every process under it."""
    if proc is None:
        return []
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def tree_cpu_each(proc: psutil.Process | None) -> dict[int, float]:
    """User + system CPU seconds of each process of the tree, by pid (processes gone
    are skipped)."""
    each: dict[int, float] = {}
    for p in _tree(proc):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        each[p.pid] = t.user + t.system
    return each


def tree_cpu_seconds(proc: psutil.Process | None) -> float:
    """User + system CPU seconds of the process tree."""
    return sum(tree_cpu_each(proc).values())


def tree_rss(proc: psutil.Process | None) -> int:
    """Resident bytes of the process tree (processes gone are skipped)."""
    total = 0
    for p in _tree(proc):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


class Sampler:
    """Peak RSS and CPU time of the broker while a run lasts (a thread, every 50 ms).

    The broker is its process and every process under it: amqplite's store
    writer, RabbitMQ's helper ports. CPU and RSS are the sums over all of them.
    """

    def __init__(self, proc: psutil.Process | None) -> None:
        self.proc = proc
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._each0: dict[int, float] = {}
        self._cpu0 = 0.0
        self._t0 = time.monotonic()
        self.split = ""  # after stop: "main X % + children Y %" (where the CPU went)

    def _cpu(self) -> float:
        return tree_cpu_seconds(self.proc)

    def _cpu_each(self) -> dict[int, float]:
        return tree_cpu_each(self.proc)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            if self.proc is not None:
                self.peak = max(self.peak, tree_rss(self.proc))

    @property
    def started(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> Sampler:
        self._each0 = self._cpu_each()
        self._cpu0, self._t0 = sum(self._each0.values()), time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> tuple[float, float]:
        """(CPU % of one core, peak RSS MiB) since start."""
        self._stop.set()
        self._thread.join()
        secs = max(time.monotonic() - self._t0, 1e-9)
        each = self._cpu_each()
        if self.proc is not None and self.proc.pid in each:
            main = each[self.proc.pid] - self._each0.get(self.proc.pid, 0.0)
            rest = sum(v - self._each0.get(k, 0.0) for k, v in each.items()
                       if k != self.proc.pid)
            self.split = f"main {100 * main / secs:.1f} % + children {100 * rest / secs:.1f} %"
        return 100 * (sum(each.values()) - self._cpu0) / secs, self.peak / 2**20


def _names(tp: Topology, tag: str) -> tuple[str, list[str]]:
    exchange = f"amqpbench-{tp.key}-{tag}" if tp.exchange_type else ""
    return exchange, [f"amqpbench-{tp.key}-{tag}-{i}" for i in range(tp.queues)]


def _routing_keys(tp: Topology, queues: list[str]) -> list[str]:
    if tp.exchange_type == "topic":
        return [f"k.{q}.{j}.x" for q in range(tp.queues) for j in range(tp.bindings_per_queue)]
    if tp.exchange_type == "fanout":
        return [""]
    return queues  # default exchange: the queue names


async def _setup(url: str, tp: Topology, tag: str, delete: bool = False) -> None:
    conn = await Connection.open(url)
    exchange, queues = _names(tp, tag)
    if delete:
        for q in queues:
            await conn.queue_delete(q)
        if exchange:
            await conn.exchange_delete(exchange)
        await conn.close()
        return
    if exchange:
        await conn.exchange_declare(exchange, tp.exchange_type, durable=True)
    for i, q in enumerate(queues):
        await conn.queue_declare(q, durable=tp.persistent)
        if tp.exchange_type == "fanout":
            await conn.queue_bind(q, exchange, "")
        elif tp.exchange_type == "topic":
            for j in range(tp.bindings_per_queue):
                await conn.queue_bind(q, exchange, f"k.{i}.{j}.*")
    await conn.close()


# -- consumers ------------------------------------------------------------------------


async def _consume(url: str, tp: Topology, tag: str, expect: int, ready: Event,
                   go_drain: Event | None, deadline: float) -> dict[str, Any]:
    _exchange, queues = _names(tp, tag)
    latencies = array("q")
    now = time.perf_counter_ns
    state = {"n": 0, "first": 0, "last": 0}
    done = asyncio.get_running_loop().create_future()
    conns = []
    if go_drain is not None:
        ready.set()
        while not go_drain.wait(0.01):  # backlog: the queue fills first
            await asyncio.sleep(0)
    for q in queues:
        conn = await Connection.open(url)
        tags = [0, 0]  # last delivery tag seen, last one acked

        def on_deliver(dtag: int, stamp: int, tags: list[int] = tags) -> None:
            t = now()
            latencies.append(t - stamp)
            if not state["n"]:
                state["first"] = t
            state["n"] += 1
            state["last"] = t
            tags[0] = dtag
            if state["n"] >= expect and not done.done():
                done.set_result(None)

        def after_batch(conn: Connection = conn, tags: list[int] = tags) -> None:
            # a tag once: a read ending inside a delivery brings no new one, and
            # acking a tag twice is a 406 on any broker
            if tp.confirms and tags[0] > tags[1]:
                tags[1] = tags[0]
                conn.write(wire.ack(1, tags[0], multiple=True))

        conn.protocol.on_deliver = on_deliver
        conn.protocol.after_batch = after_batch
        if tp.confirms:
            await conn.qos(100)
        await conn.consume(q, no_ack=not tp.confirms)
        conns.append(conn)
    if go_drain is None:
        ready.set()
    error = ""
    try:
        await asyncio.wait_for(done, max(1.0, deadline - time.monotonic()))
    except TimeoutError:
        error = f"timeout: received {state['n']} of {expect}"
    for conn in conns:
        await conn.close()
    ordered = sorted(latencies)
    n = len(ordered)
    secs = (state["last"] - state["first"]) / 1e9 if n > 1 else 0.0
    return {"received": n, "rate": n / secs if secs > 0 else 0.0,
            "p50_ms": ordered[n // 2] / 1e6 if n else 0.0,
            "p99_ms": ordered[min(n - 1, int(n * 0.99))] / 1e6 if n else 0.0,
            "p999_ms": ordered[min(n - 1, int(n * 0.999))] / 1e6 if n else 0.0, "error": error}


def _consumer_entry(url: str, tp: Topology, tag: str, expect: int, ready: Event,
                    go_drain: Event | None, deadline: float, results: Any) -> None:
    try:
        out = asyncio.run(_consume(url, tp, tag, expect, ready, go_drain, deadline))
    except Exception as exc:
        out = {"error": f"consumer: {exc!r}"}
    results.put(("consumer", out))


# -- publisher ------------------------------------------------------------------------


async def _publish(url: str, tp: Topology, tag: str, count: int, size: int, ready: Event,
                   go: Event) -> dict[str, Any]:
    exchange, queues = _names(tp, tag)
    keys = _routing_keys(tp, queues)
    conn = await Connection.open(url)
    body_head, tail = wire.body_around_stamp(1, size, conn.frame_max)
    head = wire.content_header(1, size, 2 if tp.persistent else 1) + body_head
    prefixes = [wire.method(1, wire.BASIC_PUBLISH, b"\x00\x00" + wire.shortstr(exchange)
                            + wire.shortstr(k) + b"\x00") + head for k in keys]
    pack_stamp = struct.Struct(">q").pack
    now = time.perf_counter_ns
    state = {"confirmed": 0, "nacks": 0}
    wakeup = asyncio.Event()

    def on_confirm(dtag: int, _multiple: bool, is_ack: bool) -> None:
        state["confirmed"] = max(state["confirmed"], dtag)
        state["nacks"] += 0 if is_ack else 1
        wakeup.set()

    conn.protocol.on_confirm = on_confirm
    if tp.confirms:
        await conn.confirm_select()
    ready.set()
    go.wait()
    started = time.monotonic()
    sent = 0
    batch = 64 if not tp.rate else max(1, tp.step or tp.rate // 200)  # rate: small steps
    while sent < count:
        room = min(count - sent, batch)
        if tp.confirms:
            room = min(room, 1000 - (sent - state["confirmed"]))
            if room <= 0:
                wakeup.clear()
                await wakeup.wait()
                continue
        if tp.rate:
            due = started + sent / tp.rate
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
        parts: list[bytes] = []
        for i in range(sent, sent + room):
            parts += (prefixes[i % len(prefixes)], pack_stamp(now()), tail)
        conn.write(b"".join(parts))
        sent += room
        await conn.drain()
        await asyncio.sleep(0)
    while tp.confirms and state["confirmed"] < count:
        wakeup.clear()
        await wakeup.wait()
    secs = time.monotonic() - started
    await conn.close()
    return {"published": sent, "rate": sent / secs if secs > 0 else 0.0,
            "nacks": state["nacks"]}


def _publisher_entry(url: str, tp: Topology, tag: str, count: int, size: int, ready: Event,
                     go: Event, results: Any) -> None:
    try:
        out = asyncio.run(_publish(url, tp, tag, count, size, ready, go))
    except Exception as exc:
        out = {"error": f"publisher: {exc!r}"}
    results.put(("publisher", out))


# -- one run --------------------------------------------------------------------------


def run_topology(url: str, tp: Topology, count: int, size: int,
                 timeout: float = 180.0) -> TopologyResult:
    """Fresh exchange and queues, consumers first (after the publish for backlog)."""
    ctx = mp.get_context("spawn")
    tag = uuid.uuid4().hex[:8]
    asyncio.run(_setup(url, tp, tag))
    expect = count * tp.queues if tp.exchange_type == "fanout" else count
    results = ctx.Queue()
    ready_c, ready_p, go = ctx.Event(), ctx.Event(), ctx.Event()
    go_drain = ctx.Event() if tp.backlog else None
    deadline = time.monotonic() + timeout
    consumer = ctx.Process(target=_consumer_entry, args=(url, tp, tag, expect, ready_c,
                                                         go_drain, deadline, results))
    publisher = ctx.Process(target=_publisher_entry, args=(url, tp, tag, count, size, ready_p,
                                                           go, results))
    sampler = Sampler(broker_process(url))

    def on_result(who: str) -> None:
        if who == "publisher" and go_drain is not None:
            go_drain.set()  # the backlog is in: drain it

    try:
        outcome = drive([consumer, publisher], [ready_c, ready_p], go, results, deadline,
                        on_result, on_go=sampler.start)
    finally:
        cpu, rss = sampler.stop() if sampler.started else (0.0, 0.0)
        asyncio.run(_setup(url, tp, tag, delete=True))
    cons = outcome.get("consumer", {"error": "no consumer result"})
    pub = outcome.get("publisher", {"error": "no publisher result"})
    error = "; ".join(e for e in (cons.get("error", ""), pub.get("error", "")) if e)
    if pub.get("nacks"):
        error = (error + "; " if error else "") + f"{pub['nacks']} nacks"
    if tp.backlog:
        return TopologyResult(rate=float(pub.get("rate", 0.0)), cpu_pct=cpu, rss_mib=rss,
                              extra=f"drain {float(cons.get('rate', 0.0)):.0f} msg/s",
                              error=error)
    rate = float(pub.get("rate", 0.0)) if tp.exchange_type == "topic" else float(
        cons.get("rate", 0.0))
    return TopologyResult(rate=rate, p50_ms=float(cons.get("p50_ms", 0.0)),
                          p99_ms=float(cons.get("p99_ms", 0.0)), cpu_pct=cpu, rss_mib=rss,
                          extra=sampler.split if tp.key == "idle200" else "", error=error,
                          p999_ms=float(cons.get("p999_ms", 0.0)))
