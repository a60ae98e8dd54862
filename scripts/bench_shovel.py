#!/usr/bin/env python3
"""Shovel throughput: messages forwarded per second from a queue on one broker to a
queue on another, per ack-mode, amqplite -> amqplite beside RabbitMQ -> RabbitMQ.

    python scripts/bench_shovel.py --count 20000 --size 256 --rounds 3
    python scripts/bench_shovel.py --no-rabbitmq          # amqplite only

Two amqplite brokers and two throwaway RabbitMQ nodes (scripts/rabbitmq.sh, with
rabbitmq_shovel and rabbitmq_shovel_management, distinct node names, ports and
directories) run on loopback. Each round fills the source queue (persistent
messages), then defines the same dynamic shovel through each one's HTTP API
(``PUT /api/parameters/shovel/...``, on the source broker, ``src-uri`` its own
node) and times until the destination holds every message; the shovel is
deleted after. Rounds alternate between the two systems and the ack modes, so
a burst of load from other work hits both alike; the table gives the median of
the rounds and the load average. Prints figures only, never asserts.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pika

SCRIPTS = Path(__file__).resolve().parent


def wait(pred: Callable[[], bool], timeout: float, what: str, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)  # a poll interval, not synchronisation


def port_base() -> int:
    """Eight free consecutive loopback ports in 25800-25999 (a random start)."""
    for _ in range(50):
        base = random.randrange(25800, 25992)
        try:
            for p in range(base, base + 8):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return base
    raise SystemExit("no eight free ports in 25800-25999")


class Node:
    """One broker: its AMQP URL, its HTTP API, and a queue-depth probe."""

    name = ""

    def __init__(self, port: int, api_port: int) -> None:
        self.port, self.api_port = port, api_port
        self._probe: pika.BlockingConnection | None = None
        self._channel: Any = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def api_up(self) -> bool:
        try:
            return httpx.get(f"{self.api}/api/overview", auth=("guest", "guest"),
                             timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def depth(self, queue: str) -> int:
        """Messages ready in ``queue`` (declared durable when missing), over one
        connection kept open (a connection per poll would load the broker)."""
        if self._probe is None or not self._probe.is_open:
            self._probe = pika.BlockingConnection(pika.URLParameters(self.url))
            self._channel = None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._probe.channel()
        ok = self._channel.queue_declare(queue, durable=True)
        return int(ok.method.message_count)

    def delete_queue(self, queue: str) -> None:
        self.depth(queue)  # the probe channel is open
        self._channel.queue_delete(queue)

    def put_shovel(self, name: str, value: dict[str, object]) -> None:
        r = httpx.put(f"{self.api}/api/parameters/shovel/%2F/{name}",
                      auth=("guest", "guest"), json={"value": value}, timeout=30)
        r.raise_for_status()

    def delete_shovel(self, name: str) -> None:
        httpx.delete(f"{self.api}/api/parameters/shovel/%2F/{name}", auth=("guest", "guest"),
                     timeout=30)

    def stop(self) -> None:
        if self._probe is not None and self._probe.is_open:
            self._probe.close()


class Amqplite(Node):
    name = "amqplite"

    def __init__(self, data: Path, port: int, api_port: int) -> None:
        super().__init__(port, api_port)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
             str(port), "--data-dir", str(data), "--admin-port", str(api_port),
             "--log-level", "warning", "--mqtt-port", "0", "--stomp-port", "0", "--kafka-port", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(self.api_up, 30, "amqplite to listen", 0.1)

    def stop(self) -> None:
        super().stop()
        self.proc.terminate()
        self.proc.wait(30)


class Rabbit(Node):
    name = "rabbitmq"

    def __init__(self, data: Path, port: int, api_port: int) -> None:
        super().__init__(port, api_port)
        self.dir = data
        env = {**os.environ,
               "RABBITMQ_EXTRA_PLUGINS": "rabbitmq_shovel,rabbitmq_shovel_management"}
        subprocess.run(["bash", str(SCRIPTS / "rabbitmq.sh"), "start", str(data), str(port),
                        str(api_port)], env=env, check=True)
        wait(self.api_up, 90, "RabbitMQ's HTTP API", 0.2)

    def stop(self) -> None:
        super().stop()
        subprocess.run(["bash", str(SCRIPTS / "rabbitmq.sh"), "stop", str(self.dir)],
                       check=False)


def fill(node: Node, queue: str, count: int, size: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(node.url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    body = b"x" * size
    props = pika.BasicProperties(delivery_mode=2)
    for _ in range(count):
        ch.basic_publish("", queue, body, props)
    conn.close()
    wait(lambda: node.depth(queue) == count, 120, "the source queue to fill", 0.1)


def one(src: Node, dest: Node, mode: str, rnd: int, count: int, size: int,
        prefetch: int) -> float:
    """Messages per second of one shovel run from ``src`` to ``dest``."""
    tag = f"{mode}-{rnd}"
    queue_in, queue_out, shovel = f"bench-src-{tag}", f"bench-dst-{tag}", f"bench-{tag}"
    fill(src, queue_in, count, size)
    dest.depth(queue_out)  # declared, empty
    t0 = time.monotonic()
    src.put_shovel(shovel, {"src-uri": "amqp://", "src-queue": queue_in,
                            "dest-uri": dest.url, "dest-queue": queue_out,
                            "ack-mode": mode, "src-prefetch-count": prefetch})
    wait(lambda: dest.depth(queue_out) >= count, 600, f"{count} messages at {dest.name}",
         0.01)
    rate = count / (time.monotonic() - t0)
    src.delete_shovel(shovel)
    src.delete_queue(queue_in)
    dest.delete_queue(queue_out)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--prefetch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="on-confirm,on-publish,no-ack")
    ap.add_argument("--no-rabbitmq", action="store_true", help="amqplite only")
    args = ap.parse_args()
    modes = args.modes.split(",")
    base = port_base()
    pairs: list[tuple[Node, Node]] = []
    results: dict[tuple[str, str], list[float]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        try:
            pairs.append((Amqplite(Path(d) / "a", base, base + 1),
                          Amqplite(Path(d) / "b", base + 2, base + 3)))
            if not args.no_rabbitmq:
                pairs.append((Rabbit(Path(d) / "ra", base + 4, base + 5),
                              Rabbit(Path(d) / "rb", base + 6, base + 7)))
            for rnd in range(1, args.rounds + 1):
                for mode in modes:
                    order = pairs if rnd % 2 else pairs[::-1]
                    for src, dest in order:
                        rate = one(src, dest, mode, rnd, args.count, args.size, args.prefetch)
                        results.setdefault((src.name, mode), []).append(rate)
                        loads.append(os.getloadavg()[0])
                        print(f"round {rnd} {src.name:>8} {mode:>10}: {rate:8.0f} msg/s "
                              f"(load {loads[-1]:.1f})", flush=True)
        finally:
            for pair in pairs:
                for node in pair:
                    node.stop()
    print(f"\n{args.count} x {args.size} B persistent, prefetch {args.prefetch}, median of "
          f"{args.rounds}; load average {min(loads):.1f}-{max(loads):.1f} "
          f"({os.cpu_count()} cores)\n")
    names = [p[0].name for p in pairs]
    print("| ack mode | " + " | ".join(f"{n} msg/s" for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    for mode in modes:
        cells = [f"{statistics.median(results[(n, mode)]):,.0f}" for n in names]
        print(f"| {mode} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
