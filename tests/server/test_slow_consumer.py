"""A consumer that stops reading its socket costs the broker bounded memory and no latency."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pika

from conformance._raw import RawConnection, shortstr, table
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

MESSAGE = 64 * 1024
VOLUME = 100 * 2**20
RSS_GROWTH_BOUND = 80 * 2**20
P99_BOUND = 0.5  # seconds
ROUND_TRIPS = 50
BODY_WINDOW = 64


class StalledConsumer(RawConnection):
    """A raw connection whose receive buffer is tiny, set before connecting."""

    def connect(self) -> None:
        parsed = urlparse(self.url)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(self.timeout)
        s.connect((parsed.hostname or "127.0.0.1", parsed.port or 5672))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s

    def consume(self, queue: str) -> None:
        # basic.consume: reserved, queue, tag, no-local/no-ack/exclusive/no-wait, arguments
        self.send_method(1, 60, 20, struct.pack(">H", 0) + shortstr(queue) + shortstr("stall")
                         + b"\x00" + table())
        self.expect((60, 21), channel=1)


def test_stalled_consumer_does_not_grow_the_broker_or_slow_others(tmp_path: Path) -> None:
    # bodies beyond the first BODY_WINDOW entries of a durable queue live only in the
    # store, so what the broker holds in memory is what it buffers for the consumer
    b = BrokerProcess(tmp_path / "d", None, "--durability", "os",
                      env={"AMQPLITE_BODY_WINDOW": str(BODY_WINDOW)}).start()
    stalled: StalledConsumer | None = None
    try:
        setup = connect(b)
        sch = setup.channel()
        sch.queue_declare("slow", durable=True)
        sch.queue_declare("probe")
        setup.close()
        rss0 = b.rss_bytes()

        stalled = StalledConsumer(b.url)
        stalled.open()
        # prefetch 0 (unlimited) is the default; say it anyway: basic.qos 0, 0, global=false
        stalled.send_method(1, 60, 10, struct.pack(">IHB", 0, 0, 0))
        stalled.expect((60, 11), channel=1)
        stalled.consume("slow")
        # from here on the test never reads that socket again

        published = 0
        pub_error: list[BaseException] = []

        def publish() -> None:
            nonlocal published
            try:
                c = connect(b)
                ch = c.channel()
                ch.confirm_delivery()
                body = b"x" * MESSAGE
                persistent = pika.BasicProperties(delivery_mode=2)
                for _ in range(VOLUME // MESSAGE):
                    ch.basic_publish("", "slow", body, persistent)
                    published += 1
                c.close()
            except BaseException as e:  # reported by the main thread
                pub_error.append(e)

        pub = threading.Thread(target=publish, daemon=True)
        pub.start()

        probe = connect(b)
        pch = probe.channel()
        pch.confirm_delivery()
        latencies: list[float] = []
        peak = rss0
        while len(latencies) < ROUND_TRIPS or pub.is_alive():
            t0 = time.monotonic()
            pch.basic_publish("", "probe", b"ping")
            got = wait_for(lambda: pch.basic_get("probe", auto_ack=True)[0], 10,
                           interval=0.001, what="the probe message")
            assert got is not None
            latencies.append(time.monotonic() - t0)
            peak = max(peak, b.rss_bytes())
            if len(latencies) > 5000:
                break
        pub.join(60)
        assert not pub_error, pub_error
        assert published == VOLUME // MESSAGE
        peak = max(peak, b.rss_bytes())
        probe.close()

        # the stalled consumer still holds its deliveries unacked; the rest wait in the queue
        admin_c = connect(b)
        q = admin_c.channel().queue_declare("slow", passive=True).method
        admin_c.close()
        # transient bodies would all stay in memory whatever the consumer does; persistent
        # ones past the body window do not, so the bound below measures delivery buffering
        assert q.message_count > published // 2, "deliveries piled up in the broker, not the queue"
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        growth = peak - rss0
        print(f"\nstalled consumer: {published} x 64 KiB published, {q.message_count} ready, "
              f"broker RSS +{growth / 2**20:.1f} MiB, probe round trips {len(latencies)}, "
              f"p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
        assert growth < RSS_GROWTH_BOUND, f"broker grew {growth / 2**20:.0f} MiB"
        assert p99 < P99_BOUND, f"p99 publish->get {p99 * 1000:.0f} ms"
    finally:
        if stalled is not None:
            stalled.sock.close()
        b.kill()

