"""Fixtures for the black-box conformance suite.

Every test talks to whatever broker `AMQP_URL` points at (RabbitMQ by
default), uses names that are unique per test run, and deletes what it
declared afterwards through a fresh connection, because the test's own
channel is often closed by the broker on purpose.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Iterator

import httpx
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "deadletter: dead-lettering, TTL, max-length and delivery limits"
    )


def amqp_url() -> str:
    return os.environ.get("AMQP_URL", DEFAULT_URL)


def connect(url: str | None = None, **overrides: object) -> pika.BlockingConnection:
    """A BlockingConnection to the broker under test (no heartbeats: tests are short)."""
    params = pika.URLParameters(url or amqp_url())
    params.heartbeat = 0
    params.blocked_connection_timeout = None
    params.connection_attempts = 1
    params.socket_timeout = 5
    for key, value in overrides.items():
        setattr(params, key, value)
    return pika.BlockingConnection(params)


class Names:
    """Unique names per test plus the bookkeeping to delete them afterwards."""

    def __init__(self, test_name: str) -> None:
        slug = re.sub(r"[^a-zA-Z0-9]+", "-", test_name)[:40].strip("-")
        self.prefix = f"conf-{slug}-{uuid.uuid4().hex[:8]}"
        self.queues: set[str] = set()
        self.exchanges: set[str] = set()

    def queue(self, suffix: str = "q") -> str:
        name = f"{self.prefix}-{suffix}"
        self.queues.add(name)
        return name

    def exchange(self, suffix: str = "x") -> str:
        name = f"{self.prefix}-{suffix}"
        self.exchanges.add(name)
        return name

    def cleanup(self) -> None:
        if not (self.queues or self.exchanges):
            return
        conn = connect()
        try:
            for queue in sorted(self.queues):
                try:
                    conn.channel().queue_delete(queue)
                except pika.exceptions.ChannelClosedByBroker as exc:
                    # 405: exclusive to a connection still open; it dies with it.
                    assert exc.reply_code == 405, exc
            for exchange in sorted(self.exchanges):
                conn.channel().exchange_delete(exchange)
        finally:
            conn.close()


@pytest.fixture
def url() -> str:
    return amqp_url()


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Iterator[Names]:
    tracker = Names(request.node.name)
    yield tracker
    tracker.cleanup()


@pytest.fixture
def connection_factory() -> Iterator[Callable[..., pika.BlockingConnection]]:
    """Open extra connections; whatever is still open is closed at teardown."""
    opened: list[pika.BlockingConnection] = []

    def factory(**overrides: object) -> pika.BlockingConnection:
        conn = connect(**overrides)
        opened.append(conn)
        return conn

    yield factory
    for conn in opened:
        if conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                conn.close()


@pytest.fixture
def connection(
    connection_factory: Callable[..., pika.BlockingConnection],
) -> pika.BlockingConnection:
    return connection_factory()


@pytest.fixture
def channel(connection: pika.BlockingConnection) -> BlockingChannel:
    return connection.channel()


def management_url() -> str | None:
    """The broker's management HTTP API (RabbitMQ's ``rabbitmq_management``, amqplite's
    admin port), for the few tests that set up what AMQP cannot: ``MANAGEMENT_URL``."""
    return os.environ.get("MANAGEMENT_URL") or None


@pytest.fixture
def management() -> Iterator[httpx.Client]:
    """An HTTP client on ``MANAGEMENT_URL`` as the user of ``AMQP_URL``. Unset, the test
    is skipped with that reason (scripts/test.sh always sets it, for both brokers)."""
    base = management_url()
    if base is None:
        pytest.skip("MANAGEMENT_URL is not set (the management API sets topic permissions)")
    creds = pika.URLParameters(amqp_url()).credentials
    assert isinstance(creds, pika.PlainCredentials)
    with httpx.Client(base_url=base, auth=(creds.username, creds.password),
                      timeout=10) as client:
        yield client
