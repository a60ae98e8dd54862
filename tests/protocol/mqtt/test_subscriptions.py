"""Subscription options in binding arguments, shared queue names, and the per-delivery
verdict (subscription identifiers, no-local, the ``$`` rule)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from amqplite.protocol.mqtt.subscriptions import (
    DROP,
    SubOptions,
    SubscriptionTable,
    binding_args,
    is_shared_queue,
    member_of,
    options_of,
    shared_queue_name,
)


@given(st.integers(0, 2), st.booleans(), st.booleans(),
       st.none() | st.integers(1, 268_435_455), st.none() | st.text(min_size=1))
def test_options_round_trip_through_binding_args(qos: int, no_local: bool, rap: bool,
                                                 ident: int | None, member: str | None) -> None:
    opts = SubOptions(qos, no_local, rap, ident)
    args = binding_args(opts, member)
    assert member_of(args) == member
    assert options_of(args, qos) == opts


def test_plain_subscription_keeps_the_old_binding() -> None:
    """No options worth storing: the binding has no arguments, as before."""
    assert binding_args(SubOptions(1)) is None
    assert options_of(None, 1) == SubOptions(1)


def test_shared_queue_names() -> None:
    a = shared_queue_name("g1", "sensors/#")
    assert a.startswith("mqtt-shared-g1-") and is_shared_queue(a)
    assert a == shared_queue_name("g1", "sensors/#")
    assert a != shared_queue_name("g1", "sensors/+")
    assert a != shared_queue_name("g2", "sensors/#")
    long = shared_queue_name("g" * 300, "x")
    assert len(long.encode()) <= 255 and is_shared_queue(long)


def test_identifiers_of_every_matching_subscription() -> None:
    t = SubscriptionTable()
    t.set("q", "a/+", SubOptions(1, identifier=7))
    t.set("q", "a/#", SubOptions(1, identifier=9))
    t.set("q", "b", SubOptions(1))
    v = t.admit("q", "a/x")
    assert v.deliver and sorted(v.identifiers) == [7, 9]
    assert t.admit("q", "b").identifiers == ()
    assert t.admit("other", "a/x").deliver  # not a queue of ours: nothing to decide


def test_no_local_drops_own_messages_only() -> None:
    t = SubscriptionTable()
    t.set("q", "a/#", SubOptions(0, no_local=True, identifier=1))
    assert t.wants_publisher("q")
    assert t.admit("q", "a/b", own=True) == DROP
    assert t.admit("q", "a/b", own=False).identifiers == (1,)
    t.set("q", "a/b", SubOptions(0, identifier=2))  # an overlapping local one still wants it
    assert t.admit("q", "a/b", own=True).identifiers == (2,)


def test_dollar_topics_need_a_filter_without_a_leading_wildcard() -> None:
    t = SubscriptionTable()
    t.set("q", "#", SubOptions(0))
    assert t.admit("q", "$SYS/x") == DROP
    assert t.admit("q", "x/y").deliver
    t.set("q", "$SYS/#", SubOptions(0))
    assert t.admit("q", "$SYS/x").deliver
    t.remove("q", "$SYS/#")
    t.remove("q", "#")
    assert t.queues() == []


def test_delivery_qos_and_retain_as_published_of_the_matching_subscriptions() -> None:
    t = SubscriptionTable()
    t.set("q", "a/#", SubOptions(1))
    t.set("q", "a/b", SubOptions(2, retain_as_published=True))
    v = t.admit("q", "a/b")
    assert (v.qos, v.retain_as_published) == (2, True)
    v = t.admit("q", "a/c")
    assert (v.qos, v.retain_as_published) == (1, False)


_OPTS = st.builds(SubOptions, st.integers(0, 2), st.booleans(), st.booleans(),
                  st.none() | st.integers(1, 3))
_OPS = st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from("qr"), st.sampled_from(["a/#", "a/b", "#"]),
              _OPTS),
    st.tuples(st.just("remove"), st.sampled_from("qr"), st.sampled_from(["a/#", "a/b", "#"])),
    st.tuples(st.just("drop"), st.sampled_from("qr")),
    st.tuples(st.just("load"), st.sampled_from("qr"),
              st.lists(st.tuples(st.sampled_from(["a/#", "a/b", "#"]), _OPTS), max_size=3)),
), max_size=30)


@given(_OPS)
def test_queue_flags_follow_their_filters(ops: list[tuple[Any, ...]]) -> None:
    """After any subscribe/unsubscribe sequence, each queue's kept flags equal their
    definition over its filters (no-local: a delivery needs its publisher)."""
    t = SubscriptionTable()
    model: dict[str, dict[str, SubOptions]] = {}
    for op in ops:
        if op[0] == "set":
            t.set(op[1], op[2], op[3])
            model.setdefault(op[1], {})[op[2]] = op[3]
        elif op[0] == "remove":
            t.remove(op[1], op[2])
            model.get(op[1], {}).pop(op[2], None)
            if not model.get(op[1], True):
                del model[op[1]]
        elif op[0] == "drop":
            t.drop_queue(op[1])
            model.pop(op[1], None)
        else:
            t.load(op[1], op[2])
            for f, o in op[2]:
                model.setdefault(op[1], {})[f] = o
        assert sorted(t.queues()) == sorted(model)
        for queue in "qr":
            filters = model.get(queue, {})
            no_local = any(o.no_local for o in filters.values())
            assert t.wants_publisher(queue) == no_local
            if filters:
                q = t._queues[queue]
                assert (q.no_local, q.special) == (no_local,
                                                   any(not o.plain for o in filters.values()))
