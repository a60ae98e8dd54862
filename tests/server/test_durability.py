"""Restarts and crashes: what was promised survives, transient state does not."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pika

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect


def test_graceful_restart_keeps_durable_state(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    c = connect(b)
    ch = c.channel()
    ch.exchange_declare("dx", "topic", durable=True)
    ch.queue_declare("dq", durable=True)
    ch.queue_declare("tq", durable=False)
    ch.queue_bind("dq", "dx", "a.#")
    ch.confirm_delivery()
    ch.basic_publish("dx", "a.b", b"persistent", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("dx", "a.b", b"transient", pika.BasicProperties(delivery_mode=1))
    c.close()
    assert b.stop() == 0
    b.start()
    c = connect(b)
    ch = c.channel()
    assert ch.queue_declare("dq", passive=True).method.message_count == 1
    assert ch.basic_get("dq", auto_ack=True)[2] == b"persistent"
    ch.basic_publish("dx", "a.c", b"routed-after-restart", pika.BasicProperties(delivery_mode=2))
    assert ch.basic_get("dq", auto_ack=True)[2] == b"routed-after-restart"
    ch2 = c.channel()
    try:
        ch2.queue_declare("tq", passive=True)
        raise AssertionError("non-durable queue survived a restart")
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404
    c.close()
    b.stop()


def test_unacked_at_crash_come_back_redelivered(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("work", durable=True)
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", "work", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    m, _, body = ch.basic_get("work")
    assert body == b"0"
    ch.basic_ack(m.delivery_tag)
    m, _, body = ch.basic_get("work")  # delivered, never acked
    assert body == b"1"
    # a confirmed persistent publish commits after the ack above: group commits are ordered
    ch.queue_declare("marker", durable=True)
    ch.basic_publish("", "marker", b"m", pika.BasicProperties(delivery_mode=2))
    b.kill()
    b.start()
    c2 = connect(b)
    ch2 = c2.channel()
    m, _, body = ch2.basic_get("work", auto_ack=True)
    assert body == b"1" and m.redelivered
    rest = [ch2.basic_get("work", auto_ack=True) for _ in range(8)]
    assert [r[2] for r in rest] == [str(i).encode() for i in range(2, 10)]
    # after an unclean stop nothing proves a message was never delivered: all are
    # flagged, as RabbitMQ does (a delivery can beat its "delivered" mark to disk)
    assert all(r[0].redelivered for r in rest)
    c2.close()
    b.stop()


def test_clean_restart_flags_only_delivered_messages(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("work", durable=True)
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", "work", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    _m, _, body = ch.basic_get("work")  # delivered, never acked
    assert body == b"0"
    assert b.stop() == 0
    b.start()
    c2 = connect(b)
    ch2 = c2.channel()
    got = [ch2.basic_get("work", auto_ack=True) for _ in range(5)]
    assert [(r[2], r[0].redelivered) for r in got] == [
        (b"0", True), (b"1", False), (b"2", False), (b"3", False), (b"4", False)]
    c2.close()
    b.stop()


def test_kill_9_after_deliveries_flags_them_redelivered(tmp_path: Path) -> None:
    """Deliveries written to the socket just before a crash come back redelivered."""
    b = BrokerProcess(tmp_path / "d").start()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("w", durable=True)
    ch.confirm_delivery()
    for i in range(300):
        ch.basic_publish("", "w", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    got: list[bytes] = []

    def on_delivery(_c, _m, _p, body) -> None:  # type: ignore[no-untyped-def]
        if not got:
            assert b.proc is not None
            b.proc.kill()  # at once: the "delivered" marks may not have committed yet
        got.append(body)

    # ballast: big persistent writes keep the store busy, so the marks of the
    # deliveries below commit well after the deliveries reach the socket
    ch.queue_declare("ballast", durable=True)
    ballast = connect(b).channel()
    for _ in range(40):
        ballast.basic_publish("", "ballast", b"b" * 1_000_000, pika.BasicProperties(delivery_mode=2))
    ch.basic_qos(prefetch_count=300)
    ch.basic_consume("w", on_delivery)
    with contextlib.suppress(pika.exceptions.AMQPError):
        wait_for(lambda: c.process_data_events(time_limit=0.05) or b.proc.poll() is not None,
                 30, what="the first delivery")
    b.kill()
    b.start()
    c2 = connect(b)
    ch2 = c2.channel()
    flags = []
    while True:
        m, _, body = ch2.basic_get("w", auto_ack=True)
        if m is None:
            break
        flags.append((body, m.redelivered))
    assert sorted(x for x, _ in flags) == sorted(got)
    assert all(red for _, red in flags), "a delivered message came back with redelivered=false"
    c2.close()
    b.stop()


PUBLISHER = textwrap.dedent(
    """
    import sys, pika
    url, n = sys.argv[1], int(sys.argv[2])
    c = pika.BlockingConnection(pika.URLParameters(url))
    ch = c.channel()
    ch.queue_declare("crash", durable=True)
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", "crash", str(i).encode(), pika.BasicProperties(delivery_mode=2))
        print(i, flush=True)  # printed only after the broker confirmed it
    """
)


def test_kill_9_mid_stream_keeps_every_confirmed_message(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    script = tmp_path / "pub.py"
    script.write_text(PUBLISHER)
    with open(tmp_path / "confirmed.txt", "w+") as out:
        pub = subprocess.Popen([sys.executable, str(script), b.url, "100000"], stdout=out)
        try:
            wait_for(lambda: (tmp_path / "confirmed.txt").stat().st_size > 5_000, 120,
                     what="a thousand confirmed publishes")
            b.kill()
            pub.wait(30)
        finally:
            if pub.poll() is None:
                pub.kill()
    confirmed = {int(x) for x in (tmp_path / "confirmed.txt").read_text().split()}
    assert len(confirmed) > 200
    b.start()
    c = connect(b)
    ch = c.channel()
    seen: list[int] = []
    while True:
        m, _, body = ch.basic_get("crash", auto_ack=True)
        if m is None:
            break
        seen.append(int(body))
    assert len(seen) == len(set(seen)), "a message came back twice"
    missing = confirmed - set(seen)
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    assert seen == sorted(seen)
    c.close()
    b.stop()
