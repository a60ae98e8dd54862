"""Dispatcher invariants under random command sequences (hypothesis state machine).

No message is lost or duplicated, no prefetch window is exceeded, and each
consumer receives messages in queue order while nothing has been requeued.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqplite.broker.core import Broker
from amqplite.broker.effects import Deliver
from tests.broker.conftest import TRANSIENT, FakeClock


class Dispatch(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = Broker(now=FakeClock())
        self.s = self.b.open_session("guest", "/")
        self.chs = [self.b.open_channel(self.s, n) for n in (1, 2)]
        self.b.queue_declare(self.chs[0], "q")
        self.published: list[bytes] = []
        self.done: list[bytes] = []  # acked or dropped for good
        self.requeued = False
        self.last_seen: dict[str, int] = {}
        self.n = 0
        self.n_consumers = 0

    def _drain(self) -> None:
        for e in self.b.effects:
            if isinstance(e, Deliver):
                c = e.channel.consumers.get(e.consumer_tag)
                assert c is not None
                # a delivery only happens inside the windows (qos may shrink them later)
                if c.prefetch and not c.no_ack:
                    assert c.unacked <= c.prefetch
                if e.channel.global_prefetch and not c.no_ack:
                    assert len(e.channel.unacked) <= e.channel.global_prefetch
                if not self.requeued:
                    pos = e.message.key
                    assert pos > self.last_seen.get(e.consumer_tag, 0), "order broken"
                    self.last_seen[e.consumer_tag] = pos
                if c.no_ack:
                    self.done.append(e.message.body or b"")
        self.b.effects.clear()
        self.b.outbox.take()

    @rule(k=st.integers(1, 5))
    def publish(self, k: int) -> None:
        for _ in range(k):
            self.n += 1
            body = str(self.n).encode()
            self.published.append(body)
            self.b.basic_publish(self.chs[0], "", "q", TRANSIENT, body)
        self._drain()

    @rule(ch=st.integers(0, 1), prefetch=st.integers(0, 4), no_ack=st.booleans(),
          global_=st.booleans())
    def consume(self, ch: int, prefetch: int, no_ack: bool, global_: bool) -> None:
        c = self.chs[ch]
        if len(c.consumers) >= 3:
            return
        self.b.basic_qos(c, 0, prefetch, global_)
        self.n_consumers += 1  # explicit tags: server-made ones are random
        tag = self.b.basic_consume(c, "q", f"c{self.n_consumers}", no_ack=no_ack)
        self.b.start_consumer(c, tag)
        self._drain()

    @rule(ch=st.integers(0, 1), data=st.data(), multiple=st.booleans())
    def ack(self, ch: int, data: st.DataObject, multiple: bool) -> None:
        c = self.chs[ch]
        if not c.unacked:
            return
        tag = data.draw(st.sampled_from(sorted(c.unacked)))
        settled = [d for t, d in c.unacked.items() if t == tag or (multiple and t <= tag)]
        self.b.basic_ack(c, tag, multiple)
        self.done.extend(d.entry.message.body or b"" for d in settled)
        self._drain()

    @rule(ch=st.integers(0, 1), data=st.data(), requeue=st.booleans())
    def nack(self, ch: int, data: st.DataObject, requeue: bool) -> None:
        c = self.chs[ch]
        if not c.unacked:
            return
        tag = data.draw(st.sampled_from(sorted(c.unacked)))
        d = c.unacked[tag]
        self.b.basic_nack(c, tag, False, requeue)
        if requeue:
            self.requeued = True
        else:
            self.done.append(d.entry.message.body or b"")
        self._drain()

    @precondition(lambda self: any(c.consumers for c in self.chs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from([c for c in self.chs if c.consumers]))
        tag = data.draw(st.sampled_from(sorted(c.consumers)))
        self.b.basic_cancel(c, tag)
        self._drain()

    @rule(ch=st.integers(0, 1))
    def close_channel(self, ch: int) -> None:
        old = self.chs[ch]
        if old.unacked:
            self.requeued = True
        self.b.close_channel(old)
        self.chs[ch] = self.b.open_channel(self.s, old.number)
        self._drain()

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        q = self.b.vhosts["/"].queues["q"]
        ready = [e.message.body or b"" for e in q.ready]
        unacked = [d.entry.message.body or b"" for c in self.chs for d in c.unacked.values()]
        everything = ready + unacked + self.done
        assert sorted(everything) == sorted(self.published)
        assert q.unacked == len(unacked)

    @invariant()
    def idle_consumers_imply_empty_or_full(self) -> None:
        q = self.b.vhosts["/"].queues["q"]
        if q.ready:
            assert all(not c.has_room() for c in q.consumers)


TestDispatch = Dispatch.TestCase
TestDispatch.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
