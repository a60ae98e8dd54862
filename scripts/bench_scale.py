#!/usr/bin/env python3
"""How cost grows with the work, side by side: body size, queue count, connection
count and backlog depth, each as a curve per broker (issue 27, floor 4).

    python scripts/bench_scale.py amqp://guest:guest@127.0.0.1:5673/ \\
        amqp://guest:guest@127.0.0.1:5672/ --label amqplite --label rabbitmq

Curves (``--curve``, repeatable; default all):
- sizes:       bodies of 16 B, 1 KiB, 64 KiB and 1 MiB, one publisher, one
               consumer, persistent + confirms (manual ack, prefetch 100) and
               transient (no confirms, no-ack consumer): throughput and the
               broker's peak RSS. Bodies are split to the tuned frame_max.
- queues:      1,000 and 10,000 queues with a consumer each: declare + consume
               rate, RSS per queue (settled growth over the second half), the
               broker's idle CPU with all of them.
- connections: 1,000 and 10,000 idle connections (channel open): RSS per
               connection, the broker's idle CPU.
- backlog:     2,000,000 persistent 1 KiB messages into one durable queue with
               confirms, then drained: publish rate, RSS with the backlog in,
               drain rate.

The brokers are already running (the URL's port finds the process: amqplite's
store writer and RabbitMQ's helpers are counted with it). Rounds alternate
between brokers; tables print medians of ``--runs`` with the load average;
each curve is also drawn (matplotlib) into ``--plots``. Never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqpbench import client, wire
from amqpbench.client import Connection
from amqpbench.scenario import SCENARIOS, publish, run_once
from amqpbench.topology import Sampler, broker_process, tree_cpu_seconds, tree_rss

CURVES = ("sizes", "queues", "connections", "backlog")
SIZES = (16, 1024, 64 * 1024, 1024 * 1024)
#: bytes a sizes run moves at most (counts shrink as bodies grow)
SIZE_RUN_BYTES = 256 * 1024 * 1024
IDLE_SECONDS = 10.0
OPEN_AT_ONCE = 200  # connections or declares in flight at a time
#: how long RSS is sampled for a settled (minimum) reading
SETTLE_SECONDS = 3.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--curve", choices=CURVES, action="append")
    p.add_argument("--runs", type=int, default=3, help="rounds per point (sizes)")
    p.add_argument("--max-count", type=int, default=20_000, help="sizes: messages per run at most")
    p.add_argument("--sizes-scenario", choices=("persistent", "transient"), action="append",
                   help="sizes: the scenario(s) to run (default both)")
    p.add_argument("--queues", default="1000,10000")
    p.add_argument("--connections", default="1000,10000")
    p.add_argument("--backlog", type=int, default=2_000_000)
    p.add_argument("--idle-seconds", type=float, default=IDLE_SECONDS)
    p.add_argument("--plots", type=Path, default=Path("docs/images"))
    a = p.parse_args(argv)
    a.curve = a.curve or list(CURVES)
    a.sizes_scenario = a.sizes_scenario or ["persistent", "transient"]
    if a.label and len(a.label) != len(a.urls):
        p.error("give one --label per URL, or none")
    a.label = a.label or [u.split("@")[-1].split("/")[0] for u in a.urls]
    return a


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    return (f"{dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} | {platform.node()} | "
            f"{os.cpu_count()} cores | load avg {load()} | Python {platform.python_version()}")


class Broker:
    """A running broker: its URL and the process tree listening on its port."""

    def __init__(self, url: str, label: str) -> None:
        self.url, self.label = url, label
        self.proc = broker_process(url)
        if self.proc is None:
            raise SystemExit(f"no process listens on the port of {url}")

    def rss(self) -> int:
        return tree_rss(self.proc)

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.proc)

    def idle_cpu(self, seconds: float) -> float:
        """The broker's CPU (% of one core) over ``seconds`` of doing nothing asked."""
        c0, t0 = self.cpu_seconds(), time.monotonic()
        time.sleep(seconds)  # the measurement window itself, not a synchronisation
        return 100 * (self.cpu_seconds() - c0) / (time.monotonic() - t0)


# -- sizes ----------------------------------------------------------------------------


def sizes_curve(brokers: list[Broker], args: argparse.Namespace) -> dict[str, Any]:
    return {f"sizes-{kind}": _sizes(brokers, args, kind) for kind in args.sizes_scenario}


def _sizes(brokers: list[Broker], args: argparse.Namespace,
           kind: str) -> dict[tuple[str, int], tuple[float, float, float]]:
    """Median (msg/s, peak RSS MiB, broker CPU µs per message) per (broker, size).

    CPU per message is the figure a busy machine disturbs least: when other
    work takes the cores, throughput falls, the CPU a message costs hardly."""
    rows: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for size in SIZES:
        count = max(200, min(args.max_count, SIZE_RUN_BYTES // size))
        for rnd in range(args.runs):
            for b in brokers:
                sampler = Sampler(b.proc)
                res = run_once(b.url, SCENARIOS[kind], count, size,
                               timeout=600, on_go=sampler.start)
                cpu, rss = sampler.stop() if sampler.started else (0.0, 0.0)
                us = 1e4 * cpu / res.rate if res.rate else 0.0
                err = f"  ERROR {res.error}" if res.error else ""
                print(f"  sizes {kind} {size:>8} B  round {rnd + 1}  {b.label:<10} "
                      f"{res.rate:9.0f} msg/s  RSS {rss:7.0f} MiB  CPU {us:7.0f} µs/msg{err}",
                      flush=True)
                rows.setdefault((b.label, size), []).append((res.rate, rss, us))
    table = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v),
                 statistics.median(x[2] for x in v)) for k, v in rows.items()}
    print(f"\n### Body size ({SCENARIOS[kind].title}) | load avg {load()}\n")
    print("| size | " + " | ".join(f"{b.label} msg/s | {b.label} MB/s | {b.label} RSS MiB | "
                                    f"{b.label} CPU µs/msg" for b in brokers) + " |")
    print("|---" * (1 + 4 * len(brokers)) + "|")
    for size in SIZES:
        cells = []
        for b in brokers:
            rate, rss, us = table[(b.label, size)]
            cells += [f"{rate:,.0f}", f"{rate * size / 1e6:,.1f}", f"{rss:,.0f}", f"{us:,.0f}"]
        print(f"| {_human(size)} | " + " | ".join(cells) + " |")
    return table


def _human(size: int) -> str:
    for unit, n in (("MiB", 2**20), ("KiB", 2**10)):
        if size >= n:
            return f"{size // n} {unit}"
    return f"{size} B"


# -- queues and connections -------------------------------------------------------------


async def _gather_bounded(jobs: list[Callable[[], Any]]) -> list[Any]:
    sem = asyncio.Semaphore(OPEN_AT_ONCE)

    async def one(job: Callable[[], Any]) -> Any:
        async with sem:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs))


async def _declare_consume(conns: list[Connection], names: list[str]) -> None:
    """Each queue in ``names`` declared with a consumer, over ``conns`` in parallel."""
    async def lane(conn: Connection, mine: list[str]) -> None:
        for q in mine:
            await conn.queue_declare(q, durable=False)
            await conn.consume(q, no_ack=True)

    await asyncio.gather(*(lane(c, names[i::len(conns)]) for i, c in enumerate(conns)))


async def settled_rss(b: Broker) -> int:
    """The broker's RSS once settled: the least of samples over SETTLE_SECONDS.

    One reading right after a burst of work counts garbage RabbitMQ has not
    collected yet (and after a collection the growth even came out negative);
    the minimum of several is what the broker keeps."""
    samples = []
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        samples.append(b.rss())
        if time.monotonic() >= deadline:
            return min(samples)
        await asyncio.sleep(0.25)  # the sampling interval, not a synchronisation


async def _queues_with_consumers(b: Broker, n: int
                                 ) -> tuple[list[Connection], list[str], float, float]:
    """``n`` queues, each with a consumer, over 10 connections declaring in parallel:
    the connections, the names, the rate, and the bytes per queue.

    Bytes per queue are the settled RSS growth over the second half of the
    queues: the first half absorbs what the broker allocates once (tables,
    caches, pools warming up), which is no per-queue cost."""
    conns = [await Connection.open(b.url) for _ in range(10)]
    tag = uuid.uuid4().hex[:6]
    names = [f"scale-{tag}-{i}" for i in range(n)]
    half = n // 2
    t0 = time.perf_counter()
    await _declare_consume(conns, names[:half])
    secs = time.perf_counter() - t0
    mid = await settled_rss(b)
    t0 = time.perf_counter()
    await _declare_consume(conns, names[half:])
    secs += time.perf_counter() - t0
    per_queue = (await settled_rss(b) - mid) / (n - half)
    return conns, names, n / secs, per_queue


async def _close_queues(conns: list[Connection], names: list[str]) -> None:
    async def lane(conn: Connection, mine: list[str]) -> None:
        for q in mine:
            await conn.queue_delete(q)
        await conn.close()

    await asyncio.gather(*(lane(c, names[i::len(conns)]) for i, c in enumerate(conns)))


def queues_curve(brokers: list[Broker], args: argparse.Namespace) -> dict[str, Any]:
    table: dict[tuple[str, int], tuple[float, float, float]] = {}
    for n in (int(x) for x in args.queues.split(",")):
        for b in brokers:
            async def run(b: Broker = b, n: int = n) -> tuple[float, float, float]:
                conns, names, rate, per_queue = await _queues_with_consumers(b, n)
                idle = await asyncio.to_thread(b.idle_cpu, args.idle_seconds)
                await _close_queues(conns, names)
                return rate, per_queue, idle

            rate, per_q, idle = asyncio.run(run())
            print(f"  queues {n:>6}  {b.label:<10} declare+consume {rate:8.0f}/s  "
                  f"{per_q / 1024:6.1f} KiB/queue  idle CPU {idle:5.1f}%", flush=True)
            table[(b.label, n)] = (rate, per_q, idle)
    print(f"\n### Queues with a consumer each | load avg {load()}\n")
    print("| queues | broker | declare + consume /s | KiB per queue | idle CPU % |")
    print("|---|---|---|---|---|")
    for (label, n), (rate, per_q, idle) in table.items():
        print(f"| {n:,} | {label} | {rate:,.0f} | {per_q / 1024:,.1f} | {idle:.1f} |")
    return {"queues": table}


def connections_curve(brokers: list[Broker], args: argparse.Namespace) -> dict[str, Any]:
    table: dict[tuple[str, int], tuple[float, float, float]] = {}
    for n in (int(x) for x in args.connections.split(",")):
        for b in brokers:
            async def run(b: Broker = b, n: int = n) -> tuple[float, float, float]:
                # as for queues: settled RSS growth over the second half
                half = n // 2
                t0 = time.perf_counter()
                conns = await _gather_bounded([lambda: Connection.open(b.url)] * half)
                secs = time.perf_counter() - t0
                mid = await settled_rss(b)
                t0 = time.perf_counter()
                conns += await _gather_bounded([lambda: Connection.open(b.url)] * (n - half))
                rate = n / (secs + time.perf_counter() - t0)
                per_conn = (await settled_rss(b) - mid) / (n - half)
                idle = await asyncio.to_thread(b.idle_cpu, args.idle_seconds)
                for c in conns:
                    c.transport.close()
                return rate, per_conn, idle

            rate, per_c, idle = asyncio.run(run())
            print(f"  connections {n:>6}  {b.label:<10} open {rate:7.0f}/s  "
                  f"{per_c / 1024:6.1f} KiB/connection  idle CPU {idle:5.1f}%", flush=True)
            table[(b.label, n)] = (rate, per_c, idle)
            _wait_closed(b, deadline=time.monotonic() + 60)
    print(f"\n### Idle connections (channel open) | load avg {load()}\n")
    print("| connections | broker | opened /s | KiB per connection | idle CPU % |")
    print("|---|---|---|---|---|")
    for (label, n), (rate, per_c, idle) in table.items():
        print(f"| {n:,} | {label} | {rate:,.0f} | {per_c / 1024:,.1f} | {idle:.1f} |")
    return {"connections": table}


def _wait_closed(b: Broker, deadline: float) -> None:
    """Until the broker holds no client sockets on its port (the next point starts
    from an empty broker), or the deadline."""
    port = wire.Url(b.url).port
    while time.monotonic() < deadline:
        n = sum(1 for c in psutil.net_connections(kind="tcp")
                if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)
        if n == 0:
            return
        time.sleep(0.2)


# -- backlog ------------------------------------------------------------------------------


async def _drain(url: str, queue: str, count: int) -> float:
    """Drain rate (msg/s) of ``count`` messages, prefetch 1,000."""
    received, secs = await client.drain(url, queue, count, 1000)
    return received / secs


def backlog_curve(brokers: list[Broker], args: argparse.Namespace) -> dict[str, Any]:
    table: dict[str, tuple[float, float, float, float, float]] = {}
    count, size = args.backlog, 1024
    for b in brokers:
        async def run(b: Broker = b) -> tuple[float, float, float, float, float]:
            # what the broker held before (earlier curves grew it): the backlog's
            # own memory is the difference
            rss_before = await settled_rss(b) / 2**20
            queue = f"scale-backlog-{uuid.uuid4().hex[:6]}"
            conn = await Connection.open(b.url)
            await conn.queue_declare(queue, durable=True)
            t0 = time.perf_counter()
            nacks = await publish(conn, queue, count, size, persistent=True, confirms=True)
            pub_rate = count / (time.perf_counter() - t0)
            rss_full = b.rss() / 2**20
            if nacks:
                print(f"  backlog {b.label}: {nacks} nacks", flush=True)
            drain_rate = await _drain(b.url, queue, count)
            rss_after = b.rss() / 2**20
            await conn.queue_delete(queue)
            await conn.close()
            return pub_rate, rss_full, drain_rate, rss_after, rss_before

        res = asyncio.run(run())
        print(f"  backlog {count:,}  {b.label:<10} RSS before {res[4]:7.0f} MiB  publish "
              f"{res[0]:8.0f}/s  RSS {res[1]:7.0f} MiB  drain {res[2]:8.0f}/s  "
              f"RSS after {res[3]:7.0f} MiB", flush=True)
        table[b.label] = res
    print(f"\n### Persistent backlog of {count:,} x 1 KiB | load avg {load()}\n")
    print("| broker | RSS before MiB | publish msg/s | RSS with backlog MiB | drain msg/s "
          "| RSS drained MiB |")
    print("|---|---|---|---|---|---|")
    for label, (pub, rss, drain, after, before) in table.items():
        print(f"| {label} | {before:,.0f} | {pub:,.0f} | {rss:,.0f} | {drain:,.0f} "
              f"| {after:,.0f} |")
    return {"backlog": table}


# -- plots -------------------------------------------------------------------------------


def plot(results: dict[str, Any], labels: list[str], out: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots", file=sys.stderr)
        return
    out.mkdir(parents=True, exist_ok=True)
    stamp = f"load avg {load()}"
    kinds = [k.split("-", 1)[1] for k in results if k.startswith("sizes-")]
    if kinds:
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4))
        for kind in kinds:
            t = results[f"sizes-{kind}"]
            for label in labels:
                name = f"{label} {kind}"
                ax1.plot(SIZES, [t[(label, s)][0] * s / 1e6 for s in SIZES], marker="o",
                         label=name)
                ax2.plot(SIZES, [t[(label, s)][1] for s in SIZES], marker="o", label=name)
                ax3.plot(SIZES, [t[(label, s)][2] for s in SIZES], marker="o", label=name)
        ax3.set_yscale("log")
        for ax, what in ((ax1, "throughput MB/s"), (ax2, "peak RSS MiB"),
                         (ax3, "broker CPU µs per message")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("body size (bytes)")
            ax.set_ylabel(what)
            ax.legend()
        fig.suptitle(f"Body size ({stamp})")
        _save(fig, out / "scale_sizes.png")
    for key, unit, idx in (("queues", "queue", 1), ("connections", "connection", 1)):
        if key not in results:
            continue
        t = results[key]
        ns = sorted({n for _, n in t})
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        for label in labels:
            ax1.plot(ns, [t[(label, n)][idx] / 1024 for n in ns], marker="o", label=label)
            ax2.plot(ns, [t[(label, n)][2] for n in ns], marker="o", label=label)
        ax1.set_ylabel(f"KiB per {unit}")
        ax2.set_ylabel("idle CPU % of a core")
        for ax in (ax1, ax2):
            ax.set_xscale("log")
            ax.set_xlabel(key)
            ax.legend()
        fig.suptitle(f"{key.capitalize()} ({stamp})")
        _save(fig, out / f"scale_{key}.png")
    if "backlog" in results:
        t = results["backlog"]
        fig, axes = plt.subplots(1, 3, figsize=(11, 4))
        for ax, i, what in zip(axes, (0, 2, 1), ("publish msg/s", "drain msg/s",
                                                   "RSS with backlog MiB"), strict=True):
            ax.bar(labels, [t[label][i] for label in labels])
            ax.set_title(what)
        fig.suptitle(f"Persistent backlog ({stamp})")
        _save(fig, out / "scale_backlog.png")


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    brokers = [Broker(u, label) for u, label in zip(args.urls, args.label, strict=True)]
    print(machine(), flush=True)
    steps = {"sizes": sizes_curve, "queues": queues_curve,
             "connections": connections_curve, "backlog": backlog_curve}
    results: dict[str, Any] = {}
    for curve in args.curve:
        print(f"\n== {curve}", flush=True)
        results.update(steps[curve](brokers, args))
    plot(results, args.label, args.plots)
    print(f"\n{machine()}")


if __name__ == "__main__":
    main()
