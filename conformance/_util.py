"""Condition waits with deadlines: the suite never sleeps to synchronise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

Delivery = tuple[Any, pika.BasicProperties, bytes]


def shortstr_text(text: str) -> str:
    """A reply text as RabbitMQ sends it: cut to 252 chars + '...' past 255 bytes."""
    return text if len(text.encode()) <= 255 else text.encode()[:252].decode() + "..."


def wait_until(
    conn: pika.BlockingConnection, predicate: Callable[[], bool], timeout: float = 5.0,
    what: str = "condition",
) -> None:
    """Pump the connection's I/O until `predicate()` holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        conn.process_data_events(time_limit=0.02)


def observe(conn: pika.BlockingConnection, seconds: float = 0.3) -> None:
    """Pump I/O for a bounded window, to show that nothing *more* arrives.

    Only used for negative checks (a limit is not exceeded), never to wait
    for something to happen.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=max(0.0, deadline - time.monotonic()))


def eventually(predicate: Callable[[], bool], timeout: float = 5.0,
               what: str = "condition") -> None:
    """Poll a broker-side condition (each check is a round trip) until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)  # poll interval between round trips, not a synchronisation


def queue_exists(conn: pika.BlockingConnection, name: str) -> bool:
    """Passive declare on a throwaway channel (a 404 closes that channel).

    A 405 means the queue exists but is exclusive to another connection.
    """
    ch = conn.channel()
    try:
        ch.queue_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code in (404, 405), exc
        return exc.reply_code == 405
    ch.close()
    return True


def exchange_exists(conn: pika.BlockingConnection, name: str) -> bool:
    ch = conn.channel()
    try:
        ch.exchange_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False
    ch.close()
    return True


def message_count(ch: BlockingChannel, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def wait_count(ch: BlockingChannel, queue: str, expected: int, timeout: float = 5.0) -> None:
    """Wait until `queue` holds exactly `expected` ready messages."""
    eventually(lambda: message_count(ch, queue) == expected, timeout,
               f"{queue} to hold {expected} messages")


def drain(ch: BlockingChannel, queue: str, expected: int, timeout: float = 5.0,
          auto_ack: bool = True) -> list[Delivery]:
    """basic.get until `expected` messages arrived (or the deadline passes)."""
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected:
        method, props, body = ch.basic_get(queue, auto_ack=auto_ack)
        if method is not None:
            got.append((method, props, body))
            continue
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(got)} of {expected} messages from {queue}")
        time.sleep(0.01)  # poll interval between round trips
    return got


def routed(ch: BlockingChannel, queues: list[str]) -> dict[str, list[bytes]]:
    """Bodies sitting in each queue (fetched with auto-ack)."""
    result: dict[str, list[bytes]] = {}
    for queue in queues:
        bodies: list[bytes] = []
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        result[queue] = bodies
    return result
