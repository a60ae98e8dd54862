"""The store-writer process under a real broker: it dies with the broker, and the
broker outlives it (a new writer takes over; nothing confirmed is lost)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pika
import psutil
import pytest
from pika.exceptions import NackError, UnroutableError

from tests.brokerproc import BrokerProcess, wait_for


def _writers(b: BrokerProcess) -> list[psutil.Process]:
    assert b.proc is not None
    return [p for p in psutil.Process(b.proc.pid).children()
            if "amqplite.store.writer_main" in " ".join(p.cmdline())]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _publish(ch: pika.adapters.blocking_connection.BlockingChannel, body: bytes) -> bool:
    try:
        ch.basic_publish("", "wq", body, pika.BasicProperties(delivery_mode=2), mandatory=True)
        return True
    except (NackError, UnroutableError):
        return False


def test_a_killed_writer_is_replaced_and_confirmed_messages_stay(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    try:
        (writer,) = wait_for(lambda: _writers(b), 10, what="the writer process")
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("wq", durable=True)
        confirmed = [i for i in range(200) if _publish(ch, str(i).encode())]
        assert len(confirmed) == 200
        os.kill(writer.pid, signal.SIGKILL)
        # publishes go on being answered: nacked while no writer commits, then acked
        after: list[int] = []
        i = 200

        def confirmed_again() -> bool:
            nonlocal i
            if _publish(ch, str(i).encode()):
                after.append(i)
            i += 1
            return len(after) >= 50

        wait_for(confirmed_again, 60, interval=0, what="publishes confirmed by a new writer")
        (new,) = _writers(b)
        assert new.pid != writer.pid
        assert "store writer process exited" in b.log()
        seen: list[int] = []
        while True:
            m, _p, body = ch.basic_get("wq", auto_ack=True)
            if m is None:
                break
            seen.append(int(body))
        missing = set(confirmed + after) - set(seen)
        assert not missing, f"confirmed messages lost: {sorted(missing)[:5]}"
        conn.close()
    finally:
        b.stop()


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_the_writer_goes_with_the_broker(tmp_path: Path, how: str) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    (writer,) = wait_for(lambda: _writers(b), 10, what="the writer process")
    if how == "kill":
        b.kill()
    else:
        assert b.stop() == 0
    wait_for(lambda: _gone(writer.pid), 10, what="the writer to exit")
    # the next broker on the same data starts at once and serves
    b.start()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    conn.channel().queue_declare("after", durable=True)
    conn.close()
    b.stop()


def test_the_old_thread_writer_setting_is_ignored_with_a_warning(tmp_path: Path) -> None:
    """``store_writer = "thread"`` (removed) still starts the broker, with a warning,
    and the writer is the child process all the same."""
    b = BrokerProcess(tmp_path / "d", None, "--store-writer", "thread").start()
    try:
        wait_for(lambda: _writers(b), 30, what="the writer process")
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("wq", durable=True)
        assert all(_publish(ch, b"x") for _ in range(20))
        conn.close()
        assert 'store_writer = "thread" is no longer supported' in b.log()
    finally:
        assert b.stop() == 0
