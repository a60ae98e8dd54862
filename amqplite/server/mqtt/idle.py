"""Plain TCP MQTT connections wait for bytes here, on one epoll set of our own
watched by one task, and an idle connection has no trio task at all.

Why: a trio task waiting in ``wait_readable`` (its coroutine frames, trio's
registration of the fd, the connection's nursery and cancel scopes) was most
of an idle connection's ~14 KiB. A reader task waits here instead
(``wait``: parked on the scheduler, woken by ``run``); once it has waited a
while (``PARK_AFTER``, or right after its CONNECT) it is told to ``PARK``
and ends, and the next bytes start a new one (``spawn``). Active connections
keep their task: only a connection quiet for seconds pays for a new task.
"""

from __future__ import annotations

import contextlib
import select
from typing import Any

import outcome
import trio

# what ``wait`` returns (the shell's reader acts on them)
from amqplite.server.shell import PARK, READ

#: a reader that waited at least this long (and at most twice) is parked
PARK_AFTER = 2.0
_ARMED = select.EPOLLIN | select.EPOLLONESHOT


class Readiness:
    """The read side of the plain TCP connections. A connection offers ``fd``,
    ``task`` (its reader task, None while parked) and ``readable()`` (called
    when bytes came to a parked connection)."""

    def __init__(self) -> None:
        self._ep = select.epoll()
        #: fd -> connection, while the connection is open
        self._conns: dict[int, Any] = {}
        #: connection -> the sweep generation in which its task began to wait
        self._waiting: dict[Any, int] = {}
        self._gen = 0

    def add(self, c: Any) -> None:
        """Watch ``c`` (not armed until it waits or parks)."""
        self._ep.register(c.fd, select.EPOLLONESHOT)  # (a hang-up is reported once)
        self._conns[c.fd] = c

    def remove(self, c: Any) -> None:
        """``c`` closes its socket next (the fd may then be reused)."""
        if self._conns.pop(c.fd, None) is not None:
            with contextlib.suppress(OSError):  # closed under us: epoll dropped it
                self._ep.unregister(c.fd)
        self._waiting.pop(c, None)

    def arm(self, c: Any) -> None:
        """Report the next bytes of ``c`` once (``readable``, or wakes its wait)."""
        self._ep.modify(c.fd, _ARMED)

    async def wait(self, c: Any, park: bool) -> int:
        """Wait (``c``'s reader task) for bytes: READ, or PARK (``park``: at once),
        or FINISH (``wake``)."""
        if park:
            self.arm(c)
            return PARK
        self.arm(c)
        self._waiting[c] = self._gen

        def abort(_raise: Any) -> trio.lowlevel.Abort:
            self._waiting.pop(c, None)
            return trio.lowlevel.Abort.SUCCEEDED

        why: int = await trio.lowlevel.wait_task_rescheduled(abort)
        if why == PARK:  # bytes that came since the sweep's wake found no one waiting
            self.arm(c)
        return why

    def wake(self, c: Any, why: int) -> bool:
        """End ``c``'s task's wait with ``why``; False when it is not waiting."""
        if self._waiting.pop(c, None) is None:
            return False
        trio.lowlevel.reschedule(c.task, outcome.Value(why))
        return True

    async def run(self) -> None:
        """Hand each connection's bytes to its waiting task, or to ``readable``."""
        ep = self._ep
        conns = self._conns
        while True:
            await trio.lowlevel.wait_readable(ep.fileno())
            for fd, _events in ep.poll(0):
                c = conns.get(fd)
                if c is not None and not self.wake(c, READ):
                    c.readable()

    async def sweep(self, every: float = PARK_AFTER) -> None:
        """Every ``every`` seconds: park the readers that have waited since the sweep
        before last."""
        while True:
            await trio.sleep(every)  # the timer: parking is not urgent
            self.park_waiting()

    def park_waiting(self) -> None:
        """One sweep: park the readers that began to wait before the last sweep."""
        self._gen += 1
        old = self._gen - 1
        for c in [c for c, g in self._waiting.items() if g < old]:
            self.wake(c, PARK)

    def close(self) -> None:
        self._ep.close()

