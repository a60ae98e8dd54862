"""Helpers of the Kafka end-to-end tests: a broker subprocess with a Kafka listener on a
free port, and the clients' bootstrap address."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server.mqttclient import listening


@contextlib.contextmanager
def kafka_broker(data_dir: Path, *extra: str) -> Iterator[BrokerProcess]:
    """A broker subprocess with a Kafka listener on a free port, stopped afterwards."""
    b = BrokerProcess(data_dir, None, "--kafka-port", str(free_port()), *extra).start()
    try:
        wait_for(lambda: listening(kafka_port(b)), 30, what="the Kafka listener")
        yield b
    finally:
        b.stop()


def kafka_port(b: BrokerProcess) -> int:
    return int(b.extra[b.extra.index("--kafka-port") + 1])


def bootstrap(b: BrokerProcess) -> str:
    return f"127.0.0.1:{kafka_port(b)}"
