#!/usr/bin/env python3
"""MQTT side by side: amqplite, Mosquitto and RabbitMQ's rabbitmq_mqtt plugin, each
started here on loopback ports of its own, measured with paho-mqtt in one run.

    python scripts/bench_mqtt.py --rounds 3 --count 20000 --size 100

Per broker and QoS (0 and 1), one publisher -> one subscriber (MQTT 3.1.1, clean
sessions, paho's default in-flight window of 20):

- throughput: ``count`` messages published as fast as paho sends them; the clock
  runs from the first publish to the last message received (msg/s received);
- latency: ``paced`` messages at ``rate`` msg/s, each carrying its send time;
  p50 / p99 of receive time minus send time (both clients in this process).

With the lean asyncio clients of scripts/mqtt_load.py in ``--procs`` worker
processes (so paho is not the bottleneck), per broker:

- pairs: ``--pairs`` (100) publisher -> subscriber pairs, a topic each, every
  publisher sending ``--pair-count`` messages (QoS 1: at most 10 unacknowledged
  per publisher); msg/s received, from the first publish to the last receipt;
- fan-out: one publisher -> ``--fanout`` (1,000) subscribers of one topic,
  ``--fanout-count`` messages; deliveries/s;
- idle: ``--idle`` (10,000) connections (CONNECT, keepalive 600 s, nothing
  more): the growth of the broker's RSS (its process tree) divided by the
  connections, and its CPU over ``--idle-seconds`` (10) while they sit idle.
  Idle runs first; the RSS figure shown is the first round's, on a freshly
  started broker (later rounds reuse memory the allocator kept), counted from
  when its process tree's RSS holds still (``settled_rss``).

Pairs and fan-out also show the broker's CPU (its process tree's user + system
time over the run) per message received: steadier than rates on a shared machine.
``BENCH_BASELINE=DIR`` adds ``amqplite@DIR``, the checkout in DIR (a before, e.g.
``git archive main | tar -x -C DIR``, compiled or not), beside this one.

Brokers take turns in every round (the order rotates) and the table shows the
median over rounds, with the load average of the machine. Prints figures only,
asserts nothing: a shared 2-core machine makes them indicative. QoS 1 on
amqplite is persistent (delivery mode 2, committed before PUBACK when a durable
queue holds it; here the subscriber's clean-session queue is not durable).
Mosquitto runs with persistence off; RabbitMQ is the Debian 3.10 node of
scripts/rabbitmq.sh with the plugin enabled on its own MQTT port.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import paho.mqtt.client as paho  # noqa: E402
import psutil  # noqa: E402

# the tests' port picking (below the ephemeral range) and waits with a deadline
from tests.brokerproc import free_port, wait_for  # noqa: E402
from tests.server.mqttclient import listening  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import mqtt_load  # noqa: E402

STAMP = struct.Struct(">Id")  # sequence number, send time (perf_counter)


def wait(pred: Callable[[], Any], timeout: float, what: str) -> None:
    wait_for(pred, timeout, what=what)


# ---------------------------------------------------------------- brokers
@attrs.frozen
class Broker:
    port: int  # its MQTT listener
    pid: int  # the process whose tree's memory and CPU the idle figures count


@contextlib.contextmanager
def serving(cmd: list[str], port: int, what: str, tree: Path = ROOT) -> Iterator[Broker]:
    """Run ``cmd`` in ``tree`` (its ``amqplite/`` imported) until the block ends; yields
    it once something listens on ``port``."""
    env = None if tree == ROOT else dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree,
                            env=env)
    try:
        wait(lambda: listening(port), 60, what)
        yield Broker(port, proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


def amqplite(tmp: Path, tree: Path = ROOT) -> contextlib.AbstractContextManager[Broker]:
    port, mqtt = free_port(), free_port()
    return serving([sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
                    str(port), "--mqtt-port", str(mqtt), "--stomp-port", "0", "--kafka-port", "0",
                    "--admin-port", "0",
                    "--data-dir", str(tmp / f"amqplite-{tree.name}"), "--log-level", "warning"],
                   mqtt, f"amqplite's MQTT listener ({tree})", tree)


def mosquitto(tmp: Path) -> contextlib.AbstractContextManager[Broker]:
    port = free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    return serving([exe, "-c", str(conf)], port, "Mosquitto")


@contextlib.contextmanager
def rabbitmq(tmp: Path, protocol: str = "MQTT") -> Iterator[Broker]:
    """A node of scripts/rabbitmq.sh with the ``protocol`` plugin (MQTT or STOMP) on a
    port of its own; yields that port."""
    port, listener = free_port(), free_port()
    node = tmp / "rabbitmq"
    script = str(ROOT / "scripts" / "rabbitmq.sh")
    env = dict(os.environ, **{f"RABBITMQ_{protocol}_PORT": str(listener)})
    subprocess.run(["bash", script, "start", str(node), str(port)], check=True, env=env)
    try:
        wait(lambda: listening(listener), 60, f"RabbitMQ's {protocol} listener")
        # the Erlang VM's OS pid (RABBITMQ_PID_FILE, written once the node booted)
        yield Broker(listener, int((node / "node.pid").read_text().split()[0]))
    finally:
        subprocess.run(["bash", script, "stop", str(node)], check=False)


BROKERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[Broker]]] = {
    "amqplite": amqplite, "Mosquitto 2.0": mosquitto, "RabbitMQ 3.10 mqtt": rabbitmq}
if os.environ.get("BENCH_BASELINE"):  # another checkout beside this one (a before)
    _tree = Path(os.environ["BENCH_BASELINE"]).resolve()
    BROKERS = {f"amqplite@{_tree.name}": functools.partial(amqplite, tree=_tree), **BROKERS}


# ---------------------------------------------------------------- clients
class Sub:
    """A subscriber recording (sequence, latency) of each message it gets."""

    def __init__(self, port: int, topic: str, qos: int) -> None:
        self.got: list[float] = []
        self.last = 0.0
        self.done = threading.Event()
        self.want = 0
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"bs-{uuid.uuid4().hex[:8]}",
                             protocol=paho.MQTTv311)
        self.c.username_pw_set("guest", "guest")
        self.c.on_message = self._on_message
        subacked = threading.Event()
        self.c.on_subscribe = lambda *_a: subacked.set()
        self.c.on_connect = lambda c, *_a: c.subscribe(topic, qos)
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        if not subacked.wait(30):
            raise SystemExit("no SUBACK")

    def _on_message(self, _c: Any, _u: Any, m: paho.MQTTMessage) -> None:
        now = time.perf_counter()
        _seq, sent = STAMP.unpack_from(m.payload)
        self.got.append(now - sent)
        self.last = now
        if len(self.got) >= self.want:
            self.done.set()

    def expect(self, n: int) -> None:
        self.got, self.want = [], n
        self.done.clear()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def publisher(port: int) -> paho.Client:
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"bp-{uuid.uuid4().hex[:8]}",
                    protocol=paho.MQTTv311)
    c.username_pw_set("guest", "guest")
    up = threading.Event()
    c.on_connect = lambda *_a: up.set()
    c.connect("127.0.0.1", port)
    c.loop_start()
    if not up.wait(30):
        raise SystemExit("no CONNACK")
    return c


def payload(seq: int, size: int) -> bytes:
    head = STAMP.pack(seq, time.perf_counter())
    return head + b"x" * max(0, size - len(head))


def measure(port: int, qos: int, args: argparse.Namespace) -> tuple[float, float, float, int]:
    """(msg/s, p50 ms, p99 ms, messages lost in the throughput run)."""
    topic = f"bench/{uuid.uuid4().hex[:8]}/t"
    sub = Sub(port, topic, qos)
    pub = publisher(port)
    try:
        # throughput: as fast as paho publishes
        sub.expect(args.count)
        start = time.perf_counter()
        infos = [pub.publish(topic, payload(i, args.size), qos) for i in range(args.count)]
        sub.done.wait(args.timeout)
        got = len(sub.got)
        rate = got / (sub.last - start) if got and sub.last > start else 0.0
        if qos:
            for info in infos[-50:]:
                info.wait_for_publish(args.timeout)
        # latency: paced
        sub.expect(args.paced)
        gap = 1.0 / args.rate
        t0 = time.perf_counter()
        for i in range(args.paced):
            target = t0 + i * gap
            while (delay := target - time.perf_counter()) > 0:
                time.sleep(delay)  # pacing the publisher, not synchronising
            pub.publish(topic, payload(i, args.size), qos)
        sub.done.wait(args.timeout)
        lat = sorted(sub.got)
        p50 = lat[len(lat) // 2] * 1000 if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan")
        return rate, p50, p99, args.count - got
    finally:
        pub.disconnect()
        pub.loop_stop()
        sub.close()


# ---------------------------------------------------------------- many clients
def spread(items: list[Any], procs: int) -> list[list[Any]]:
    """``items`` dealt round-robin over ``procs`` workers."""
    return [items[w::procs] for w in range(procs)]


def workers(target: Callable[..., None], each: list[tuple[Any, ...]], timeout: float,
            between: Callable[[], None] | None = None) -> list[Any]:
    """Run ``target(*args, barrier, results)`` in a process per ``each`` item; they
    start together at the barrier (and wait at a second one while ``between``
    measures); each puts its outcome, or the exception it raised, on ``results``."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(len(each) + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, results)) for a in each]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout)
        if between is not None:
            between()
            barrier.wait(timeout)
        out = [results.get(timeout=timeout + 30) for _ in each]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    for o in out:
        if isinstance(o, BaseException):
            raise o
    return out


def load(plans: list[mqtt_load.Plan], args: argparse.Namespace,
         between: Callable[[], None] | None = None) -> list[mqtt_load.Outcome]:
    """Run one mqtt_load worker process per plan (see ``workers``)."""
    tag = uuid.uuid4().hex[:8]
    return workers(mqtt_load.worker, [(plan, f"b{tag}w{w}") for w, plan in enumerate(plans)],
                   args.timeout, between)


def cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid``'s process tree so far."""
    return sum(sum(p.cpu_times()[:2]) for p in tree(pid))


def rate(outs: list[mqtt_load.Outcome], b: Broker, cpu0: float) -> tuple[float, int, float]:
    """(received per second from the first publish to the last receipt, lost, the
    broker's CPU microseconds per message received since ``cpu0``)."""
    used = cpu(b.pid) - cpu0
    got = sum(o.received for o in outs)
    start = min(o.first_send for o in outs)
    end = max(o.last_recv for o in outs)
    return (got / (end - start) if got and end > start else 0.0,
            sum(o.expected for o in outs) - got, 1e6 * used / got if got else 0.0)


def pairs(b: Broker, qos: int, args: argparse.Namespace) -> tuple[float, int, float]:
    base = f"bench/{uuid.uuid4().hex[:8]}"
    topics = [f"{base}/{j}" for j in range(args.pairs)]
    plans = [mqtt_load.Plan(b.port, qos, args.size, subs=tuple(ts), expect=args.pair_count,
                            pubs=tuple((t, args.pair_count) for t in ts), timeout=args.timeout)
             for ts in spread(topics, args.procs)]
    cpu0 = cpu(b.pid)
    return rate(load(plans, args), b, cpu0)


def fanout(b: Broker, qos: int, args: argparse.Namespace) -> tuple[float, int, float]:
    topic = f"bench/{uuid.uuid4().hex[:8]}/fan"
    plans = [mqtt_load.Plan(b.port, qos, args.size, subs=(topic,) * len(part),
                            expect=args.fanout_count,
                            pubs=((topic, args.fanout_count),) if w == 0 else (),
                            timeout=args.timeout)
             for w, part in enumerate(spread(list(range(args.fanout)), args.procs))]
    cpu0 = cpu(b.pid)
    return rate(load(plans, args), b, cpu0)


def tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def settled_rss(pid: int, timeout: float = 30.0) -> int:
    """The RSS of ``pid``'s process tree once it holds still: a broker may still be
    starting when its port listens (amqplite's store writer process imports for a
    second or more after that; counted, its ~36 MiB added 3.6 KiB to each of
    10,000 connections)."""
    last, deadline = -1, time.monotonic() + timeout
    while True:
        now = sum(p.memory_info().rss for p in tree(pid))
        if abs(now - last) < 256 * 1024 or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.5)  # the sampling interval


def idle(b: Broker, args: argparse.Namespace) -> tuple[float, float, int]:
    """(RSS growth per connection in KiB, CPU % of one core while idle, connected)."""
    before = settled_rss(b.pid)
    seen: dict[str, float] = {}

    def measure() -> None:
        procs = tree(b.pid)
        seen["rss"] = sum(p.memory_info().rss for p in procs)
        cpu0 = sum(sum(p.cpu_times()[:2]) for p in procs)
        t0 = time.monotonic()
        time.sleep(args.idle_seconds)  # the measuring window, not a synchronisation
        cpu1 = sum(sum(p.cpu_times()[:2]) for p in procs)
        seen["cpu"] = 100 * (cpu1 - cpu0) / (time.monotonic() - t0)

    plans = [mqtt_load.Plan(b.port, idle=n, timeout=args.timeout)
             for n in (len(x) for x in spread(list(range(args.idle)), args.procs))]
    outs = load(plans, args, measure)
    n = sum(o.connected for o in outs)
    return (seen["rss"] - before) / 1024 / n, seen["cpu"], n


# idle first: in the first round it meets a freshly started broker, whose RSS growth
# is the honest one (later rounds reuse memory the allocator kept from before)
SCENARIOS = ("idle", "one", "pairs", "fanout")


def run_one(name: str, scenario: str, b: Broker, args: argparse.Namespace,
            results: dict[tuple[str, str, int], list[tuple[float, ...]]], r: int) -> None:
    """One scenario on one broker, its figures appended to ``results`` and printed."""
    for qos in ((0,) if scenario == "idle" else (0, 1)):
        res: tuple[float, ...]
        if scenario == "one":
            res = measure(b.port, qos, args)
            text = (f"{res[0]:>8.0f} msg/s, p50 {res[1]:.2f} ms, p99 {res[2]:.2f} ms, "
                    f"lost {res[3]}")
        elif scenario == "idle":
            res = idle(b, args)
            text = (f"{res[0]:.1f} KiB/connection, idle CPU {res[1]:.1f}% of a core, "
                    f"{res[2]} connected")
        else:
            res = (pairs if scenario == "pairs" else fanout)(b, qos, args)
            text = f"{res[0]:>8.0f} msg/s, lost {res[1]}, broker CPU {res[2]:.1f} us/msg"
        results.setdefault((name, scenario, qos), []).append(res)
        print(f"round {r + 1} {name:<20} {scenario:<6} QoS {qos}: {text} "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)


def table(names: list[str], args: argparse.Namespace,
          results: dict[tuple[str, str, int], list[tuple[float, ...]]]) -> None:
    def med(key: tuple[str, str, int], i: int) -> float:
        return statistics.median(x[i] for x in results[key])

    def lost(key: tuple[str, str, int], i: int) -> int:
        return int(max(x[i] for x in results[key]))

    if "one" in args.scenarios:
        print(f"\n1 -> 1 (paho): {args.count} msgs of {args.size} B per throughput run, "
              f"{args.paced} at {args.rate:.0f}/s per latency run")
        print("| broker | QoS | msg/s | p50 ms | p99 ms | lost |")
        print("|---|---|---|---|---|---|")
        for n in names:
            for q in (0, 1):
                k = (n, "one", q)
                print(f"| {n} | {q} | {med(k, 0):,.0f} | {med(k, 1):.2f} | {med(k, 2):.2f} "
                      f"| {lost(k, 3)} |")
    if "pairs" in args.scenarios or "fanout" in args.scenarios:
        print(f"\nmany clients ({args.procs} processes): {args.pairs} pairs x "
              f"{args.pair_count} msgs; 1 -> {args.fanout} subscribers x {args.fanout_count}"
              " msgs (deliveries/s)")
        print("| broker | QoS | pairs msg/s | lost | CPU us/msg | fan-out deliveries/s | lost "
              "| CPU us/delivery |")
        print("|---|---|---|---|---|---|---|---|")
        for n in names:
            for q in (0, 1):
                cells = []
                for sc in ("pairs", "fanout"):
                    k = (n, sc, q)
                    cells += ([f"{med(k, 0):,.0f}", str(lost(k, 1)), f"{med(k, 2):.1f}"]
                              if k in results else ["-", "-", "-"])
                print(f"| {n} | {q} | " + " | ".join(cells) + " |")
    if "idle" in args.scenarios:
        print(f"\n{args.idle} idle connections, CPU over {args.idle_seconds:.0f} s")
        print("| broker | RSS KiB/connection (round 1) | idle CPU % of a core | connected |")
        print("|---|---|---|---|")
        for n in names:
            k = (n, "idle", 0)
            print(f"| {n} | {results[k][0][0]:.1f} | {med(k, 1):.1f} | "
                  f"{min(x[2] for x in results[k]):.0f} |")


def choose(parser: argparse.ArgumentParser, scenarios: tuple[str, ...],
           brokers: dict[str, Any]) -> argparse.Namespace:
    """Parse the command line, adding --scenario and --only; ``args.scenarios`` and
    ``args.names`` are what to run (all by default)."""
    parser.add_argument("--scenario", dest="scenarios", action="append", choices=scenarios,
                        help="run these only (repeatable; default all)")
    parser.add_argument("--only", action="append", choices=sorted(brokers),
                        help="measure these brokers only (repeatable)")
    args = parser.parse_args()
    args.scenarios = args.scenarios or list(scenarios)
    args.names = args.only or list(brokers)
    return args


def run_rounds(args: argparse.Namespace,
               brokers: dict[str, Callable[[Path], contextlib.AbstractContextManager[Broker]]],
               rounds: int, run_one: Callable[..., None], results: dict[Any, Any]) -> list[float]:
    """Start ``args.names``' brokers, then in every round run each scenario on each
    broker (``run_one(name, scenario, broker, args, results, round)``), the brokers'
    order rotating; the load averages seen after each."""
    names = args.names
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmpdir, contextlib.ExitStack() as stack:
        up = {n: stack.enter_context(brokers[n](Path(tmpdir))) for n in names}
        print(f"brokers up: {up}", flush=True)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                for scenario in args.scenarios:
                    run_one(name, scenario, up[name], args, results, r)
                    loads.append(os.getloadavg()[0])
    return loads


def common_parser(doc: str | None) -> argparse.ArgumentParser:
    """The 1 -> 1 options the MQTT and STOMP benches share."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20000, help="messages per throughput run")
    parser.add_argument("--paced", type=int, default=1000, help="messages per latency run")
    parser.add_argument("--rate", type=float, default=500.0, help="latency run, msg/s")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    return parser


def main() -> int:
    parser = common_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--procs", type=int, default=2, help="client worker processes")
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--pair-count", type=int, default=300, help="messages per pair")
    parser.add_argument("--fanout", type=int, default=1000, help="subscribers")
    parser.add_argument("--fanout-count", type=int, default=50, help="messages published")
    parser.add_argument("--idle", type=int, default=10000, help="idle connections")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    args = choose(parser, SCENARIOS, BROKERS)
    names = args.names
    # 10,000 sockets: the client workers (forked from here) and the brokers started
    # from here inherit this limit; RabbitMQ's node gets it through rabbitmq-server
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.idle + 4096))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    results: dict[tuple[str, str, int], list[tuple[float, ...]]] = {}
    loads = run_rounds(args, BROKERS, args.rounds, run_one, results)
    print(f"\nmedian of {args.rounds} rounds; load average {min(loads):.1f}-{max(loads):.1f} "
          f"on {os.cpu_count()} cores")
    table(names, args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
