"""Consumer priorities and single active consumer under random command sequences.

Every delivery is checked the moment the broker emits it: its consumer's
prefetch window holds it, no consumer of higher priority on that queue had
room, and on a single active consumer queue it goes to the active one only.
Between commands: no message lost or duplicated, and no consumer with room
idles while messages are ready.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqplite import build
from amqplite.broker.core import Broker
from amqplite.broker.effects import Deliver
from amqplite.broker.outbox import Outbox
from tests.broker.conftest import TRANSIENT, FakeClock

QUEUES = ("plain", "sac")

# CheckedEffects overrides list.append; compiled, the broker appends to its list
# directly and the checks never run (CI runs tests/broker pure too, AMQPLITE_PURE=1)
pytestmark = pytest.mark.skipif(build() != "pure Python",
                                reason="checks by overriding list.append, which compiled code skips")


class CheckedEffects(list):  # type: ignore[type-arg]
    """The broker's effect list, asserting the dispatch rules at each delivery."""

    def __init__(self, machine: PriorityDispatch) -> None:
        super().__init__()
        self.m = machine

    def append(self, e: Any) -> None:
        if isinstance(e, Deliver):
            self.m.check_delivery(e)
        super().append(e)


class PriorityDispatch(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        outbox = Outbox()
        outbox.effects = CheckedEffects(self)
        self.b = Broker(now=FakeClock(), outbox=outbox)
        self.s = self.b.open_session("guest", "/")
        self.chs = [self.b.open_channel(self.s, n) for n in (1, 2, 3)]
        self.b.queue_declare(self.chs[0], "plain")
        self.b.queue_declare(self.chs[0], "sac", arguments={"x-single-active-consumer": True})
        self.published: dict[str, list[bytes]] = {q: [] for q in QUEUES}
        self.done: dict[str, list[bytes]] = {q: [] for q in QUEUES}
        self.n = 0
        self.n_consumers = 0

    def check_delivery(self, e: Deliver) -> None:
        c = e.channel.consumers.get(e.consumer_tag)
        assert c is not None, "delivery to a consumer that is gone"
        q = c.queue
        if c.no_ack:
            self.done[q.name].append(e.message.body or b"")
        else:
            assert c.prefetch == 0 or c.unacked <= c.prefetch, "prefetch exceeded"
        if q.single_active:
            assert q.active is c, "delivery to a waiting consumer"
            return
        higher = [x for x in q.consumers if x.priority > c.priority]
        assert all(not x.has_room() for x in higher), "a higher-priority consumer had room"

    def _settle(self) -> None:
        self.b.effects.clear()
        self.b.outbox.take()

    @rule(queue=st.sampled_from(QUEUES), k=st.integers(1, 6))
    def publish(self, queue: str, k: int) -> None:
        for _ in range(k):
            self.n += 1
            body = str(self.n).encode()
            self.published[queue].append(body)
            self.b.basic_publish(self.chs[0], "", queue, TRANSIENT, body)
        self._settle()

    @rule(ch=st.integers(0, 2), queue=st.sampled_from(QUEUES), prefetch=st.integers(1, 3),
          priority=st.none() | st.integers(-2, 3), no_ack=st.integers(0, 5))
    def consume(self, ch: int, queue: str, prefetch: int, priority: int | None,
                no_ack: int) -> None:
        c = self.chs[ch]
        if len(c.consumers) >= 3:
            return
        self.b.basic_qos(c, 0, prefetch, False)
        self.n_consumers += 1
        args = {"x-priority": priority} if priority is not None else None
        tag = self.b.basic_consume(c, queue, f"c{self.n_consumers}", no_ack=no_ack == 0,
                                   arguments=args)
        self.b.start_consumer(c, tag)
        self._settle()

    @rule(ch=st.integers(0, 2), data=st.data(), multiple=st.booleans())
    def ack(self, ch: int, data: st.DataObject, multiple: bool) -> None:
        c = self.chs[ch]
        if not c.unacked:
            return
        tag = data.draw(st.sampled_from(sorted(c.unacked)))
        settled = [d for t, d in c.unacked.items() if t == tag or (multiple and t <= tag)]
        self.b.basic_ack(c, tag, multiple)
        for d in settled:
            self.done[d.queue.name].append(d.entry.message.body or b"")
        self._settle()

    @rule(ch=st.integers(0, 2), data=st.data())
    def requeue(self, ch: int, data: st.DataObject) -> None:
        c = self.chs[ch]
        if not c.unacked:
            return
        self.b.basic_nack(c, data.draw(st.sampled_from(sorted(c.unacked))), False, True)
        self._settle()

    @precondition(lambda self: any(c.consumers for c in self.chs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from([c for c in self.chs if c.consumers]))
        self.b.basic_cancel(c, data.draw(st.sampled_from(sorted(c.consumers))))
        self._settle()

    @rule(ch=st.integers(0, 2))
    def close_channel(self, ch: int) -> None:
        old = self.chs[ch]
        self.b.close_channel(old)
        self.chs[ch] = self.b.open_channel(self.s, old.number)
        self._settle()

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        for name in QUEUES:
            q = self.b.vhosts["/"].queues[name]
            ready = [e.message.body or b"" for e in q.ready]
            unacked = [d.entry.message.body or b"" for c in self.chs
                       for d in c.unacked.values() if d.queue is q]
            assert sorted(ready + unacked + self.done[name]) == sorted(self.published[name])

    @invariant()
    def active_consumer_is_registered(self) -> None:
        q = self.b.vhosts["/"].queues["sac"]
        if not q.consumers:
            assert q.active is None
        else:
            assert q.active in q.consumers

    @invariant()
    def no_idle_consumer_with_room_while_ready(self) -> None:
        q = self.b.vhosts["/"].queues["plain"]
        if q.ready:
            assert all(not c.has_room() for c in q.consumers)


TestPriorityDispatch = PriorityDispatch.TestCase
TestPriorityDispatch.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_lower_priority_only_when_higher_full() -> None:
    """A worked example next to the property: the low one gets the overflow only."""
    b = Broker(now=FakeClock())
    s = b.open_session("guest", "/")
    ch = b.open_channel(s, 1)
    b.queue_declare(ch, "q")
    b.basic_qos(ch, 0, 2, False)
    for tag, prio in (("low", 0), ("high", 5), ("high2", 5)):
        b.basic_consume(ch, "q", tag, arguments={"x-priority": prio})
    for i in range(6):
        b.basic_publish(ch, "", "q", TRANSIENT, str(i).encode())
    got = [e.consumer_tag for e in b.effects if isinstance(e, Deliver)]
    assert got == ["high", "high2", "high", "high2", "low", "low"]
