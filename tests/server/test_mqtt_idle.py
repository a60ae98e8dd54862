"""The read side of plain TCP MQTT connections (server/mqtt/idle.py ``Readiness``) on
real socket pairs: a waiting reader is woken by bytes, a wait that lasts is told
to park, bytes to a parked connection call it back, and FINISH ends a wait."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest
import trio
import trio.testing

from amqplite.server.mqtt.idle import Readiness
from amqplite.server.shell import FINISH, PARK, READ


class Conn:
    """What Readiness needs of a connection: its fd, its reader task, ``readable``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.task: trio.lowlevel.Task | None = None
        self.woken: list[int] = []
        self.readable_calls = 0
        self.called = trio.Event()

    def readable(self) -> None:
        self.readable_calls += 1
        self.called.set()

    async def reader(self, r: Readiness, park: bool = False) -> None:
        self.task = trio.lowlevel.current_task()
        self.woken.append(await r.wait(self, park))
        self.task = None


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def watched(pair: tuple[socket.socket, socket.socket]) -> Iterator[tuple[Readiness, Conn]]:
    """A Readiness watching the connection on ``pair[0]``."""
    r = Readiness()
    c = Conn(pair[0])
    r.add(c)
    yield r, c


async def wait_until(pred: Callable[[], object], what: str) -> None:
    """Let the tasks run until ``pred`` holds (within a deadline)."""
    with trio.fail_after(10):
        while not pred():
            await trio.sleep(0.01)
    assert pred(), what


async def test_bytes_wake_the_waiting_reader(pair: tuple[socket.socket, socket.socket],
                                         watched: tuple[Readiness, Conn]) -> None:
    r, c = watched
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        nursery.start_soon(c.reader, r)
        await trio.testing.wait_all_tasks_blocked()
        assert c.woken == []
        pair[1].send(b"x")
        await wait_until(lambda: c.woken, "the reader was woken")
        nursery.cancel_scope.cancel()
    assert c.woken == [READ] and c.readable_calls == 0


async def test_finish_ends_a_wait(watched: tuple[Readiness, Conn]) -> None:
    r, c = watched
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.reader, r)
        await trio.testing.wait_all_tasks_blocked()
        assert r.wake(c, FINISH)
        await wait_until(lambda: c.woken, "the reader was woken")
        assert not r.wake(c, FINISH)  # no longer waiting
    assert c.woken == [FINISH]


async def test_a_parked_connection_is_called_back_on_bytes(
        pair: tuple[socket.socket, socket.socket], watched: tuple[Readiness, Conn]) -> None:
    r, c = watched
    async with trio.open_nursery() as nursery:
        nursery.start_soon(r.run)
        await c.reader(r, park=True)  # right after its CONNECT: parks at once
        assert c.woken == [PARK] and c.task is None
        pair[1].send(b"x")
        with trio.fail_after(10):
            await c.called.wait()
        nursery.cancel_scope.cancel()
    assert c.readable_calls == 1


async def test_a_long_wait_is_parked_and_bytes_after_it_are_not_lost(
        pair: tuple[socket.socket, socket.socket], watched: tuple[Readiness, Conn]) -> None:
    """A sweep parks a reader that waited since the sweep before; bytes that come
    between the sweep's wake-up and the reader's end still call the connection back
    (its wait re-arms the fd when told to park)."""
    r, c = watched
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.reader, r)
        await trio.testing.wait_all_tasks_blocked()
        r.park_waiting()  # the wait began in this period: not yet
        await trio.testing.wait_all_tasks_blocked()
        assert c.woken == []
        r.park_waiting()
        pair[1].send(b"x")  # before the reader has run again
        await wait_until(lambda: c.woken, "the reader was parked")
        assert c.woken == [PARK]
        nursery.start_soon(r.run)
        with trio.fail_after(10):
            await c.called.wait()
        nursery.cancel_scope.cancel()
