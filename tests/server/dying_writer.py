"""Make one commit fail for real: the store writer process holds it, then dies."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pika
import psutil
from pika.exceptions import AMQPError

from tests.brokerproc import wait_for


def dead(pid: int) -> bool:
    """The process is gone or a zombie (killed, not yet reaped by its parent)."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def commit_with_dying_writer(writer_pid: int, url: str, op: Callable[[Any], Any],
                             arrived: Callable[[], bool]) -> BaseException | None:
    """Run ``op(channel)`` on a connection of its own while the writer is stopped
    (SIGSTOP: it takes the op's submission and never answers); once ``arrived()``
    says the broker has the op, kill the writer (SIGKILL). The client's error, or
    None if it was answered ok."""
    os.kill(writer_pid, signal.SIGSTOP)
    outcome: list[BaseException | None] = []

    def client() -> None:
        c = pika.BlockingConnection(pika.URLParameters(url))
        try:
            op(c.channel())
            outcome.append(None)
        except AMQPError as exc:
            outcome.append(exc)
        finally:
            if c.is_open:
                c.close()

    t = threading.Thread(target=client, daemon=True)
    t.start()
    try:
        wait_for(arrived, 30, what="the op to reach the broker")
    finally:
        os.kill(writer_pid, signal.SIGKILL)  # a stopped process dies too
        wait_for(lambda: dead(writer_pid), 30, what="the killed writer to die")
    t.join(30)
    assert not t.is_alive() and outcome, "the client was never answered"
    return outcome[0]
