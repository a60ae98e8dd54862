"""Consumer selectors on a shared queue under random command sequences (hypothesis
state machine): a message is delivered at most once at a time, only to a consumer
whose selector matches it, none is lost, and a parked message is one that no
current consumer's selector matches."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from amqplite.broker.core import Broker
from amqplite.broker.effects import Deliver
from amqplite.broker.selector import parse
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.properties import BasicProperties, encode_properties
from tests.broker.conftest import FakeClock

KEYS = ("a", "b", "c")
#: selector text -> the keys it matches (None: every message)
SELECTORS: dict[str | None, set[str | None]] = {
    None: {"a", "b", "c", None},
    "k = 'a'": {"a"},
    "k = 'b'": {"b"},
    "k IN ('a', 'c')": {"a", "c"},
    "k IS NULL": {None},
}


def _props(k: str | None) -> bytes:
    table = None
    if k is not None:
        table = FieldTable()
        table.set("k", k, "S")
    return encode_properties(BasicProperties(headers=table))


class SelectiveDispatch(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = Broker(now=FakeClock())
        self.s = self.b.open_session("guest", "/")
        self.pub = self.b.open_channel(self.s, 1)
        self.b.queue_declare(self.pub, "q")
        self.q = self.b.vhosts["/"].queues["q"]
        self.next_ch = 2
        #: consumer tag -> (channel, selector text)
        self.consumers: dict[str, tuple[Any, str | None]] = {}
        self.key: dict[bytes, str | None] = {}  # body -> its header k
        self.outstanding: set[bytes] = set()
        self.done: list[bytes] = []
        self.n = 0

    def _drain(self) -> None:
        for e in self.b.effects:
            if isinstance(e, Deliver):
                body = e.message.body or b""
                _, sel = self.consumers[e.consumer_tag]
                assert self.key[body] in SELECTORS[sel], (body, sel)
                assert body not in self.outstanding, f"{body!r} delivered twice at once"
                self.outstanding.add(body)
        self.b.effects.clear()
        self.b.outbox.take()

    @rule(k=st.sampled_from([*KEYS, None]), count=st.integers(1, 4))
    def publish(self, k: str | None, count: int) -> None:
        for _ in range(count):
            self.n += 1
            body = str(self.n).encode()
            self.key[body] = k
            self.b.basic_publish(self.pub, "", "q", _props(k), body)
        self._drain()

    @rule(sel=st.sampled_from(list(SELECTORS)), prefetch=st.integers(0, 3))
    def consume(self, sel: str | None, prefetch: int) -> None:
        if len(self.consumers) >= 4:
            return
        ch = self.b.open_channel(self.s, self.next_ch)
        tag = f"c{self.next_ch}"
        self.next_ch += 1
        self.b.basic_qos(ch, 0, prefetch, False)
        self.consumers[tag] = (ch, sel)
        self.b.basic_consume(ch, "q", tag, selector=None if sel is None else parse(sel))
        self.b.start_consumer(ch, tag)
        self._drain()

    @rule(data=st.data(), requeue=st.booleans())
    def settle(self, data: st.DataObject, requeue: bool) -> None:
        """An ack, or a nack that requeues, of one outstanding delivery."""
        chs = [ch for ch, _ in self.consumers.values() if ch.unacked]
        if not chs:
            return
        ch = data.draw(st.sampled_from(chs))
        tag = data.draw(st.sampled_from(sorted(ch.unacked)))
        body = ch.unacked[tag].entry.message.body
        self.outstanding.discard(body)
        if requeue:
            self.b.basic_nack(ch, tag, False, True)
        else:
            self.b.basic_ack(ch, tag)
            self.done.append(body)
        self._drain()

    @rule(data=st.data(), close=st.booleans())
    def leave(self, data: st.DataObject, close: bool) -> None:
        """A consumer cancels (its unacked stay with the channel) or its channel
        closes (they are requeued)."""
        if not self.consumers:
            return
        tag = data.draw(st.sampled_from(sorted(self.consumers)))
        ch, _ = self.consumers[tag]
        if close:
            for d in ch.unacked.values():
                self.outstanding.discard(d.entry.message.body)
            del self.consumers[tag]
            self.b.close_channel(ch)
        else:
            self.b.basic_cancel(ch, tag)
            if not ch.unacked:
                del self.consumers[tag]
        self._drain()

    @invariant()
    def nothing_lost(self) -> None:
        queued = [e.message.body for e in self.q.ready] + [e.message.body
                                                            for e in self.q.parked]
        assert len(queued) == self.q.message_count
        everything = sorted(queued + self.done + list(self.outstanding))
        assert everything == sorted(self.key), "a message was lost or duplicated"
        assert not set(queued) & self.outstanding

    @invariant()
    def parked_only_when_nobody_matches(self) -> None:
        live = [c.selector for c in self.q.consumers]
        texts = [None if s is None else s.text for s in live]
        for e in self.q.parked:
            k = self.key[e.message.body or b""]
            assert not any(k in SELECTORS[t] for t in texts), (k, texts)
        if self.q.parked:
            assert self.q.selective

    @invariant()
    def order_among_matching_is_kept(self) -> None:
        """A waiting message in ready that some consumer with room matches would
        have been delivered (nothing waits for no reason)."""
        if not self.q.ready or not self.q.consumers:
            return
        head = self.q.ready.peek()
        k = self.key[head.message.body]
        for c in self.q.consumers:
            text = None if c.selector is None else c.selector.text
            assert not (k in SELECTORS[text] and c.has_room()), (k, text)


SelectiveDispatch.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestSelectiveDispatch = SelectiveDispatch.TestCase


def _delivered(b: Broker) -> list[tuple[str, bytes]]:
    out = [(e.consumer_tag, e.message.body or b"") for e in b.effects if isinstance(e, Deliver)]
    b.effects.clear()
    b.outbox.take()
    return out


def _consumer(b: Broker, s: Any, n: int, sel: str | None, prefetch: int,
              **args: Any) -> None:
    ch = b.open_channel(s, n)
    b.basic_qos(ch, 0, prefetch, False)
    b.basic_consume(ch, "q", f"c{n}", selector=None if sel is None else parse(sel),
                    arguments=args)
    b.start_consumer(ch, f"c{n}")


def test_selectors_with_consumer_priorities() -> None:
    """The highest priority whose selector matches and has room gets the message."""
    b = Broker(now=FakeClock())
    s = b.open_session("guest", "/")
    pub = b.open_channel(s, 1)
    b.queue_declare(pub, "q")
    _consumer(b, s, 2, "k = 'a'", 1, **{"x-priority": 5})
    _consumer(b, s, 3, None, 0)
    _delivered(b)
    for i, k in enumerate(("b", "a", "a")):
        b.basic_publish(pub, "", "q", _props(k), b"%d" % i)
    # b: only c3 matches; the first a: c2 (higher); the second: c2 is full, c3 takes it
    assert _delivered(b) == [("c3", b"0"), ("c2", b"1"), ("c3", b"2")]


def test_selectors_on_a_single_active_consumer_queue() -> None:
    """Only the active consumer is a candidate: what its selector refuses is parked,
    though a waiting consumer would take it."""
    b = Broker(now=FakeClock())
    s = b.open_session("guest", "/")
    pub = b.open_channel(s, 1)
    b.queue_declare(pub, "q", arguments={"x-single-active-consumer": True})
    _consumer(b, s, 2, "k = 'a'", 1)
    _consumer(b, s, 3, None, 0)
    _delivered(b)
    b.basic_publish(pub, "", "q", _props("b"), b"0")
    b.basic_publish(pub, "", "q", _props("a"), b"1")
    b.basic_publish(pub, "", "q", _props("a"), b"2")
    assert _delivered(b) == [("c2", b"1")]  # the second a waits for room
    q = b.vhosts["/"].queues["q"]
    assert [e.message.body for e in q.parked] == [b"0"]
    assert [e.message.body for e in q.ready] == [b"2"]
