#!/usr/bin/env python3
"""Throughput and latency of one or more AMQP brokers, side by side.

    python scripts/bench.py amqp://guest:guest@127.0.0.1:5673/%2F \\
        amqp://guest:guest@127.0.0.1:5672/%2F --label amqplite --label rabbitmq

Runs alternate between brokers (and swap order every round) so background
noise hits all of them alike. Prints figures; never asserts on them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqpbench.scenario import SCENARIOS, RunResult, run_once
from amqpbench.streambench import STREAM, run_stream
from amqpbench.topology import TOPOLOGIES, Sampler, TopologyResult, broker_process, run_topology

ALL = [*SCENARIOS, *TOPOLOGIES, STREAM.key]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("urls", nargs="+", metavar="URL", help="amqp:// URL of each broker")
    parser.add_argument("--label", action="append", default=[],
                        help="name per URL, in order (default: host:port)")
    parser.add_argument("--count", type=int, default=50_000, help="messages per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per broker and scenario")
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes (>= 16)")
    parser.add_argument("--scenario", choices=[*ALL, "all"], action="append",
                        help="repeatable; default all: persistent (S1), transient (S2), "
                             "fanout (S3), topic (S4), backlog (S5), idle200 (S6), "
                             "stream, fixedrate")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="idle200: how long the 1,000 msg/s run lasts")
    parser.add_argument("--idle-step", type=int, default=0,
                        help="idle200: publishes written together (default 5: a step every "
                             "5 ms); 1 and 25 split per-wake-up from per-message CPU")
    parser.add_argument("--fixed-seconds", type=float, default=10.0,
                        help="fixedrate: how long the 5,000 msg/s run lasts")
    parser.add_argument("--inflight", type=int, default=1000,
                        help="max messages published but not yet received (0: unlimited)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    args = parser.parse_args(argv)
    if not args.scenario or "all" in args.scenario:
        args.scenario = ALL
    if args.label and len(args.label) != len(args.urls):
        parser.error("give one --label per URL, or none")
    if args.size < 16:
        parser.error("--size must be at least 16")
    if not args.label:
        args.label = [url.split("@")[-1].split("/")[0] for url in args.urls]
    return args


def describe_machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} | {platform.node()} | "
            f"{os.cpu_count()} cores | load avg {load} | Python {platform.python_version()}")


def run(url: str, key: str, args: argparse.Namespace) -> TopologyResult:
    """One run of one scenario, with the broker's CPU and peak RSS around it."""
    if key == STREAM.key:
        return run_stream(url, args.count, args.size, args.timeout)
    if key in TOPOLOGIES:
        tp = TOPOLOGIES[key]
        if tp.rate and args.idle_step:
            tp = dataclasses.replace(tp, step=args.idle_step)
        count = int(tp.rate * args.idle_seconds) if tp.rate else args.count
        return run_topology(url, tp, count, args.size, args.timeout)
    sampler = Sampler(broker_process(url))
    sc = SCENARIOS[key]
    count = int(sc.rate * args.fixed_seconds) if sc.rate else args.count
    res: RunResult = run_once(url, sc, count, args.size, args.timeout, args.inflight,
                              on_go=sampler.start)
    cpu, rss = sampler.stop() if sampler.started else (0.0, 0.0)
    extra = f"in flight {res.in_flight:.0f}, unconfirmed {res.unconfirmed:.0f}" + (
        f", nacks {res.nacks}" if res.nacks else "")
    return TopologyResult(rate=res.rate, p50_ms=res.p50_ms, p99_ms=res.p99_ms, cpu_pct=cpu,
                          rss_mib=rss, extra=extra, error=res.error, p999_ms=res.p999_ms,
                          in_flight=res.in_flight, unconfirmed=res.unconfirmed)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    brokers = list(zip(args.label, args.urls, strict=True))
    print(describe_machine())
    print(f"{args.count} msgs x {args.size} B per run, {args.runs} runs; publisher and "
          f"consumers in their own processes; S1/S2 in flight <= {args.inflight or 'unlimited'}"
          "; CPU is the broker's, in % of one core\n")
    results: dict[tuple[str, str], list[TopologyResult]] = {}
    for n in range(args.runs):
        order = brokers if n % 2 == 0 else brokers[::-1]
        for key in args.scenario:
            for label, url in order:
                res = run(url, key, args)
                results.setdefault((key, label), []).append(res)
                status = f"  ERROR {res.error}" if res.error else ""
                print(f"run {n + 1} {key:<10} {label:<12} {res.rate:>9.0f} msg/s  "
                      f"p50 {res.p50_ms:8.2f} ms  p99 {res.p99_ms:8.2f} ms  "
                      f"p99.9 {res.p999_ms:8.2f} ms  "
                      f"CPU {res.cpu_pct:5.1f}%  RSS {res.rss_mib:6.0f} MiB  {res.extra}{status}",
                      flush=True)
    print()
    print_table(args.scenario, [label for label, _ in brokers], results)
    failed = any(r.error for runs in results.values() for r in runs)
    return 1 if failed else 0


def print_table(keys: list[str], labels: list[str],
                results: dict[tuple[str, str], list[TopologyResult]]) -> None:
    """Medians per scenario and broker; ratio is throughput relative to the first broker."""
    header = (f"| {'scenario':<10} | {'broker':<12} | {'msgs/s':>8} | {'p50 ms':>8} | "
              f"{'p99 ms':>8} | {'p99.9 ms':>8} | {'CPU %':>6} | {'RSS MiB':>7} | {'ratio':>6} "
              "| extra")
    print(header)
    print("|" + "|".join("-" * len(cell) for cell in header.split("|")[1:]) + "|")
    for key in keys:
        base = base_cpu = None
        for label in labels:
            runs = [r for r in results.get((key, label), []) if not r.error]
            if not runs:
                print(f"| {key:<10} | {label:<12} | {'failed':>8} |")
                continue
            med = statistics.median
            rate = med(r.rate for r in runs)
            base = base or rate
            extra = ", ".join(sorted({r.extra for r in runs if r.extra}))[:60]
            cpu = med(r.cpu_pct for r in runs)
            base_cpu = base_cpu or cpu
            if key == STREAM.key:
                extra = f"read {med(r.read_rate for r in runs):.0f} msg/s per consumer"
            elif key in SCENARIOS:  # Little's law: p50 ~ in flight / throughput
                extra = (f"in flight {med(r.in_flight for r in runs):.0f}, unconfirmed "
                         f"{med(r.unconfirmed for r in runs):.0f}")
            elif key == "idle200" and base_cpu:  # the same rate for all: CPU is the figure
                extra = f"CPU {cpu / base_cpu:.2f}x the first broker's"
            print(f"| {key:<10} | {label:<12} | {rate:>8.0f} | {med(r.p50_ms for r in runs):>8.2f}"
                  f" | {med(r.p99_ms for r in runs):>8.2f} | {med(r.p999_ms for r in runs):>8.2f}"
                  f" | {cpu:>6.1f}"
                  f" | {med(r.rss_mib for r in runs):>7.0f} | {rate / base:>6.2f} | {extra}")
    for key in keys:
        title = SCENARIOS[key].title if key in SCENARIOS else (
            STREAM.title if key == STREAM.key else TOPOLOGIES[key].title)
        print(f"\n{key}: {title}")


if __name__ == "__main__":
    sys.exit(main())
