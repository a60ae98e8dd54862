"""Twenty kill -9s under load: no confirmed message is lost, duplicates are few and flagged."""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

CYCLES = 20
SEED = 20261123
PREFETCH = 20

# Both clients reconnect on their own after each crash; polling for the broker
# to come back is the client's job, as in any real deployment.
CLIENT_COMMON = textwrap.dedent(
    """
    import os, sys, time, pika
    url, stop = sys.argv[1], sys.argv[2]

    def session():
        while not os.path.exists(stop):
            try:
                c = pika.BlockingConnection(pika.URLParameters(url))
                ch = c.channel()
                ch.queue_declare("loop", durable=True)
                return c, ch
            except (pika.exceptions.AMQPError, ValueError, OSError):
                # pika raises ValueError ("getpeername() failed") when the broker
                # dies between the TCP connect and the handshake: retry as for any
                # other failed connect
                time.sleep(0.02)
        sys.exit(0)
    """
)

PUBLISHER = CLIENT_COMMON + textwrap.dedent(
    """
    seq = 0
    props = pika.BasicProperties(delivery_mode=2)
    while not os.path.exists(stop):
        c, ch = session()
        try:
            ch.confirm_delivery()
            while not os.path.exists(stop):
                seq += 1  # a number whose publish failed is never reused
                ch.basic_publish("", "loop", str(seq).encode(), props)
                print(seq, flush=True)  # only once the broker confirmed it
            c.close()
        except pika.exceptions.AMQPError:
            pass
    """
)

CONSUMER = CLIENT_COMMON + textwrap.dedent(
    """
    prefetch = int(sys.argv[3])
    while not os.path.exists(stop):
        c, ch = session()
        try:
            ch.basic_qos(prefetch_count=prefetch)
            for m, _p, body in ch.consume("loop", inactivity_timeout=0.1):
                if m is not None:
                    print(body.decode(), int(m.redelivered), flush=True)
                    ch.basic_ack(m.delivery_tag)
                elif os.path.exists(stop):
                    break
            ch.cancel()
            c.close()
        except pika.exceptions.AMQPError:
            pass
    """
)


def _port_outside_ephemeral_range(rng: random.Random) -> int:
    """A free port the kernel never hands out as a source port.

    Clients retry connecting while the broker is down; on loopback such a
    connect can pick the destination port as its own source port and connect
    to itself (TCP simultaneous open), which then keeps the broker from
    binding its port again. Ports below the ephemeral range cannot collide.
    """
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            return port


def _lines(p: Path) -> list[str]:
    text = p.read_text()
    return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]


def test_twenty_kill_9_cycles_under_load(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    port_rng = random.Random()  # not the seeded one: parallel runs must not collide
    amqp_port = _port_outside_ephemeral_range(port_rng)
    admin_port = _port_outside_ephemeral_range(port_rng)
    b = BrokerProcess(tmp_path / "d", amqp_port, "--durability", "os",
                      "--admin-port", str(admin_port)).start()
    (tmp_path / "pub.py").write_text(PUBLISHER)
    (tmp_path / "con.py").write_text(CONSUMER)
    stop = tmp_path / "stop"
    confirmed_f, received_f = tmp_path / "confirmed.txt", tmp_path / "received.txt"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(confirmed_f, "w") as cout, open(received_f, "w") as rout:
            procs.append(subprocess.Popen([sys.executable, str(tmp_path / "pub.py"), b.url,
                                           str(stop)], stdout=cout))
            procs.append(subprocess.Popen([sys.executable, str(tmp_path / "con.py"), b.url,
                                           str(stop), str(PREFETCH)], stdout=rout))
        pub, con = procs
        t0 = time.monotonic()
        for cycle in range(CYCLES):
            # load is flowing again: both clients reconnected and made progress
            c0, r0 = len(_lines(confirmed_f)), len(_lines(received_f))
            wait_for(lambda c0=c0, r0=r0: len(_lines(confirmed_f)) > c0 + 10
                     and len(_lines(received_f)) > r0 + 10, 30,
                     what=f"publisher and consumer progress in cycle {cycle}")
            # the kill lands at a random moment of the load (a random point, not a wait)
            time.sleep(rng.uniform(0.0, 0.6))
            b.kill()
            assert pub.poll() is None and con.poll() is None, "a client died with the broker"
            b.start()
        loop_time = time.monotonic() - t0
        # drain: stop publishing, let the consumer catch up with every confirmed number
        c_last = len(_lines(confirmed_f))
        wait_for(lambda: len(_lines(confirmed_f)) > c_last + 10, 30, what="final progress")
        stop.touch()
        pub.wait(30)
        confirmed = {int(x) for x in _lines(confirmed_f)}

        def drained() -> bool:
            got = {int(line.split()[0]) for line in _lines(received_f)}
            return confirmed <= got

        wait_for(drained, 30, interval=0.05, what="the consumer to receive every confirmed message")
        con.wait(30)
        c = connect(b)
        left = c.channel().queue_declare("loop", durable=True, passive=True).method.message_count
        c.close()
    finally:
        stop.touch()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        b.kill()

    received = [(int(s), r == "1") for s, r in (line.split() for line in _lines(received_f))]
    seen: set[int] = set()
    duplicates = 0
    for seq, redelivered in received:
        if seq in seen:
            duplicates += 1
            assert redelivered, f"message {seq} came twice, the second time redelivered=false"
        seen.add(seq)
    missing = confirmed - seen
    print(f"\ncrash loop: {CYCLES} kill -9 cycles in {loop_time:.1f}s, {len(confirmed)} confirmed, "
          f"{len(received)} deliveries, {len(seen)} distinct, {duplicates} duplicates, "
          f"{len(missing)} lost, {left} left in the queue")
    assert len(confirmed) > 20 * CYCLES
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    # every number received was published (a confirmed one or one in flight at a kill)
    assert max(seen) <= max(confirmed) + CYCLES + 1
    # at-least-once: a duplicate is a delivery the crash kept from being acked; at most
    # the prefetch window plus acks sent but not yet committed at each kill
    assert duplicates <= CYCLES * 2 * PREFETCH, f"{duplicates} duplicates"
    assert left == 0, f"{left} messages left after the consumer acked everything"
