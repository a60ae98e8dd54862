#!/usr/bin/env python3
"""Shovel throughput: messages forwarded per second from a queue on amqplite A to a
queue on amqplite B, per ack-mode, both brokers started here on loopback.

    python scripts/bench_shovel.py --count 20000 --size 256

The source queue is filled first (persistent messages), then the shovel is
defined and the clock runs until B holds every message. Prints figures only.
RabbitMQ's own shovel between two RabbitMQ nodes is not run here: that needs
the rabbitmq_shovel plugin on a throwaway node (scripts/rabbitmq.sh enables
only the plugins conformance needs).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pika


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


class Broker:
    """One amqplite subprocess with its admin API."""

    def __init__(self, data: Path) -> None:
        self.port, self.admin = free_port(), free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
             str(self.port), "--data-dir", str(data), "--admin-port", str(self.admin),
             "--log-level", "warning", "--mqtt-port", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(self._up, 30, "broker to listen")

    def _up(self) -> bool:
        try:
            return httpx.get(f"{self.api}/api/openapi.json", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.admin}"

    def depth(self, queue: str) -> int:
        conn = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            return int(conn.channel().queue_declare(queue, durable=True).method.message_count)
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def fill(b: Broker, queue: str, count: int, size: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    body = b"x" * size
    props = pika.BasicProperties(delivery_mode=2)
    for _ in range(count):
        ch.basic_publish("", queue, body, props)
    conn.close()
    wait(lambda: b.depth(queue) == count, 120, "the source queue to fill")


def run(a: Broker, b: Broker, mode: str, count: int, size: int, prefetch: int) -> float:
    src, dst = f"src-{mode}", f"dst-{mode}"
    fill(a, src, count, size)
    b.depth(dst)  # declared, empty
    t0 = time.monotonic()
    r = httpx.put(f"{a.api}/api/parameters/shovel/%2F/bench-{mode}", auth=("guest", "guest"),
                  json={"value": {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.url,
                                  "dest-queue": dst, "ack-mode": mode,
                                  "src-prefetch-count": prefetch}})
    r.raise_for_status()
    wait(lambda: b.depth(dst) >= count, 600, f"{count} messages on B")
    return count / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--prefetch", type=int, default=1000)
    ap.add_argument("--modes", default="on-confirm,on-publish,no-ack")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        a, b = Broker(Path(d) / "a"), Broker(Path(d) / "b")
        try:
            for mode in args.modes.split(","):
                rate = run(a, b, mode, args.count, args.size, args.prefetch)
                print(f"{mode:>11}: {rate:9.0f} msg/s  ({args.count} x {args.size} B, "
                      f"prefetch {args.prefetch})")
        finally:
            a.stop()
            b.stop()


if __name__ == "__main__":
    main()
