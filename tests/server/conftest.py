"""Fixtures: a real broker process shared by a module, or a fresh one per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.brokerproc import BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data").start()
    yield b
    b.kill()


def connect(b: BrokerProcess, **kw: object) -> pika.BlockingConnection:
    params = pika.URLParameters(b.url)
    for k, v in kw.items():
        setattr(params, k, v)
    return pika.BlockingConnection(params)


@pytest.fixture
def conn(broker: BrokerProcess) -> Iterator[pika.BlockingConnection]:
    c = connect(broker)
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def channel(conn: pika.BlockingConnection):  # type: ignore[no-untyped-def]
    return conn.channel()
