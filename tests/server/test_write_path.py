"""Deliveries written straight from the reader, what the socket did not take finished by
the writer task: nothing lost, duplicated or reordered across the hand-over."""

from __future__ import annotations

import socket
import struct
import uuid
from urllib.parse import urlparse

import pika

from conformance._raw import RawConnection, shortstr, table
from tests.brokerproc import BrokerProcess
from tests.server.conftest import connect

COUNT = 300
SIZE = 32 * 1024  # 300 x 32 KiB: far more than a 4 KiB receive buffer holds


class SmallBufferConsumer(RawConnection):
    """A raw connection with a tiny receive buffer, so the broker's writes come up short."""

    def connect(self) -> None:
        parsed = urlparse(self.url)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(self.timeout)
        s.connect((parsed.hostname or "127.0.0.1", parsed.port or 5672))
        self.sock = s


def test_short_writes_keep_every_delivery_in_order(broker: BrokerProcess) -> None:
    queue = f"write-path-{uuid.uuid4().hex[:8]}"
    setup = connect(broker)
    setup.channel().queue_declare(queue, auto_delete=True)
    consumer = SmallBufferConsumer(broker.url, timeout=30)
    consumer.open()
    # basic.consume with no-ack (bit 2): every delivery is written as soon as it is routed
    consumer.send_method(1, 60, 20, struct.pack(">H", 0) + shortstr(queue) + shortstr("w")
                         + b"\x02" + table())
    consumer.expect((60, 21), channel=1)

    pub = connect(broker)
    ch = pub.channel()
    ch.confirm_delivery()  # each publish is routed (and written) before the next
    for i in range(COUNT):
        ch.basic_publish("", queue, struct.pack(">I", i) * (SIZE // 4),
                         pika.BasicProperties(delivery_mode=1))
    pub.close()

    for i in range(COUNT):
        method = consumer.expect((60, 60), channel=1)
        # basic.deliver: consumer-tag (shortstr), then delivery-tag (u64)
        tag_len = method.args[0]
        (delivery_tag,) = struct.unpack_from(">Q", method.args, 1 + tag_len)
        body = consumer.read_content(method).body
        assert delivery_tag == i + 1
        assert body == struct.pack(">I", i) * (SIZE // 4)
    consumer.close()
    setup.close()
