#!/usr/bin/env python3
"""Broker memory with a deep queue: RSS before, with 200,000 persistent 1 KiB
messages in one durable queue, and after the queue is deleted.

    python scripts/bench_memory.py amqp://guest:guest@127.0.0.1:5672/%2F --pid-of 5672

Answers "does a backlog stay bounded in RAM?" (amqplite pages bodies to
SQLite; RabbitMQ pages to its message store). Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time
import uuid
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqpbench.client import Connection
from amqpbench.scenario import publish


def find_pid(port: int) -> int:
    """The process listening on `port` (needs rights to see other users' sockets)."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port \
                and conn.pid:
            return conn.pid
    for proc in psutil.process_iter(["name"]):  # fallback: RabbitMQ's Erlang VM by name
        if proc.info["name"] == "beam.smp":
            return proc.pid
    raise SystemExit(f"no process found listening on port {port}; pass --pid")


def mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


async def scenario(url: str, pid: int, count: int, size: int) -> None:
    queue = f"amqpbench-memory-{uuid.uuid4().hex[:8]}"
    conn = await Connection.open(url)
    try:
        await conn.queue_declare(queue, durable=True)
        print(f"RSS idle (queue declared):       {mib(pid):8.1f} MiB")
        started = time.perf_counter()
        nacks = await publish(conn, queue, count, size, persistent=True, confirms=True)
        took = time.perf_counter() - started
        print(f"published {count} x {size} B persistent with confirms in {took:.1f} s "
              f"({count / took:.0f} msg/s, nacks {nacks})")
        peak = 0.0
        for _ in range(5):  # let the broker settle (paging, GC); sample a few times
            peak = max(peak, mib(pid))
            await asyncio.sleep(0.5)
        print(f"RSS with backlog:                {mib(pid):8.1f} MiB (max of samples "
              f"{peak:.1f} MiB)")
    finally:
        started = time.perf_counter()
        dropped = await conn.queue_delete(queue)
        print(f"deleted queue with {dropped} messages in {time.perf_counter() - started:.1f} s")
        await conn.close()
    await asyncio.sleep(2)  # the broker frees memory after the delete returns
    print(f"RSS after delete (+2 s):         {mib(pid):8.1f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid-of", type=int, metavar="PORT",
                     help="measure the process listening on this port")
    who.add_argument("--pid", type=int, help="measure this process")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    pid = args.pid or find_pid(args.pid_of)
    proc = psutil.Process(pid)
    print(f"{dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} | {os.cpu_count()} cores | "
          f"broker pid {pid} ({proc.name()})")
    asyncio.run(scenario(args.url, pid, args.count, args.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
