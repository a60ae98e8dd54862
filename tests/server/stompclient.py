"""stomp.py 9.0 against a real broker: a listener that records frames and waits
on conditions with a deadline."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import stomp

from tests.brokerproc import BrokerProcess, free_port

DEADLINE = 20.0


class Recorder(stomp.ConnectionListener):  # type: ignore[misc]
    """Every frame the client received, by kind."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[Any] = []
        self.receipts: list[str] = []
        self.errors: list[Any] = []
        self.disconnected = False
        self.heartbeats = 0

    def _add(self, kind: str, value: Any) -> None:
        with self.cond:
            getattr(self, kind).append(value)
            self.cond.notify_all()

    def on_message(self, frame: Any) -> None:
        self._add("messages", frame)

    def on_receipt(self, frame: Any) -> None:
        self._add("receipts", frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self._add("errors", frame)

    def on_heartbeat(self) -> None:
        with self.cond:
            self.heartbeats += 1
            self.cond.notify_all()

    def on_disconnected(self) -> None:
        with self.cond:
            self.disconnected = True
            self.cond.notify_all()

    def wait(self, pred: Any, what: str) -> Any:
        with self.cond:
            if not self.cond.wait_for(pred, DEADLINE):
                raise TimeoutError(f"no {what} within {DEADLINE}s")
            return pred()

    def wait_messages(self, n: int) -> list[Any]:
        return self.wait(lambda: self.messages[:n] if len(self.messages) >= n else None,
                         f"{n} messages")

    def wait_receipt(self, rid: str) -> None:
        self.wait(lambda: rid in self.receipts, f"receipt {rid}")


@contextlib.contextmanager
def stomp_broker(data_dir: Path, *extra: str) -> Iterator[BrokerProcess]:
    """A broker subprocess with a STOMP listener on a free port, stopped afterwards."""
    b = BrokerProcess(data_dir, None, "--stomp-port", str(free_port()), *extra).start()
    try:
        yield b
    finally:
        b.stop()


def stomp_port(b: BrokerProcess) -> int:
    return int(b.extra[b.extra.index("--stomp-port") + 1])


def connect(b: BrokerProcess, login: str = "guest", passcode: str = "guest",
            **kw: Any) -> tuple[stomp.Connection12, Recorder]:
    # stomp.py sends the server's host name as `host`: RabbitMQ (and we) read it as the vhost
    kw.setdefault("vhost", "/")
    c = stomp.Connection12([("127.0.0.1", stomp_port(b))], reconnect_attempts_max=1, **kw)
    rec = Recorder()
    c.set_listener("rec", rec)
    c.connect(login, passcode, wait=True)
    return c, rec



def raw_frames(sock: socket.socket) -> tuple[list[bytes], bool]:
    """Everything the server sends until it closes: the frames (NUL-ended) and
    whether it closed within the deadline."""
    sock.settimeout(DEADLINE)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return [f for f in data.split(b"\0") if f.strip()], False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return [f.lstrip(b"\n") for f in data.split(b"\0") if f.strip()], True
        data += chunk
