#!/usr/bin/env python3
"""STOMP side by side: amqplite and RabbitMQ's rabbitmq_stomp plugin, each started
here on loopback ports of its own, measured with the same lean asyncio STOMP 1.2
client (frames built and read with amqplite.protocol.stomp, so the client costs
little next to either broker). Lean also in its writes: a publisher writes the
SENDs its window lets through (at most 64) at once, a subscriber the ACKs of one
read at once (one ACK per message still); a write per frame made the client, on
the same 2 cores, cost about as much CPU as the broker it measures.

    python scripts/bench_stomp.py --runs 3

Scenarios, each in two modes, on durable ``/queue/`` destinations:

- ``one``: one publisher -> one subscriber. Throughput: ``--count`` messages sent
  as fast as the mode allows, msg/s received from the first SEND to the last
  MESSAGE. Latency: ``--paced`` messages at ``--rate`` msg/s, each carrying its
  send time; p50 / p99 of receive time minus send time.
- ``pairs``: ``--pairs`` (100) publisher -> subscriber pairs, a queue each, every
  publisher sending ``--pair-count`` messages, the pairs spread over ``--procs``
  client processes; msg/s received, and the p99 latency of all those messages
  (under full load: it includes queueing).

Modes: ``transient`` (SEND without receipt, subscriber ``ack:auto``) and
``persistent`` (``persistent:true`` SENDs each asking for a receipt, at most
``--window`` of them unanswered per publisher, as a publisher-confirm window;
the subscriber acks each message with ``client-individual`` and
``prefetch-count:100``). On both brokers the RECEIPT of a persistent SEND waits
for the message to be on disk. 1 -> 1 persistent runs twice: with ``--window``
(20) and with ``--wide-window`` (1000, 0 skips it). Why both: with 20 receipts
in flight a broker that fsyncs before each RECEIPT can confirm at most 20
messages per fsync, so that row measures the disk more than the broker (both
brokers are near that ceiling); 1000 is the confirm window of bench.py's S1
over AMQP and stands for the stomp.py/stompjs publisher that does not wait for
each receipt (it counts them in a listener, or asks one on DISCONNECT).

Brokers take turns in every run (the order rotates); the table shows the median
over ``--runs`` with the machine's load. ``BENCH_BASELINE=DIR`` adds amqplite from
another checkout (its ``DIR/amqplite``) as a third broker, for a before beside
the after in one run. Prints figures only, asserts nothing:
a shared 2-core machine makes them indicative. RabbitMQ is the Debian 3.10 node of
scripts/rabbitmq.sh with ``RABBITMQ_STOMP_PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import platform
import statistics
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_mqtt  # noqa: E402
from bench_mqtt import (  # noqa: E402
    Broker,
    choose,
    common_parser,
    run_rounds,
    serving,
    spread,
    workers,
)

from amqplite.protocol.stomp.frames import V12, FrameParser, serialize  # noqa: E402
from tests.brokerproc import free_port  # noqa: E402

STAMP = struct.Struct(">Id")  # sequence number, send time (perf_counter)
MODES = ("transient", "persistent", "persistent-wide")
SCENARIOS = ("one", "pairs")


# ---------------------------------------------------------------- brokers
def amqplite(tmp: Path) -> contextlib.AbstractContextManager[Broker]:
    port, stomp = free_port(), free_port()
    return serving([sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
                    str(port), "--stomp-port", str(stomp), "--mqtt-port", "0", "--kafka-port", "0",
                    "--admin-port", "0", "--data-dir", str(tmp / "amqplite"), "--log-level",
                    "warning"], stomp,
                   "amqplite's STOMP listener")


@contextlib.contextmanager
def amqplite_from(tree: Path, tmp: Path) -> Iterator[Broker]:
    """amqplite from another checkout's ``amqplite/`` (a before beside the after):
    run from there, so its store writer process is that checkout's too."""
    port, stomp = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--stomp-port", str(stomp), "--mqtt-port", "0", "--admin-port", "0", "--data-dir",
         str(tmp / "baseline"), "--log-level", "warning"], cwd=tree,
        env=dict(os.environ, PYTHONPATH=str(tree)), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        bench_mqtt.wait(lambda: bench_mqtt.listening(stomp), 60, f"amqplite from {tree}")
        yield Broker(stomp, proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


BROKERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[Broker]]] = {
    "amqplite": amqplite,
    "RabbitMQ 3.10 stomp": functools.partial(bench_mqtt.rabbitmq, protocol="STOMP")}
if os.environ.get("BENCH_BASELINE"):  # e.g. git archive 9435f09 amqplite | tar -x -C DIR
    _tree = Path(os.environ["BENCH_BASELINE"]).resolve()
    BROKERS = {f"amqplite@{_tree.name}": functools.partial(amqplite_from, _tree), **BROKERS}


# ---------------------------------------------------------------- the client
class Conn:
    """One STOMP 1.2 connection: a reader task hands MESSAGEs to ``on_message`` and
    releases the receipt window on each RECEIPT."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 window: int) -> None:
        self.reader, self.writer = reader, writer
        self.parser = FrameParser(version=V12)
        self.window = asyncio.Semaphore(window)
        self.receipts: dict[str, asyncio.Event] = {}
        self.on_message: Callable[[Any], None] = lambda _f: None
        #: ACK frames owed for the MESSAGEs of the read being handled
        self.acks: list[bytes] = []
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, port: int, window: int = 20) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        c = cls(reader, writer, window)
        writer.write(serialize("CONNECT", {"accept-version": "1.2", "host": "/", "login": "guest",
                                           "passcode": "guest", "heart-beat": "0,0"}))
        frames: list[Any] = []
        while not frames:
            data = await reader.read(65536)
            if not data:
                raise SystemExit("the broker closed the connection before CONNECTED")
            frames = c.parser.feed(data)
        if frames[0].command != "CONNECTED":
            raise SystemExit(f"refused: {frames[0]}")
        c.task = asyncio.create_task(c._read())
        return c

    async def _read(self) -> None:
        while data := await self.reader.read(1 << 18):
            acks = self.acks = []
            for f in self.parser.feed(data):
                if f.command == "MESSAGE":
                    self.on_message(f)
                elif f.command == "RECEIPT":
                    rid = f.headers["receipt-id"]
                    if rid in self.receipts:
                        self.receipts.pop(rid).set()
                    else:
                        self.window.release()
                elif f.command == "ERROR":
                    raise SystemExit(f"ERROR: {f.headers.get('message')} {f.body[:200]!r}")
            if acks:  # each message acked on its own, the ACKs of one read in one write
                self.writer.write(b"".join(acks))

    async def call(self, command: str, headers: dict[str, str]) -> None:
        """Send a frame and wait for its receipt."""
        rid = uuid.uuid4().hex
        self.receipts[rid] = done = asyncio.Event()
        self.writer.write(serialize(command, {**headers, "receipt": rid}))
        await done.wait()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        if self.task is not None:
            self.task.cancel()


class Sub:
    """A subscriber recording the latency of each message it gets."""

    def __init__(self, conn: Conn, persistent: bool) -> None:
        self.conn, self.persistent = conn, persistent
        self.lat: list[float] = []
        self.last = 0.0
        self.want = 0
        self.done = asyncio.Event()
        conn.on_message = self._on_message

    @classmethod
    async def open(cls, port: int, queue: str, persistent: bool) -> Sub:
        s = cls(await Conn.open(port), persistent)
        headers = {"destination": queue, "id": "0", "ack": "auto"}
        if persistent:
            headers.update({"ack": "client-individual", "prefetch-count": "100"})
        await s.conn.call("SUBSCRIBE", headers)
        return s

    def _on_message(self, f: Any) -> None:
        now = time.perf_counter()
        self.lat.append(now - STAMP.unpack_from(f.body)[1])
        self.last = now
        if self.persistent:
            self.conn.acks.append(serialize("ACK", {"id": f.headers["ack"]}))
        if len(self.lat) >= self.want:
            self.done.set()

    def expect(self, n: int) -> None:
        self.lat, self.want = [], n
        self.done.clear()


def body(seq: int, size: int) -> bytes:
    head = STAMP.pack(seq, time.perf_counter())
    return head + b"x" * max(0, size - len(head))


async def publish(conn: Conn, queue: str, n: int, size: int, persistent: bool,
                  gap: float = 0.0) -> None:
    """``n`` SENDs, persistent ones each with a receipt inside the window; ``gap``
    paces them (seconds between sends)."""
    # the frame is built once; per message only the stamp at the body's start
    # changes (a SEND's receipt id need not be unique: Conn._read counts them)
    headers = {"destination": queue}
    if persistent:
        headers.update({"persistent": "true", "receipt": "s"})
    first = body(0, size)
    head, _, tail = serialize("SEND", headers, first).partition(first[:STAMP.size])
    t0 = time.perf_counter()
    frames: list[bytes] = []
    for i in range(n):
        if gap:
            await asyncio.sleep(max(0.0, t0 + i * gap - time.perf_counter()))  # pacing
        if persistent:
            if conn.window.locked() and frames:  # what the window let through goes first
                conn.writer.write(b"".join(frames))
                frames = []
            await conn.window.acquire()
        frames += (head, STAMP.pack(i, time.perf_counter()), tail)
        if gap or len(frames) == 3 * 64:  # a lean client: one write per batch, not per frame
            conn.writer.write(b"".join(frames))
            frames = []
            await conn.writer.drain()
    conn.writer.write(b"".join(frames))
    await conn.writer.drain()


def quantiles(lat: list[float]) -> tuple[float, float]:
    """(p50, p99) in ms."""
    if not lat:
        return float("nan"), float("nan")
    s = sorted(lat)
    return s[len(s) // 2] * 1000, s[min(len(s) - 1, int(len(s) * 0.99))] * 1000


# ---------------------------------------------------------------- scenarios
async def one(port: int, persistent: bool, args: argparse.Namespace,
              window: int = 0) -> tuple[float, ...]:
    """(msg/s, p50 ms, p99 ms, lost) for one publisher -> one subscriber, at most
    ``window`` (default ``--window``) receipts unanswered."""
    queue = f"/queue/bench-{uuid.uuid4().hex[:8]}"
    sub = await Sub.open(port, queue, persistent)
    pub = await Conn.open(port, window or args.window)
    try:
        sub.expect(args.count)
        start = time.perf_counter()
        await publish(pub, queue, args.count, args.size, persistent)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sub.done.wait(), args.timeout)
        got = len(sub.lat)
        rate = got / (sub.last - start) if got and sub.last > start else 0.0
        sub.expect(args.paced)
        await publish(pub, queue, args.paced, args.size, persistent, gap=1.0 / args.rate)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sub.done.wait(), args.timeout)
        p50, p99 = quantiles(sub.lat)
        return rate, p50, p99, args.count - got
    finally:
        await pub.close()
        await sub.conn.close()


async def _pairs_worker(port: int, queues: list[str], persistent: bool,
                        args: argparse.Namespace, barrier: Any) -> tuple[Any, ...]:
    subs = [await Sub.open(port, q, persistent) for q in queues]
    pubs = [await Conn.open(port, args.pair_window) for _ in queues]
    for s in subs:
        s.expect(args.pair_count)
    await asyncio.to_thread(barrier.wait, args.timeout)
    start = time.perf_counter()
    await asyncio.gather(*(publish(p, q, args.pair_count, args.size, persistent)
                           for p, q in zip(pubs, queues, strict=True)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(s.done.wait() for s in subs)), args.timeout)
    lat = [x for s in subs for x in s.lat]
    last = max((s.last for s in subs), default=start)
    for c in [*pubs, *(s.conn for s in subs)]:
        await c.close()
    return start, last, lat


def _pairs_process(port: int, queues: list[str], persistent: bool, args: argparse.Namespace,
                   barrier: Any, results: Any) -> None:
    try:
        results.put(asyncio.run(_pairs_worker(port, queues, persistent, args, barrier)))
    except BaseException as exc:  # reported to the parent, which raises it
        results.put(exc)


def pairs(port: int, persistent: bool, args: argparse.Namespace) -> tuple[float, ...]:
    """(msg/s, p50 ms, p99 ms, lost) for the pairs, in ``--procs`` client processes."""
    tag = uuid.uuid4().hex[:8]
    queues = [f"/queue/bench-{tag}-{j}" for j in range(args.pairs)]
    outs = workers(_pairs_process, [(port, part, persistent, args)
                                    for part in spread(queues, args.procs)], args.timeout)
    start, last = min(o[0] for o in outs), max(o[1] for o in outs)
    lat = [x for o in outs for x in o[2]]
    p50, p99 = quantiles(lat)
    return (len(lat) / (last - start) if last > start else 0.0, p50, p99,
            args.pairs * args.pair_count - len(lat))


def run_one(name: str, scenario: str, b: Broker, args: argparse.Namespace,
            results: dict[tuple[str, str, str], list[tuple[float, ...]]], r: int) -> None:
    for mode in modes(scenario, args):
        persistent = mode != "transient"
        res = (asyncio.run(one(b.port, persistent, args,
                               args.wide_window if mode == "persistent-wide" else 0))
               if scenario == "one" else pairs(b.port, persistent, args))
        results.setdefault((name, scenario, mode), []).append(res)
        print(f"run {r + 1} {name:<20} {scenario:<5} {mode:<15}: {res[0]:>8.0f} msg/s, "
              f"p50 {res[1]:.2f} ms, p99 {res[2]:.2f} ms, lost {res[3]:.0f} "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)


def modes(scenario: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The modes ``scenario`` runs: the wide window for 1 -> 1 only."""
    return MODES if scenario == "one" and args.wide_window else MODES[:2]


def label(scenario: str, mode: str, args: argparse.Namespace) -> str:
    if mode == "transient":
        return mode
    window = (args.pair_window if scenario == "pairs" else
              args.wide_window if mode == "persistent-wide" else args.window)
    return f"persistent, window {window}"


def table(names: list[str], args: argparse.Namespace,
          results: dict[tuple[str, str, str], list[tuple[float, ...]]]) -> None:
    def med(key: tuple[str, str, str], i: int) -> float:
        return statistics.median(x[i] for x in results[key])

    print(f"\n1 -> 1: {args.count} msgs of {args.size} B flat out (msg/s), then {args.paced} "
          f"at {args.rate:.0f}/s (p50/p99). {args.pairs} pairs x {args.pair_count} msgs in "
          f"{args.procs} client processes (msg/s, p99 under that load)")
    print("| scenario | mode | " + " | ".join(f"{n} msg/s | {n} p99 ms" for n in names) + " |")
    print("|---|---|" + "---|---|" * len(names))
    for sc in args.scenarios:
        for mode in modes(sc, args):
            cells = [f"{med((n, sc, mode), 0):,.0f} | {med((n, sc, mode), 2):.1f}"
                     for n in names]
            lost = max(max(x[3] for x in results[(n, sc, mode)]) for n in names)
            where = "1 -> 1" if sc == "one" else f"{args.pairs} pairs"
            print(f"| {where} | {label(sc, mode, args)}{f' (lost {lost:.0f})' if lost else ''} | "
                  + " | ".join(cells) + " |")


def main() -> int:
    parser = common_parser(__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=int, default=20,
                        help="unanswered persistent SENDs per 1 -> 1 publisher")
    parser.add_argument("--wide-window", type=int, default=1000,
                        help="1 -> 1 persistent once more with this window (0: not)")
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--pair-count", type=int, default=200, help="messages per pair")
    parser.add_argument("--pair-window", type=int, default=10,
                        help="unanswered persistent SENDs per pair's publisher")
    parser.add_argument("--procs", type=int, default=2, help="client processes for pairs")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = choose(parser, SCENARIOS, BROKERS)
    results: dict[tuple[str, str, str], list[tuple[float, ...]]] = {}
    loads = run_rounds(args, BROKERS, args.runs, run_one, results)
    print(f"\nmedian of {args.runs} runs; load average {min(loads):.1f}-{max(loads):.1f} on "
          f"{os.cpu_count()} cores; Python {platform.python_version()}, {platform.machine()}")
    table(args.names, args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
