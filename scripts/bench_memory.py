#!/usr/bin/env python3
"""Broker memory against backlog size: RSS while one queue fills with 1 KiB messages
(transient, then persistent), and after the queue is deleted.

    # one broker that is already running
    python scripts/bench_memory.py amqp://guest:guest@127.0.0.1:5672/%2F --pid-of 5672

    # side by side, brokers started here: amqplite (memory monitor on, default
    # watermark), amqplite with malloc_trim off, and a private RabbitMQ node
    python scripts/bench_memory.py --compare --count 100000

Answers "how much RAM does a backlog cost, and does it come back after a burst?"
amqplite keeps transient bodies in RAM (until queue paging lands) and pages
persistent ones to SQLite; RabbitMQ pages both. Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqpbench import client
from amqpbench.client import Connection
from amqpbench.scenario import publish

ROOT = Path(__file__).resolve().parent.parent
STEPS = 4  # RSS is sampled after each quarter of the backlog


def find_pid(port: int) -> int:
    """The process listening on `port` (needs rights to see other users' sockets)."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port \
                and conn.pid:
            return conn.pid
    for proc in psutil.process_iter(["name"]):  # fallback: RabbitMQ's Erlang VM by name
        if proc.info["name"] == "beam.smp":
            return int(proc.pid)
    raise SystemExit(f"no process found listening on port {port}; pass --pid")


def mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes] | None, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while True:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"broker exited early (status {proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"nothing listens on port {port} after {limit:.0f} s") from None
            time.sleep(0.1)  # poll interval while the broker starts


class PeakRSS:
    """Samples a process's RSS every 50 ms in a thread: the peak, not just checkpoints."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, mib(self.pid))

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def drain(url: str, queue: str, count: int, timeout: float) -> int:
    """Consume (manual acks, prefetch 500) until ``count`` arrived or ``timeout``; how many did."""
    return (await client.drain(url, queue, count, 500, timeout))[0]


async def backlog(url: str, pid: int, count: int, size: int, persistent: bool,
                  timeout: float, drain_it: bool = False) -> list[str]:
    """Fill one queue in STEPS chunks; RSS (MiB) idle, after each chunk, after delete.

    With ``drain_it`` the queue is consumed before the delete; the last cells are
    then the peak RSS over fill and drain, and the messages delivered.
    """
    queue = f"bench-memory-{uuid.uuid4().hex[:8]}"
    cells = [f"{mib(pid):.0f}"]
    peak = PeakRSS(pid).__enter__()
    conn = await Connection.open(url)
    await conn.queue_declare(queue, durable=persistent)
    try:
        for _ in range(STEPS):
            # a fresh connection per chunk: confirm tags start at 1 again
            pub = await Connection.open(url)
            try:
                await asyncio.wait_for(publish(pub, queue, count // STEPS, size, persistent,
                                               confirms=True), timeout)
            except TimeoutError:
                cells.append("blocked")  # the memory alarm held the publisher
                break
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(pub.close(), 5)
            await asyncio.sleep(1)  # let commits, evictions and GC settle
            cells.append(f"{mib(pid):.0f}")
        if drain_it:
            got = await drain(url, queue, count, timeout)
            peak.__exit__()
            return [*cells, f"peak {peak.peak:.0f}", f"delivered {got}/{count}"]
    finally:
        peak.__exit__()
        await conn.queue_delete(queue)
        await conn.close()
    cells += [""] * (STEPS + 1 - len(cells))
    await asyncio.sleep(2)  # memory is freed (and trimmed) after the delete returns
    cells.append(f"{mib(pid):.0f}")
    return cells


@contextlib.contextmanager
def amqplite(watermark: str, trim: bool) -> Iterator[tuple[str, int]]:
    port, admin = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as data:
        env = dict(os.environ, AMQPLITE_MALLOC_TRIM="1" if trim else "0")
        proc = subprocess.Popen(
            [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
             str(port), "--admin-port", str(admin), "--data-dir", data, "--log-level",
             "warning", "--memory-high-watermark", watermark, "--mqtt-port", "0",
             "--stomp-port", "0", "--kafka-port", "0"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        try:
            wait_listening(port, proc)
            yield f"amqp://guest:guest@127.0.0.1:{port}/%2F", proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def rabbitmq() -> Iterator[tuple[str, int]]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-memory-rmq-") as node:
        script = str(ROOT / "scripts" / "rabbitmq.sh")
        subprocess.run(["bash", script, "start", node, str(port)], check=True)
        try:
            yield f"amqp://guest:guest@127.0.0.1:{port}/%2F", find_pid(port)
        finally:
            subprocess.run(["bash", script, "stop", node], check=False)


def header(count: int) -> str:
    steps = " | ".join(f"{count * (i + 1) // STEPS:>7}" for i in range(STEPS))
    return f"| {'broker':<22} | {'messages':<10} | {'idle':>5} | {steps} | after delete |"


def row(label: str, kind: str, cells: list[str]) -> str:
    mids = " | ".join(f"{c:>7}" for c in cells[1:-1])
    return f"| {label:<22} | {kind:<10} | {cells[0]:>5} | {mids} | {cells[-1]:>12} |"


def run_broker(label: str, url: str, pid: int, args: argparse.Namespace) -> list[str]:
    out = []
    for kind, persistent in (("transient", False), ("persistent", True)):
        if args.kinds not in ("both", kind):
            continue
        cells = asyncio.run(backlog(url, pid, args.count, args.size, persistent, args.timeout,
                                    drain_it=args.drain))
        if args.drain:  # idle, chunks, then peak and delivered instead of "after delete"
            out.append(row(label, kind, [*cells[:-2], ""]) + f" {cells[-2]}, {cells[-1]}")
        else:
            out.append(row(label, kind, cells))
        print(out[-1], flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="measure a running broker at this amqp:// URL")
    parser.add_argument("--pid-of", type=int, metavar="PORT",
                        help="with URL: measure the process listening on this port")
    parser.add_argument("--pid", type=int, help="with URL: measure this process")
    parser.add_argument("--compare", action="store_true",
                        help="start amqplite (trim on and off) and RabbitMQ, side by side")
    parser.add_argument("--no-rabbitmq", action="store_true", help="with --compare: skip it")
    parser.add_argument("--watermark", default="0.4",
                        help="amqplite --memory-high-watermark (RabbitMQ keeps its 0.4)")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a chunk may take before it counts as blocked")
    parser.add_argument("--drain", action="store_true",
                        help="consume the backlog instead of deleting it: peak RSS, delivered")
    parser.add_argument("--kinds", choices=("both", "transient", "persistent"), default="both")
    parser.add_argument("--no-notrim", action="store_true",
                        help="with --compare: skip the amqplite run with malloc_trim off")
    args = parser.parse_args()
    if bool(args.url) == args.compare:
        parser.error("give a URL (with --pid or --pid-of) or --compare")
    print(f"{dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} | {os.cpu_count()} cores | "
          f"{psutil.virtual_memory().total / 2**30:.1f} GiB RAM | {platform.platform()}")
    print(f"RSS in MiB; {args.count} x {args.size} B published with confirms into one queue "
          f"in {STEPS} chunks, then the queue is deleted (after delete: +2 s)\n")
    print(header(args.count))
    print("|" + "|".join("-" * len(c) for c in header(args.count).split("|")[1:-1]) + "|")
    if args.url:
        pid = args.pid or (find_pid(args.pid_of) if args.pid_of else None)
        if pid is None:
            parser.error("a URL needs --pid or --pid-of")
        run_broker(psutil.Process(pid).name(), args.url, pid, args)
        return 0
    with amqplite(args.watermark, trim=True) as (url, pid):
        run_broker(f"amqplite wm {args.watermark}", url, pid, args)
    if not args.no_notrim:
        with amqplite(args.watermark, trim=False) as (url, pid):
            run_broker("amqplite, no trim", url, pid, args)
    if not args.no_rabbitmq:
        with rabbitmq() as (url, pid):
            run_broker("RabbitMQ (wm 0.4)", url, pid, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
