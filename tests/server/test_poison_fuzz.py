"""Arbitrary content properties against a real broker process (issue 7).

One raw publisher sends hypothesis-made property bytes down every route that
decodes them later: TTL expiry and max-length overflow into a dead-letter
exchange, reject-publish-dlx, reject and the delivery limit, the headers
exchange, the delivery log and the admin API's peek. After each example the
broker must be up, the publisher refused (406 on its channel) or accepted,
and an observer on another connection must have had its confirmed persistent
publish acked, not nacked.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest
from hypothesis import HealthCheck, given, settings

from conformance._raw import RawConnection, ServerClosed, shortstr, table
from tests.brokerproc import BrokerProcess, wait_for
from tests.protocol.strategies import hostile_properties
from tests.server.conftest import connect

DLX = {"x-dead-letter-exchange": "fz-dlx"}
QUEUES = {
    "fz-ttl": {"x-message-ttl": 20, **DLX},
    "fz-lim": {"x-max-length": 1, **DLX},
    "fz-rpd": {"x-max-length": 1, "x-overflow": "reject-publish-dlx", **DLX},
    "fz-dlim": {"x-delivery-limit": 1, **DLX},
    "fz-rej": DLX,
    "fz-hq": {},
    "fz-dlq": {},
}
POISON_ROUTES = [("", q) for q in ("fz-ttl", "fz-lim", "fz-rpd", "fz-dlim", "fz-rej")]
POISON_ROUTES.append(("fz-hx", ""))


class World:
    """The broker, its topology, and the three clients every example reuses."""

    def __init__(self, b: BrokerProcess) -> None:
        self.b = b
        setup = connect(b)
        ch = setup.channel()
        ch.exchange_declare("fz-dlx", "fanout")
        ch.exchange_declare("fz-hx", "headers")
        for name, args in QUEUES.items():
            ch.queue_declare(name, durable=True, arguments=args)  # persistent poison is stored
        ch.queue_declare("fz-good", durable=True)
        ch.queue_bind("fz-dlq", "fz-dlx")
        ch.queue_bind("fz-hq", "fz-hx", arguments={"x-match": "any", "a": 1})
        setup.close()
        self.pub = RawConnection(b.url).open()
        self.con = RawConnection(b.url).open()
        self.obs = connect(b)
        self.obs_ch = self.obs.channel()
        self.obs_ch.confirm_delivery()  # a nack raises pika.exceptions.NackError
        self.http = httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest"), timeout=10)

    def close(self) -> None:
        self.http.close()
        self.obs.close()
        self.pub.close()
        self.con.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("fuzz")) / "data").start()
    w = World(b)
    yield w
    w.close()
    b.stop()


def count(conn: RawConnection, queue: str) -> int:
    """message_count from a passive queue.declare."""
    conn.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(queue) + b"\x01" + table())
    ok = conn.expect((50, 11), channel=1)
    return int(struct.unpack_from(">I", ok.args, 1 + ok.args[0])[0])


def purge(conn: RawConnection, queue: str) -> None:
    conn.send_method(1, 50, 30, struct.pack(">H", 0) + shortstr(queue) + b"\x00")
    conn.expect((50, 31), channel=1)


def settle(conn: RawConnection, queue: str, method: tuple[int, int], requeue: bool) -> bool:
    """Get one message unacked and reject/nack it; False when the queue was empty."""
    got = conn.get(queue, no_ack=False)
    if got is None:
        return False
    (tag,) = struct.unpack_from(">Q", got.method.args)
    bits = (2 if requeue else 0) if method == (60, 120) else int(requeue)  # nack: bit 1
    conn.send_method(1, *method, struct.pack(">QB", tag, bits))
    return True


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=hostile_properties(list(QUEUES)))
def test_hostile_properties_leave_broker_and_others_unharmed(world: World, raw: bytes) -> None:
    w, pub, con = world, world.pub, world.con
    w.obs_ch.basic_publish("", "fz-rpd", b"first")  # full: the poison is the one refused
    for exchange, rk in POISON_ROUTES:
        pub.publish(exchange, rk, b"poison", raw)
    try:
        count(pub, "fz-dlq")  # in order after the publishes: they were all handled
    except ServerClosed as exc:  # refused at the door: this publisher's channel, 406
        assert (exc.kind, exc.reply_code) == ("channel.close", 406), exc
        pub.send_method(1, 20, 41, b"")
        pub.send_method(1, 20, 10, shortstr(""))
        pub.expect((20, 11), channel=1)
    # another client: its confirmed persistent publish commits; its publish overflows fz-lim
    w.obs_ch.basic_publish("", "fz-good", b"ok", pika.BasicProperties(delivery_mode=2))
    w.obs_ch.basic_publish("", "fz-lim", b"next")
    settle(con, "fz-rej", (60, 90), requeue=False)
    while settle(con, "fz-dlim", (60, 120), requeue=True):  # until past the delivery limit
        pass
    wait_for(lambda: count(con, "fz-ttl") == 0, 10, what="TTL expiry")
    for q in [*QUEUES, "fz-good"]:
        r = w.http.get(f"/api/queues/%2F/{q}/messages", params={"limit": 10})
        assert r.status_code == 200, (q, r.text)
    for q in [*QUEUES, "fz-good"]:
        purge(con, q)
    assert w.b.proc is not None and w.b.proc.poll() is None, w.b.log()
