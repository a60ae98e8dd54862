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
import os
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

import paho.mqtt.client as paho  # noqa: E402

# the tests' port picking (below the ephemeral range) and waits with a deadline
from tests.brokerproc import free_port, wait_for  # noqa: E402
from tests.server.mqttclient import listening  # noqa: E402

STAMP = struct.Struct(">Id")  # sequence number, send time (perf_counter)


def wait(pred: Callable[[], Any], timeout: float, what: str) -> None:
    wait_for(pred, timeout, what=what)


# ---------------------------------------------------------------- brokers
@contextlib.contextmanager
def serving(cmd: list[str], port: int, what: str) -> Iterator[int]:
    """Run ``cmd`` until the block ends; yields ``port`` once something listens there."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        wait(lambda: listening(port), 60, what)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def amqplite(tmp: Path) -> contextlib.AbstractContextManager[int]:
    port, mqtt = free_port(), free_port()
    return serving([sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
                    str(port), "--mqtt-port", str(mqtt), "--admin-port", "0", "--data-dir",
                    str(tmp / "amqplite"), "--log-level", "warning"], mqtt,
                   "amqplite's MQTT listener")


def mosquitto(tmp: Path) -> contextlib.AbstractContextManager[int]:
    port = free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    return serving([exe, "-c", str(conf)], port, "Mosquitto")


@contextlib.contextmanager
def rabbitmq(tmp: Path) -> Iterator[int]:
    port, mqtt = free_port(), free_port()
    node = tmp / "rabbitmq"
    script = str(ROOT / "scripts" / "rabbitmq.sh")
    env = dict(os.environ, RABBITMQ_MQTT_PORT=str(mqtt))
    subprocess.run(["bash", script, "start", str(node), str(port)], check=True, env=env)
    try:
        wait(lambda: listening(mqtt), 60, "RabbitMQ's MQTT listener")
        yield mqtt
    finally:
        subprocess.run(["bash", script, "stop", str(node)], check=False)


BROKERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[int]]] = {
    "amqplite": amqplite, "Mosquitto 2.0": mosquitto, "RabbitMQ 3.10 mqtt": rabbitmq}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=20000, help="messages per throughput run")
    parser.add_argument("--paced", type=int, default=1000, help="messages per latency run")
    parser.add_argument("--rate", type=float, default=500.0, help="latency run, msg/s")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--only", action="append", choices=sorted(BROKERS),
                        help="measure these brokers only (repeatable)")
    args = parser.parse_args()
    names = args.only or list(BROKERS)
    results: dict[tuple[str, int], list[tuple[float, float, float, int]]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-mqtt-") as tmpdir, \
            contextlib.ExitStack() as stack:
        ports = {n: stack.enter_context(BROKERS[n](Path(tmpdir))) for n in names}
        print(f"brokers up: {ports}", flush=True)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                for qos in (0, 1):
                    res = measure(ports[name], qos, args)
                    results.setdefault((name, qos), []).append(res)
                    loads.append(os.getloadavg()[0])
                    print(f"round {r + 1} {name:<20} QoS {qos}: {res[0]:>8.0f} msg/s, "
                          f"p50 {res[1]:.2f} ms, p99 {res[2]:.2f} ms, lost {res[3]}",
                          flush=True)
    print()
    print(f"{args.count} msgs of {args.size} B per throughput run, {args.paced} at "
          f"{args.rate:.0f}/s per latency run, median of {args.rounds} rounds; "
          f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    print("| broker | QoS | msg/s | p50 ms | p99 ms | lost |")
    print("|---|---|---|---|---|---|")
    for name in names:
        for qos in (0, 1):
            rs = results[(name, qos)]
            med = [statistics.median(x[i] for x in rs) for i in range(3)]
            lost = max(x[3] for x in rs)
            print(f"| {name} | {qos} | {med[0]:.0f} | {med[1]:.2f} | {med[2]:.2f} | {lost} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
