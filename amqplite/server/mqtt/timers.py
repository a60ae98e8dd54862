"""The clocks of the MQTT session rules: one trio timer per session key, which
calls back when it runs out (a will's delay, a disconnected session's expiry);
and the connections' keep-alive deadlines, all on one heap.
The rules (sessions/mqtt/) say when; this only waits."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import trio

from amqplite.sessions.mqtt.common import Key


class KeyTimers:
    """Timers by session key in a nursery; starting one replaces the key's last."""

    def __init__(self, nursery: trio.Nursery, fired: Callable[[Key], None]) -> None:
        self._nursery = nursery
        self._fired = fired
        self._scopes: dict[Key, trio.CancelScope] = {}

    def start(self, key: Key, delay: float) -> None:
        self.stop(key)
        scope = self._scopes[key] = trio.CancelScope()
        self._nursery.start_soon(self._run, key, max(0.0, delay), scope)

    def stop(self, key: Key) -> None:
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()

    async def _run(self, key: Key, delay: float, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(delay)  # a timer: the rule's delay
            if self._scopes.get(key) is scope:  # not replaced meanwhile
                del self._scopes[key]
                self._fired(key)


#: the Deadlines' resolution: entries due within one such step are checked in one
#: wake-up (a keep-alive is counted in seconds; checked at most this much late)
DEADLINE_STEP = 1.0


class Deadlines:
    """Every MQTT connection's keep-alive (or CONNECT) deadline on one heap, watched
    by one task: an idle connection costs no timer task of its own (a trio task
    and its cancel scope were a few KiB each, at 10,000 idle connections).

    A connection's deadline only moves later as bytes arrive, so its entry is not
    touched per read: when the entry comes due, the connection checks its real
    deadline and watches again (``watch``). An earlier deadline (CONNECT accepted
    with a short keep-alive) pushes a new entry; the old one is then stale.

    The task wakes on whole ``DEADLINE_STEP`` s only: 10,000 connections that
    came in over a few seconds have their CONNECT deadlines spread over those
    seconds, and waking for each (about 170 wake-ups a second) was most of their
    idle CPU."""

    def __init__(self) -> None:
        #: (when, seq, connection); an entry is live while the connection's ``due_seq`` is seq
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = 0
        self._stale = 0
        self._wake = trio.Event()

    def watch(self, c: Any, at: float | None) -> None:
        """Call ``c.deadline_due(now)`` once ``at`` has passed (None: no deadline)."""
        if at is None:
            return
        if c.due_seq and c.due_at <= at:
            return  # an entry at least as early is there: it checks again then
        if c.due_seq:
            self._stale += 1
        self._seq += 1
        c.due_at, c.due_seq = at, self._seq
        heap = self._heap
        heapq.heappush(heap, (at, self._seq, c))
        if heap[0][1] == self._seq:
            self._wake.set()

    def forget(self, c: Any) -> None:
        """``c`` is gone: its entry goes stale (and the heap is compacted when half is)."""
        if c.due_seq:
            c.due_seq = 0
            self._stale += 1
            heap = self._heap
            if self._stale > 64 and self._stale * 2 > len(heap):
                heap[:] = [e for e in heap if e[2].due_seq == e[1]]
                heapq.heapify(heap)
                self._stale = 0

    async def run(self) -> None:
        heap = self._heap
        while True:
            at = math.ceil(heap[0][0] / DEADLINE_STEP) * DEADLINE_STEP if heap else math.inf
            with trio.move_on_at(at):
                await self._wake.wait()
            self._wake = trio.Event()
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                _at, seq, c = heapq.heappop(heap)
                if c.due_seq != seq:
                    self._stale = max(0, self._stale - 1)
                    continue
                c.due_seq = 0
                c.deadline_due(now)
