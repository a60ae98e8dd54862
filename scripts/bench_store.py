"""The store alone: what a message costs the broker's process and the writer.

Feeds a store the ops the broker gives it for persistent messages (message,
entry and two log rows at publish; delete and a log row at ack) or for
transient ones (three log rows), in submissions of ``--batch`` messages, as
fast as it commits them with at most ``--inflight`` submissions outstanding,
and prints messages/s and the CPU each process spent per message. Compares
the writer thread with the writer process side by side. Prints figures;
asserts nothing.

    python scripts/bench_store.py --count 100000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqplite.store.engine import Store
from amqplite.store.writer import ProcessStore
from amqplite.storeops import DeleteEntry, PutEntry, PutMessage, PutQueue

BODY = b"x" * 1024
PROPS = b"\x10\x00\x02"


def _row(i: int, event: str) -> tuple[object, ...]:
    return (1_700_000_000_000_000 + i, event, "/", "", "bench", "bench", None, i, None, None,
            1024, None)


def _ops(kind: str, lo: int, n: int) -> list[list[object]]:
    if kind == "transient":
        return [[r for i in range(lo, lo + n) for r in
                 (_row(i, "published"), _row(i, "routed"), _row(i, "acked"))]]
    put: list[object] = []
    ack: list[object] = []
    for i in range(lo, lo + n):
        put += [PutMessage(i, "", "bench", PROPS, BODY), PutEntry(1, i, i),
                _row(i, "published"), _row(i, "routed")]
        ack += [DeleteEntry(1, i, i), _row(i, "acked")]
    return [put, ack]


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(writer: str, kind: str, count: int, batch: int, inflight: int) -> tuple[float, ...]:
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/b.db"
        # no log linger: this measures the commit path, and waits for every commit
        store = (ProcessStore(url, log_linger_s=0) if writer == "process"
                 else Store(url, log_linger_s=0))
        store.start()  # a process store's writer creates the schema: it goes first
        store.create()
        store.submit([PutQueue(1, "/", "bench")])
        store.flush(30)
        child = (psutil.Process(store.writer_pid)
                 if isinstance(store, ProcessStore) and store.writer_pid else None)
        done = 0
        lock = threading.Condition()

        def cb(_err: BaseException | None) -> None:
            nonlocal done
            with lock:
                done += 1
                lock.notify()

        subs = [ops for lo in range(0, count, batch) for ops in _ops(kind, lo + 1, batch)]
        cpu0, ccpu0, t0 = _cpu_self(), _child_cpu(child), time.perf_counter()
        sent = 0
        while done < len(subs):
            while sent < len(subs) and sent - done < inflight:
                store.submit(subs[sent], cb)
                sent += 1
            if isinstance(store, ProcessStore):
                _pump(store)
            else:
                with lock:
                    lock.wait(0.01)
        secs = time.perf_counter() - t0
        cpu, ccpu = _cpu_self() - cpu0, _child_cpu(child) - ccpu0
        groups = store.groups
        store.close(30)
        return count / secs, 1e6 * cpu / count, 1e6 * ccpu / count, len(subs) / max(groups, 1)


def _child_cpu(p: psutil.Process | None) -> float:
    if p is None:
        return 0.0
    t = p.cpu_times()
    return float(t.user + t.system)


def _pump(store: ProcessStore) -> None:
    """What the broker's loop does for the writer process, with select instead of trio."""
    sock = store.sock
    if sock is None:
        return
    w = [sock] if store.send_some() else []
    r, _w, _x = select.select([sock], w, [], 0.01)
    if r:
        store.receive_some()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=60_000)
    ap.add_argument("--batch", type=int, default=100, help="messages per submission")
    ap.add_argument("--inflight", type=int, default=10, help="submissions outstanding")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kind", choices=["persistent", "transient"], action="append")
    ap.add_argument("--writer", choices=["thread", "process"], action="append")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {args.count} messages, "
          f"{args.batch} per submission; medians of {args.runs}")
    print(f"{'kind':<11} {'writer':<8} {'msgs/s':>9} {'broker µs/msg':>14} {'writer µs/msg':>14}"
          f" {'subs/group':>11}")
    for kind in args.kind or ["persistent", "transient"]:
        writers = args.writer or ["thread", "process"]
        results: dict[str, list[tuple[float, ...]]] = {w: [] for w in writers}
        for i in range(args.runs):
            for writer in writers if i % 2 == 0 else writers[::-1]:
                results[writer].append(run(writer, kind, args.count, args.batch, args.inflight))
        for writer, rs in results.items():
            rate, cpu, ccpu, per = (statistics.median(x) for x in zip(*rs, strict=True))
            print(f"{kind:<11} {writer:<8} {rate:>9,.0f} {cpu:>14.1f} {ccpu:>14.1f} {per:>11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
