#!/usr/bin/env python3
"""Kafka beside AMQP on one amqplite: the same stream workload over both fronts of
one broker started here (loopback ports of its own).

    python scripts/bench_kafka.py --runs 3

- Kafka produce: confluent-kafka (librdkafka), ``acks=all``, idempotent,
  ``linger.ms=5``: ``--count`` values of ``--size`` bytes to a fresh
  one-partition topic; msg/s from the first produce to the last delivery report.
- Kafka fetch: one confluent-kafka consumer assigned to that partition from
  offset 0 (no group), msg/s until it has every record (each ``consume`` asks for
  at most what is left: it waits for its count or its timeout, and asking for
  10,000 when one was left cost the run a whole second).
- Kafka group fetch: the same read by a consumer of a fresh group (subscribe:
  FindCoordinator, JoinGroup, SyncGroup, then Fetch with auto-commit on), timed
  from the subscribe.
- AMQP: scripts/amqpbench's ``stream`` scenario (one publisher with confirms to a
  fresh stream, then three consumers from ``first`` at once; the read figure is
  their median).

Beside each rate, the broker's CPU time per message (µs, user + system from
/proc through psutil: the main process, and ``+ w`` its store writer), steadier
than a rate on a shared machine; the AMQP figure covers its publish and its three
reads together. Prints the medians over ``--runs``; asserts nothing (a shared
machine makes the figures indicative).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import psutil  # noqa: E402
from amqpbench.streambench import run_stream  # noqa: E402
from amqpbench.topology import tree_cpu_each  # noqa: E402
from bench_mqtt import serving  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from tests.brokerproc import free_port  # noqa: E402


def produce(bs: str, topic: str, count: int, size: int) -> float:
    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    p.produce(topic, b"warm-up")
    p.flush(60)
    value = b"x" * size
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:  # the client's queue is full: let it drain
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(300):
        raise RuntimeError("records left undelivered")
    return count / (time.perf_counter() - start)


def fetch(bs: str, topic: str, count: int, group: bool = False) -> float:
    c = Consumer({"bootstrap.servers": bs, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": group, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 50 * 1024 * 1024})
    if group:  # join, sync, then fetch; offsets auto-committed as a group's users run
        c.subscribe([topic])
    else:
        c.assign([TopicPartition(topic, 0, 0)])
    n = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while n < count + 1 and time.monotonic() < deadline:
        # never ask for more than is left: consume() waits for its count or its timeout
        n += sum(1 for m in c.consume(min(10_000, count + 1 - n), 1.0) if m.error() is None)
    rate = n / (time.perf_counter() - start)
    c.close()
    return rate


class CPU:
    """The broker's CPU seconds between ``mark`` calls: (main process, the rest of its tree)."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.last = self._now()

    def _now(self) -> tuple[float, float]:
        each = tree_cpu_each(self.proc)
        main = each.pop(self.proc.pid, 0.0)
        return main, sum(each.values())

    def mark(self) -> tuple[float, float]:
        now = self._now()
        d = (now[0] - self.last[0], now[1] - self.last[1])
        self.last = now
        return d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50_000, help="messages per run")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes (>= 16)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    port, kafka = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp, serving(
            [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
             str(port), "--kafka-port", str(kafka), "--mqtt-port", "0", "--stomp-port", "0",
             "--admin-port", "0", "--data-dir", str(Path(tmp) / "amqplite"),
             "--log-level", "warning"], kafka, "amqplite's Kafka listener") as broker:
        bs = f"127.0.0.1:{kafka}"
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        rows: dict[str, list[float]] = {k: [] for k in (
            "Kafka produce acks=all", "Kafka fetch", "Kafka group fetch",
            "AMQP stream publish, confirms", "AMQP stream read")}
        cpu = CPU(broker.pid)
        #: µs of broker CPU per message: (main process, store writer)
        us: dict[str, list[tuple[float, float]]] = {k: [] for k in (
            "Kafka produce acks=all", "Kafka fetch", "Kafka group fetch",
            "AMQP stream publish + 3 reads")}

        def per_message(name: str) -> None:
            main_s, rest_s = cpu.mark()
            us[name].append((main_s * 1e6 / args.count, rest_s * 1e6 / args.count))

        for run in range(args.runs):
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            cpu.mark()
            rows["Kafka produce acks=all"].append(produce(bs, topic, args.count, args.size))
            per_message("Kafka produce acks=all")
            rows["Kafka fetch"].append(fetch(bs, topic, args.count))
            per_message("Kafka fetch")
            rows["Kafka group fetch"].append(fetch(bs, topic, args.count, group=True))
            per_message("Kafka group fetch")
            amqp = run_stream(url, args.count, args.size)
            per_message("AMQP stream publish + 3 reads")
            if amqp.error:
                raise RuntimeError(amqp.error)
            rows["AMQP stream publish, confirms"].append(amqp.rate)
            rows["AMQP stream read"].append(amqp.read_rate)
            print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rows.items())
                  + "; CPU µs/msg " + ", ".join(f"{k} {v[-1][0]:.1f} + w {v[-1][1]:.1f}"
                                               for k, v in us.items()), flush=True)
    print(f"\n| {args.count:,} messages of {args.size} B, median of {args.runs} | msg/s |")
    print("|---|---|")
    for name, rates in rows.items():
        print(f"| {name} | {statistics.median(rates):,.0f} |")
    print("\n| broker CPU per message, median | µs (main process + store writer) |")
    print("|---|---|")
    for name, pairs in us.items():
        print(f"| {name} | {statistics.median(p[0] for p in pairs):.1f} + "
              f"{statistics.median(p[1] for p in pairs):.1f} |")


if __name__ == "__main__":
    main()
