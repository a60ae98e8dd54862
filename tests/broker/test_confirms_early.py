"""Confirms a consumer's acks release before the commit (``settle_early``), plain calls.

RabbitMQ confirms a message once it is persisted or acked by every queue it
went to. The rules: a held Confirm goes once every stored entry of the
publishes it covers is acked, never before an earlier Confirm of its channel,
never twice, and never for what no ack settles (an entry purged, a stream
append, a second queue's entry still unacked).
"""

from __future__ import annotations

from typing import Any

from amqplite.broker.core import Broker
from amqplite.broker.effects import Confirm, Deliver
from amqplite.broker.model import ChannelState
from tests.broker.conftest import PERSISTENT, TRANSIENT, FakeClock


def _setup(early: bool = True, queues: tuple[str, ...] = ("q",),
           args: dict[str, Any] | None = None) -> tuple[Broker, ChannelState, ChannelState]:
    b = Broker(now=FakeClock())
    s = b.open_session("guest", "/")
    pub, sub = b.open_channel(s, 1), b.open_channel(s, 2)
    b.exchange_declare(pub, "fan", "fanout")
    for q in queues:
        b.queue_declare(pub, q, durable=True, arguments=(args or {}).get(q))
        b.queue_bind(pub, q, "fan", "")
    b.confirm_select(pub, settle_early=early)
    b.basic_qos(sub, 0, 1000, False)
    b.take_outcome()
    return b, pub, sub


def _confirms(b: Broker) -> tuple[list[Confirm], list[Deliver]]:
    out = b.take_outcome()
    return ([e for e in out.effects if isinstance(e, Confirm)],
            [e for e in out.effects if isinstance(e, Deliver)])


def _publish(b: Broker, ch: ChannelState, n: int, exchange: str = "",
             props: bytes = PERSISTENT) -> tuple[list[Confirm], list[Deliver]]:
    for i in range(n):
        b.basic_publish(ch, exchange, "q" if not exchange else "", props, b"%d" % i)
    return _confirms(b)


def test_acks_release_a_held_confirm_once() -> None:
    b, pub, sub = _setup()
    b.basic_consume(sub, "q", "c")
    (held,), dels = _publish(b, pub, 3)
    assert held.after_commit and held.upto == 3 and held.multiple and len(dels) == 3
    b.basic_ack(sub, dels[1].delivery_tag, multiple=True)
    assert _confirms(b)[0] == [], "one entry is still unacked"
    b.basic_ack(sub, dels[2].delivery_tag)
    (sent,), _ = _confirms(b)
    assert (sent.upto, sent.multiple, sent.nack, sent.after_commit) == (3, True, False, False)
    assert b.confirm_landed(held) == [], "sent already: its commit sends nothing"
    assert b.confirm_landed(held, failed=True) == []


def test_a_confirm_never_overtakes_an_earlier_one() -> None:
    b, pub, sub = _setup()
    (first,), _ = _publish(b, pub, 2)  # no consumer yet: nobody acks these
    b.basic_consume(sub, "q", "c")
    b.start_consumer(sub, "c")
    dels = _confirms(b)[1]
    b.basic_publish(pub, "", "q", PERSISTENT, b"x")
    (second,), more = _confirms(b)
    assert first.after_commit and second.after_commit and len(dels) == 2 and len(more) == 1
    b.basic_ack(sub, more[0].delivery_tag)  # settles the second only
    assert _confirms(b)[0] == [], "the first still waits for its commit"
    assert b.confirm_landed(first) == [first, second], "then both go, in order"
    assert b.confirm_landed(second) == []


def test_a_failed_commit_nacks_what_acks_did_not_settle() -> None:
    b, pub, _sub = _setup()
    (held,), _ = _publish(b, pub, 1)
    assert b.confirm_landed(held, failed=True) == [held] and held.nack


def test_every_queue_must_ack() -> None:
    b, pub, sub = _setup(queues=("a", "b"))
    b.basic_consume(sub, "a", "ca")
    b.basic_consume(sub, "b", "cb")
    (_held,), dels = _publish(b, pub, 1, exchange="fan")
    assert len(dels) == 2
    b.basic_ack(sub, dels[0].delivery_tag)
    assert _confirms(b)[0] == []
    b.basic_ack(sub, dels[1].delivery_tag)
    assert [c.upto for c in _confirms(b)[0]] == [1]


def test_what_no_ack_settles_waits_for_the_commit() -> None:
    """A purged entry, or a stream append beside an acked entry: the commit decides."""
    b, pub, sub = _setup()
    (held,), _ = _publish(b, pub, 2)
    b.queue_purge(sub, "q")
    assert _confirms(b)[0] == []
    assert b.confirm_landed(held) == [held]

    b, pub, sub = _setup(queues=("q", "s"), args={"s": {"x-queue-type": "stream"}})
    b.basic_consume(sub, "q", "c")
    (held,), dels = _publish(b, pub, 1, exchange="fan")
    b.basic_ack(sub, dels[0].delivery_tag)
    assert _confirms(b)[0] == [], "the stream's append still needs its commit"
    assert b.confirm_landed(held) == [held]


def test_an_ack_before_the_emission_needs_no_commit() -> None:
    """Publish and its ack in one batch (one connection): the Confirm goes at once."""
    b, pub, sub = _setup()
    b.basic_consume(sub, "q", "c", no_ack=True)
    (c,), dels = _publish(b, pub, 2)
    assert len(dels) == 2 and not c.after_commit and c.upto == 2


def test_off_by_default_and_transient_publishes_unchanged() -> None:
    b, pub, sub = _setup(early=False)
    b.basic_consume(sub, "q", "c")
    (held,), dels = _publish(b, pub, 1)
    b.basic_ack(sub, dels[0].delivery_tag)
    assert _confirms(b)[0] == [], "only the commit releases it"
    assert b.confirm_landed(held) == [held]

    b, pub, sub = _setup()
    (c,), _ = _publish(b, pub, 2, props=TRANSIENT)
    assert not c.after_commit
