"""End to end: a consumer's ack releases a publisher confirm before the commit.

RabbitMQ confirms a persistent message once it is written or acked by every
queue it went to. Here the test holds SQLite's write lock, so no commit can
happen at all: the confirm still arrives once the consumer has acked, and the
message, settled, is never written. The rules: tests/broker/test_confirms_early.py.
"""

from __future__ import annotations

import sqlite3
import threading

import pika

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect


def test_a_confirm_goes_once_the_consumer_acked_while_the_store_cannot_commit(
        fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("early", durable=True)
    ch.confirm_delivery()

    got: list[bytes] = []
    consuming = threading.Event()

    def consume() -> None:
        cc = connect(b)
        cch = cc.channel()
        cch.basic_qos(prefetch_count=10)
        consuming.set()
        for m, _p, body in cch.consume("early", inactivity_timeout=0.1):
            if m is not None:
                cch.basic_ack(m.delivery_tag)
                got.append(body)
            if got:
                break
        cch.cancel()
        cc.close()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert consuming.wait(20)
    wait_for(lambda: c.channel().queue_declare("early", passive=True).method.consumer_count == 1,
             what="the consumer")
    lock = sqlite3.connect(b.data_dir / "amqplite.db", timeout=20, isolation_level=None,
                           check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")  # the broker's writer can commit nothing now

    def give_up() -> None:  # a failure ends as a failed assertion, not a hang
        lock.execute("ROLLBACK")

    watchdog = threading.Timer(30, give_up)
    watchdog.start()
    try:
        ch.basic_publish("", "early", b"acked", pika.BasicProperties(delivery_mode=2))
        held = watchdog.is_alive()  # the confirm came with the lock still held
    finally:
        watchdog.cancel()
        if lock.in_transaction:
            lock.execute("ROLLBACK")
        lock.close()
    consumer.join(20)
    assert got == [b"acked"]
    assert held, "the confirm waited for the commit"
    # the store works on: a later publish is confirmed and kept
    ch.basic_publish("", "early", b"after", pika.BasicProperties(delivery_mode=2))
    assert ch.basic_get("early", auto_ack=True)[2] == b"after"
    c.close()
