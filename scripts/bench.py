#!/usr/bin/env python3
"""Throughput and latency of one or more AMQP brokers, side by side.

    python scripts/bench.py amqp://guest:guest@127.0.0.1:5673/%2F \\
        amqp://guest:guest@127.0.0.1:5672/%2F --label amqplite --label rabbitmq

Runs alternate between brokers (and swap order every round) so background
noise hits all of them alike. Prints figures; never asserts on them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqpbench.scenario import SCENARIOS, RunResult, run_once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("urls", nargs="+", metavar="URL", help="amqp:// URL of each broker")
    parser.add_argument("--label", action="append", default=[],
                        help="name per URL, in order (default: host:port)")
    parser.add_argument("--count", type=int, default=50_000, help="messages per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per broker and scenario")
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes (>= 16)")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--inflight", type=int, default=1000,
                        help="max messages published but not yet received (0: unlimited)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    args = parser.parse_args(argv)
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scenarios = list(SCENARIOS.values()) if args.scenario == "all" else [SCENARIOS[args.scenario]]
    brokers = list(zip(args.label, args.urls, strict=True))
    print(describe_machine())
    print(f"{args.count} msgs x {args.size} B per run, {args.runs} runs, one publisher and one "
          f"consumer process per run, in flight <= {args.inflight or 'unlimited'}\n")
    results: dict[tuple[str, str], list[RunResult]] = {}
    for run in range(args.runs):
        order = brokers if run % 2 == 0 else brokers[::-1]
        for sc in scenarios:
            for label, url in order:
                res = run_once(url, sc, args.count, args.size, args.timeout, args.inflight)
                results.setdefault((sc.key, label), []).append(res)
                status = f"  ERROR {res.error}" if res.error else ""
                print(f"run {run + 1} {sc.key:<10} {label:<12} {res.rate:>9.0f} msg/s  "
                      f"p50 {res.p50_ms:8.2f} ms  p99 {res.p99_ms:8.2f} ms  "
                      f"({res.received} in {res.seconds:.2f} s, nacks {res.nacks}){status}",
                      flush=True)
    print()
    print_table(scenarios, [label for label, _ in brokers], results)
    failed = any(r.error for runs in results.values() for r in runs)
    return 1 if failed else 0


def print_table(scenarios: list, labels: list[str],
                results: dict[tuple[str, str], list[RunResult]]) -> None:
    """Medians per scenario and broker; ratio is throughput relative to the first broker."""
    header = f"| {'scenario':<10} | {'broker':<12} | {'msgs/s':>8} | {'p50 ms':>8} | " \
             f"{'p99 ms':>8} | {'ratio':>6} |"
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for sc in scenarios:
        base = None
        for label in labels:
            runs = [r for r in results.get((sc.key, label), []) if not r.error]
            if not runs:
                print(f"| {sc.key:<10} | {label:<12} | {'failed':>8} | {'':>8} | {'':>8} | "
                      f"{'':>6} |")
                continue
            rate = statistics.median(r.rate for r in runs)
            p50 = statistics.median(r.p50_ms for r in runs)
            p99 = statistics.median(r.p99_ms for r in runs)
            base = base or rate
            print(f"| {sc.key:<10} | {label:<12} | {rate:>8.0f} | {p50:>8.2f} | {p99:>8.2f} | "
                  f"{rate / base:>6.2f} |")
    for sc in scenarios:
        print(f"\n{sc.key}: {sc.title}")


if __name__ == "__main__":
    sys.exit(main())
