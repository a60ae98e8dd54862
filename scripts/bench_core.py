"""Per-message cost of the pure core, wire to wire, without an event loop.

Drives what one server batch does for a publisher and a consumer: publish
frames parsed by a ``ServerConnection``, ``Broker.basic_publish``, the Outcome's
Deliver effects written as frames by the consumer's ``ServerConnection``, and
(persistent) the consumer's ``basic.ack(multiple)`` parsed and applied. Store
operations are taken and dropped (the writer is not measured here). The stream
case publishes with confirms to a stream and pickles each batch's store ops as
the writer process's frames (``store.writer_frames.encode``): the event loop's share of
appending. Prints µs per message, best of ``--repeat``; never asserts on speed.

    python scripts/bench_core.py [--count 50000] [--batch 64] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amqplite.broker.core import Broker
from amqplite.broker.effects import Deliver
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.events import ContentReceived, MethodReceived
from amqplite.protocol.frames import encode_frame
from amqplite.protocol.methods import (
    BasicAck,
    BasicPublish,
    ChannelOpen,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
    encode_method,
)
from amqplite.protocol.properties import BasicProperties, encode_properties
from amqplite.store.writer_frames import encode

BODY = b"x" * 1024


def _method(channel: int, m: object) -> bytes:
    return encode_frame(1, channel, encode_method(m))  # type: ignore[arg-type]


def _open() -> ServerConnection:
    """A ServerConnection past the handshake with channel 1 open, output drained."""
    conn = ServerConnection(authenticate=lambda u, p: True, check_vhost=lambda u, v: True)
    conn.receive_data(b"AMQP\x00\x00\x09\x01")
    conn.receive_data(_method(0, ConnectionStartOk(
        client_properties=FieldTable({"product": "bench"}), mechanism="PLAIN",
        response=b"\x00guest\x00guest")))
    conn.receive_data(_method(0, ConnectionTuneOk(2047, 131072, 0))
                      + _method(0, ConnectionOpen("/")) + _method(1, ChannelOpen()))
    list(conn.events())
    conn.data_to_send()
    return conn


def _publish_frames(persistent: bool, n: int) -> bytes:
    props = encode_properties(BasicProperties(content_type="application/octet-stream",
                                              delivery_mode=2 if persistent else 1))
    one = (_method(1, BasicPublish(exchange="", routing_key="bench"))
           + encode_frame(2, 1, b"\x00\x3c\x00\x00" + len(BODY).to_bytes(8, "big") + props)
           + encode_frame(3, 1, BODY))
    return one * n


def make_run(persistent: bool, count: int, batch: int) -> Callable[[], int]:
    """A closure doing ``count`` messages in batches of ``batch``; returns bytes written."""
    broker = Broker()
    pub_conn, con_conn = _open(), _open()
    pub_s = broker.open_session("guest", "/")
    con_s = broker.open_session("guest", "/")
    pub_ch = broker.open_channel(pub_s, 1)
    con_ch = broker.open_channel(con_s, 1)
    broker.queue_declare(pub_ch, "bench", durable=persistent)
    if persistent:
        broker.basic_qos(con_ch, 0, 1000, False)
    tag = broker.basic_consume(con_ch, "bench", no_ack=not persistent)
    broker.start_consumer(con_ch, tag)
    broker.take_outcome()
    chunk = _publish_frames(persistent, batch)
    pub_channels = {1: pub_ch}
    con_channels = {1: con_ch}

    def run() -> int:
        written = 0
        acked = 0
        for _ in range(count // batch):
            # the publisher's read: frames -> events -> commands
            pub_conn.receive_data(chunk)
            while (ev := pub_conn.next_event()) is not None:
                if type(ev) is ContentReceived:
                    m = ev.method
                    broker.basic_publish(pub_channels[ev.channel], m.exchange, m.routing_key,
                                         ev.properties_raw, ev.body, mandatory=m.mandatory,
                                         immediate=m.immediate)
            out = broker.take_outcome()
            for e in out.effects:
                if type(e) is Deliver:
                    msg = e.message
                    assert msg.body is not None
                    con_conn.send_deliver(e.channel.number, e.consumer_tag, e.delivery_tag,
                                          e.redelivered, msg.exchange, msg.routing_key,
                                          e.properties or msg.properties_raw, msg.body)
            written += len(con_conn.data_to_send())
            if persistent:
                # the consumer's read: one ack(multiple) for what it got
                acked += batch
                con_conn.receive_data(_method(1, BasicAck(delivery_tag=acked, multiple=True)))
                while (ev := con_conn.next_event()) is not None:
                    if type(ev) is MethodReceived:
                        ack: Any = ev.method
                        broker.basic_ack(con_channels[ev.channel], ack.delivery_tag, ack.multiple)
                broker.take_outcome()
        return written

    return run


def make_stream_run(count: int, batch: int) -> Callable[[], int]:
    """Publishes with confirms to a stream, each batch's store ops pickled as they
    go to the writer process; returns the bytes pickled."""
    broker = Broker()
    conn = _open()
    ch = broker.open_channel(broker.open_session("guest", "/"), 1)
    broker.queue_declare(ch, "bench", durable=True, arguments={"x-queue-type": "stream"})
    broker.confirm_select(ch)
    broker.take_outcome()
    chunk = _publish_frames(True, batch)
    channels = {1: ch}

    def run() -> int:
        pickled = 0
        for sid in range(count // batch):
            conn.receive_data(chunk)
            while (ev := conn.next_event()) is not None:
                if type(ev) is ContentReceived:
                    m = ev.method
                    broker.basic_publish(channels[ev.channel], m.exchange, m.routing_key,
                                         ev.properties_raw, ev.body, mandatory=m.mandatory,
                                         immediate=m.immediate)
            out = broker.take_outcome()
            pickled += len(encode(("s", sid, out.store_ops, True)))
        return pickled

    return run


def measure(persistent: bool | None, count: int, batch: int, repeat: int) -> float:
    """Best of ``repeat`` runs, µs per message (process CPU time); None: the stream."""
    best = float("inf")
    for _ in range(repeat):
        run = (make_stream_run(count, batch) if persistent is None
               else make_run(persistent, count, batch))
        t = time.process_time()
        run()
        best = min(best, time.process_time() - t)
    return best / count * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--profile", choices=["transient", "persistent", "stream"])
    args = p.parse_args()
    if args.profile:
        run = (make_stream_run(args.count, args.batch) if args.profile == "stream"
               else make_run(args.profile == "persistent", args.count, args.batch))
        prof = cProfile.Profile()
        prof.runcall(run)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    for name, persistent in (("transient publish -> no-ack deliver", False),
                             ("persistent publish -> deliver -> ack", True),
                             ("stream publish (confirms) -> store ops", None)):
        us = measure(persistent, args.count, args.batch, args.repeat)
        print(f"{name:40s} {us:6.2f} µs/msg")


if __name__ == "__main__":
    main()
