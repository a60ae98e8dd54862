"""The keep-alive deadlines of all MQTT connections on one heap (server/mqtt/timers.py
``Deadlines``), on trio's virtual clock: each connection is called once its
deadline has passed, a later real deadline is watched again, an earlier one
replaces its entry, and a connection that is gone is never called."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from amqplite.server.mqtt.timers import Deadlines


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    """pytest-trio runs the test on this clock: time jumps when every task waits."""
    return trio.testing.MockClock(autojump_threshold=0)


class Conn:
    """What Deadlines needs of a connection: its entry, and the call when due."""

    def __init__(self, deadlines: Deadlines, deadline: float) -> None:
        self.deadlines = deadlines
        self.deadline = deadline
        self.due_at = 0.0
        self.due_seq = 0
        self.expired_at: float | None = None

    def deadline_due(self, now: float) -> None:
        if now < self.deadline:  # bytes came meanwhile: watch the real deadline
            self.deadlines.watch(self, self.deadline)
        else:
            self.expired_at = now


async def test_each_connection_expires_at_its_own_deadline(autojump_clock: trio.testing.MockClock) -> None:
    d = Deadlines()
    a, b, gone, moved = (Conn(d, t) for t in (5.0, 10.0, 3.0, 20.0))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(d.run)
        for c in (a, b, gone, moved):
            d.watch(c, c.deadline)
        d.forget(gone)
        b.deadline = 12.0  # activity: the entry at 10 finds a later deadline
        moved.deadline = 2.0
        d.watch(moved, 2.0)  # an earlier deadline (CONNECT accepted, short keep-alive)
        with trio.move_on_after(30):
            while b.expired_at is None:
                await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    assert moved.expired_at is not None and 2.0 <= moved.expired_at < 3.0
    assert a.expired_at is not None and 5.0 <= a.expired_at < 6.0
    assert b.expired_at is not None and 12.0 <= b.expired_at < 13.0
    assert gone.expired_at is None
    assert moved.due_seq == 0  # its stale entry at 20 was skipped: no second call


def test_forgotten_entries_are_compacted() -> None:
    """Closed connections' entries do not pile up until their deadlines (a churn of
    short connections with long keep-alives): stale ones stay below max(64, live)."""
    d = Deadlines()
    conns = [Conn(d, 100.0 + i) for i in range(200)]
    for c in conns:
        d.watch(c, c.deadline)
    for c in conns[:150]:
        d.forget(c)
    live = 50
    assert len(d._heap) - live <= max(64, live)
    assert all(c.due_seq == 0 for c in conns[:150])
