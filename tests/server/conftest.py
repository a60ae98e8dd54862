"""Fixtures: a real broker process shared by a module, or a fresh one per test."""

from __future__ import annotations

import contextlib
import os
import subprocess
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


def watch_blocked(c: pika.BlockingConnection) -> list[str]:
    """Record connection.blocked ("blocked:<reason>") and connection.unblocked ("unblocked")."""
    events: list[str] = []
    c.add_on_connection_blocked_callback(
        lambda _c, m: events.append(f"blocked:{m.method.reason}"))
    c.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
    return events


@pytest.fixture
def conn(broker: BrokerProcess) -> Iterator[pika.BlockingConnection]:
    c = connect(broker)
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def channel(conn: pika.BlockingConnection):  # type: ignore[no-untyped-def]
    return conn.channel()


@contextlib.contextmanager
def mounted_tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A real filesystem of ``size`` at ``mnt`` that fills up (skips unless root can mount)."""
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
