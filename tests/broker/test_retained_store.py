"""The retained store and the retaining exchanges, driven with plain calls."""

from __future__ import annotations

from typing import Any

from amqplite import storeops as ops
from amqplite.broker.core import Broker
from amqplite.broker.model import Message
from amqplite.broker.retained import DEFAULT_MAX_COUNT, Limits, Retained, RetainedStore
from tests.broker.conftest import PERSISTENT, TRANSIENT, session_channel


def _msg(key: int, rk: str, body: bytes, props: bytes = PERSISTENT) -> Message:
    return Message(key, "x", rk, props, body)


def test_keyed_set_replaces_and_limits_evict_oldest_with_store_ops() -> None:
    out: list[Any] = []
    store = RetainedStore(emit=out.append)
    rs = store.open(("/", "exchange", "x"), keyed=True, durable=True,
                    limits=Limits(max_count=2, max_bytes=None))
    a1, b1, a2, c1 = (_msg(1, "a", b"1"), _msg(2, "b", b"22"), _msg(3, "a", b"333"),
                      _msg(4, "c", b"4"))
    assert all(store.put(rs, m.routing_key, m) for m in (a1, b1, a2))
    assert [r.message for r in rs] == [b1, a2] and rs.bytes == 5
    assert (a1.pinned, b1.pinned, a2.pinned) == (0, 1, 1)
    store.put(rs, "c", c1)  # over two keys: b (the oldest update) goes
    assert [r.key for r in rs] == ["a", "c"] and b1.pinned == 0
    assert [type(o).__name__ for o in out] == [
        "PutRetained", "PutRetained", "DeleteRetained", "PutRetained", "PutRetained",
        "DeleteRetained"]
    assert out[2] == ops.DeleteRetained("/", "exchange", "x", 1)
    assert out[5] == ops.DeleteRetained("/", "exchange", "x", 2)
    # an MQTT-style lookup: keys matched by a predicate (a topic filter)
    assert [r.key for r in store.matching(rs, lambda k: k.startswith("a"))] == ["a"]


def test_transient_or_non_durable_is_kept_in_ram_only() -> None:
    out: list[Any] = []
    store = RetainedStore(emit=out.append)
    durable = store.open(("/", "exchange", "d"), keyed=False, durable=True)
    ram = store.open(("/", "exchange", "r"), keyed=False, durable=False)
    assert store.put(durable, "k", _msg(1, "k", b"t", TRANSIENT)) is False
    assert store.put(ram, "k", _msg(2, "k", b"p")) is False
    assert out == [] and store.totals(("/", "exchange", "d")) == (1, 1)


def test_failed_commit_withdraws_the_retained_message() -> None:
    out: list[Any] = []
    store = RetainedStore(emit=out.append)
    rs = store.open(("/", "exchange", "x"), keyed=True, durable=True)
    old, new = _msg(1, "k", b"old"), _msg(2, "k", b"new")
    store.put(rs, "k", old)
    store.put(rs, "k", new)
    assert store.commit_failed([out[-1]]) == 1  # new's PutRetained failed
    assert len(rs) == 0 and new.pinned == 0
    assert store.commit_failed([ops.PutEntry(1, 1, 2, 0, False)]) == 0


def test_publish_to_durable_lvc_waits_for_its_commit_and_bind_delivers_a_copy(
        broker: Broker) -> None:
    _s, ch = session_channel(broker)
    broker.exchange_declare(ch, "lvc", "x-lvc", durable=True)
    res = broker.basic_publish(ch, "lvc", "k", PERSISTENT, b"v1")
    assert not res.routed and res.stored  # no binding, but a row to commit
    broker.take_outcome()
    broker.queue_declare(ch, "q")
    broker.queue_bind(ch, "q", "lvc", "k")
    q = broker.vhosts["/"].queues["q"]
    (e,) = list(q.ready)
    kept = broker.retained.find(("/", "exchange", "lvc"))
    assert kept is not None
    (r,) = list(kept)
    assert e.message is not r.message and e.message.body is r.message.body
    assert e.message.headers() == {"x-retained": True}
    log = broker.take_outcome().log
    assert [row[1] for row in log if row[1] == "retained"] == ["retained"]
    reason = ops.LOG_FIELDS.index("reason")
    assert [row[reason] for row in log if row[1] == "retained"] == ["bind"]
    broker.exchange_delete(ch, "lvc")
    assert broker.retained.find(("/", "exchange", "lvc")) is None and r.message.pinned == 0


def test_deleting_the_vhost_drops_its_retained_sets(broker: Broker) -> None:
    broker.add_vhost("v")
    s = broker.open_session("guest", "v")
    ch = broker.open_channel(s, 1)
    broker.exchange_declare(ch, "lvc", "x-lvc", durable=True)
    broker.basic_publish(ch, "lvc", "k", PERSISTENT, b"v1")
    (rs,) = broker.retained.owners("v")
    (r,) = list(rs)
    broker.delete_vhost("v")
    assert broker.retained.owners("v") == [] and r.message.pinned == 0


def test_an_owner_without_a_byte_limit_gets_the_default_cap() -> None:
    """Retained bodies are pinned in RAM, so no owner is unbounded: one that names no
    byte limit takes the store's default; one that names its own keeps it."""
    out: list[Any] = []
    per = Retained("k", _msg(0, "k", b"abcd")).memory  # bodies, properties, key, overhead
    store = RetainedStore(emit=out.append, default_max_bytes=2 * per + 1)
    capped = store.open(("/", "exchange", "c"), keyed=False, durable=False,
                        limits=Limits(max_count=100))
    own = store.open(("/", "exchange", "o"), keyed=False, durable=False,
                     limits=Limits(max_count=100, max_bytes=1000))
    for i in range(5):
        store.put(capped, "k", _msg(i, "k", b"abcd"))
        store.put(own, "k", _msg(10 + i, "k", b"abcd"))
    assert [r.message.key for r in capped] == [3, 4] and capped.bytes == 8
    assert len(own) == 5 and own.bytes == 20
    # the node's figures count each message once
    assert store.totals_all() == (7, 28)


def test_restore_applies_a_lowered_default_cap() -> None:
    """Rows stored under a larger cap come back; the oldest beyond today's go (deleted)."""
    out: list[Any] = []
    per = Retained("k", _msg(0, "k", b"abcd")).memory
    store = RetainedStore(emit=out.append, default_max_bytes=2 * per)
    rs = store.open(("/", "exchange", "x"), keyed=False, durable=True)
    for i in range(4):
        store.restore(rs, "k", _msg(i, "k", b"abcd"))
    assert [r.message.key for r in rs] == [2, 3]
    assert out == [ops.DeleteRetained("/", "exchange", "x", 0),
                   ops.DeleteRetained("/", "exchange", "x", 1)]


def test_an_lvc_of_empty_bodies_is_bounded_and_its_memory_counted_truly() -> None:
    """200,000 keys with empty bodies (x-lvc, no x-max-length): the default key cap
    bounds the set, and the bytes the store reports are within 0.5-2x of what
    tracemalloc sees it take (on the old code: unbounded, and 0 bytes reported)."""
    import tracemalloc

    store = RetainedStore(emit=lambda op: None)
    rs = store.open(("/", "exchange", "lvc"), keyed=True, durable=False,
                    limits=Limits(max_count=None, max_bytes=None))
    props = b"\x90\x00\x10application/json\x01"  # content-type, delivery-mode
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(200_000):
            rk = f"sensor.{i:06d}.temp"
            store.put(rs, rk, Message(i + 1, "lvc", rk, bytes(props), b""))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(rs) == DEFAULT_MAX_COUNT == 100_000
    assert [r.key for r in list(rs)[:1]] == ["sensor.100000.temp"]  # the oldest went
    reported = store.memory_all()
    assert rs.memory == reported
    assert 0.5 * grown <= reported <= 2 * grown, (reported, grown)
    assert store.totals_all() == (100_000, 0)  # bodies: none
    # an x-max-length (explicit count) still overrides the default
    small = store.open(("/", "exchange", "five"), keyed=True, durable=False,
                       limits=Limits(max_count=5))
    for i in range(10):
        store.put(small, f"k{i}", _msg(10**6 + i, f"k{i}", b""))
    assert len(small) == 5
    store.close(("/", "exchange", "lvc"))
    store.close(("/", "exchange", "five"))
    assert store.memory_all() == 0


def test_empty_bodies_count_toward_the_default_byte_cap() -> None:
    """Without x-max-length-bytes, RAM (not only body bytes) is what the default
    bounds: empty bodies fill it too."""
    per = Retained("k0", _msg(0, "k0", b"")).memory
    store = RetainedStore(emit=lambda op: None, default_max_bytes=10 * per)
    rs = store.open(("/", "exchange", "x"), keyed=True, durable=False)
    for i in range(50):
        store.put(rs, f"k{i % 10}" if i < 10 else f"j{i}", _msg(i, "k", b""))
    assert len(rs) <= 10 and rs.memory <= 10 * per
