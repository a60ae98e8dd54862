"""Writer throughput of amqplite.store: publish + confirm + ack through group commit.

One producer thread plays the broker's event loop: it submits, in small groups,
PutMessage (1 KiB) + PutEntry + LogEvent x2 per message; the writer's callback
"confirms" them, and the producer then submits DeleteEntry + LogEvent (the
ack) for each confirmed message. A window bounds unconfirmed messages, like
publisher confirms do. Prints messages/s end to end (all acks committed).

    python scripts/store_bench.py --durability fsync --messages 300000 --runs 3
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import tempfile
import threading
import time

from amqplite.store import Store
from amqplite.storeops import DeleteEntry, LogEvent, PutEntry, PutMessage, PutQueue


def run_once(path: str, durability: str, n: int, batch: int, window: int, ack_now: bool) -> float:
    store = Store(f"sqlite:///{path}", durability=durability)
    store.create()
    store.start()
    store.submit([PutQueue(1, "/", "bench")])
    store.flush(30)

    body = os.urandom(1024)
    props = b"\x90\x00\x10application/json\x02"
    confirmed: collections.deque[list[int]] = collections.deque()
    cond = threading.Condition()
    state = {"confirmed": 0, "errors": 0}

    def make_callback(mids: list[int]):
        def callback(error: BaseException | None) -> None:
            if error is not None:
                state["errors"] += 1
            confirmed.append(mids)
            with cond:
                state["confirmed"] += len(mids)
                cond.notify()

        return callback

    def producer() -> None:
        mid = 0
        while mid < n or confirmed:
            while confirmed:
                acked = confirmed.popleft()
                now = time.time_ns() // 1000
                ops = []
                for m in acked:
                    ops.append(DeleteEntry(1, m, m))
                    ops.append(LogEvent(now, "acked", "/", "amq.direct", "bench", "bench",
                                        None, m, "ctag", 1, 1024))
                store.submit(ops)
            if mid >= n:
                with cond:
                    if not confirmed and state["confirmed"] < n:
                        cond.wait(1.0)
                if state["confirmed"] >= n and not confirmed:
                    break
                continue
            with cond:
                while mid - state["confirmed"] >= window and not confirmed:
                    cond.wait(1.0)
            if mid - state["confirmed"] >= window:
                continue
            ops = []
            mids = []
            now = time.time_ns() // 1000
            for _ in range(min(batch, n - mid)):
                mid += 1
                mids.append(mid)
                ops.append(PutMessage(mid, "amq.direct", "bench", props, body))
                ops.append(PutEntry(1, mid, mid))
                ops.append(LogEvent(now, "published", "/", "amq.direct", "bench", None,
                                    None, mid, None, None, 1024))
                ops.append(LogEvent(now, "routed", "/", "amq.direct", "bench", "bench",
                                    None, mid, None, None, 1024))
                if ack_now:  # consumer acks before the insert committed: cancels out
                    ops.append(DeleteEntry(1, mid, mid))
            store.submit(ops, make_callback([] if ack_now else mids))
            if ack_now:
                with cond:
                    state["confirmed"] += len(mids)

    writer_clock = time.pthread_getcpuclockid(store._thread.ident)  # type: ignore[union-attr]
    producer_cpu = [0.0]

    def timed_producer() -> None:
        c0 = time.thread_time()
        producer()
        producer_cpu[0] = time.thread_time() - c0

    w0 = time.clock_gettime(writer_clock)
    t0 = time.perf_counter()
    thread = threading.Thread(target=timed_producer)
    thread.start()
    thread.join()
    store.flush(120)
    elapsed = time.perf_counter() - t0
    writer_cpu = time.clock_gettime(writer_clock) - w0
    store.close()
    assert state["errors"] == 0, state
    print(f"  cpu per message: writer {writer_cpu / n * 1e6:.1f} us, "
          f"producer {producer_cpu[0] / n * 1e6:.1f} us; wall {elapsed / n * 1e6:.1f} us")
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durability", choices=["fsync", "os"], default="fsync")
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=10, help="messages per submit()")
    ap.add_argument("--window", type=int, default=5_000, help="max unconfirmed messages")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ack-now", action="store_true", help="ack before commit (cancellation)")
    ap.add_argument("--dir", default=None, help="directory for the database file")
    args = ap.parse_args()
    rates = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            rate = run_once(os.path.join(tmp, "bench.db"), args.durability, args.messages,
                            args.batch, args.window, args.ack_now)
        rates.append(rate)
        print(f"run {i + 1}: {rate:,.0f} msg/s")
    print(f"durability={args.durability} median {statistics.median(rates):,.0f} msg/s "
          f"over {args.runs} runs ({args.messages:,} messages, batch {args.batch})")


if __name__ == "__main__":
    main()
