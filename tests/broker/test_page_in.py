"""Page-in: bodies deep in a queue leave RAM and come back before delivery.

The pure broker runs with plain calls on a real SQLite store; the test plays
the shell: it commits each Outcome, reports the commit (``commit_done``), and
answers each ``PageIn`` with ``Store.fetch_bodies`` when it chooses to, so a
purge, a delete or a lost row can land while the read is out. Queues with a
length limit do not spill whole entries, so only their bodies page out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from amqplite import storeops as ops
from amqplite.broker.core import Broker
from amqplite.broker.effects import NEED_PAGE_IN, PageIn
from amqplite.broker.paging import PAGE_IN_BATCH
from amqplite.broker.queue import Queue
from amqplite.store.engine import Store
from tests.broker.conftest import PERSISTENT, FakeClock, session_channel
from tests.broker.test_spill import Shell as SpillShell

WINDOW = 5
#: a limit never reached: keeps the queue from spilling entries, so bodies page
NO_SPILL = {"x-max-length": 1_000_000}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store(f"sqlite:///{tmp_path / 'pagein.db'}")
    st.create()
    st.start()
    yield st
    st.close()


class Shell(SpillShell):
    """test_spill's shell; answers the PageIn requests it keeps when told to."""

    def answer(self) -> PageIn:
        """The oldest PageIn, answered as the server's ``_page_in`` does."""
        e = self.page_ins.pop(0)
        keys = [x.message.key for x in e.entries if x.message.body is None]
        self.b.paged_in(e.queue, self.store.fetch_bodies(keys), e.entries)
        self.settle()
        return e

    def drain(self) -> None:
        while self.page_ins:
            self.answer()

    def dropped(self) -> list[dict[str, Any]]:
        rows = (dict(zip(ops.LOG_FIELDS, r, strict=True)) for r in self.log)
        return [r for r in rows if r["event"] == "dropped"]


def _fill(b: Broker, shell: Shell, queue: str, n: int, **args: Any) -> tuple[Any, Queue]:
    _, ch = session_channel(b)
    b.queue_declare(ch, queue, durable=True, arguments={**NO_SPILL, **args})
    for i in range(n):
        b.basic_publish(ch, "", queue, PERSISTENT, b"m%04d" % i)
        shell.settle()  # one commit each: every entry beyond the window pages out
    return ch, b.vhost("/").queues[queue]


def _consuming(store: Store, queue: str, n: int, no_ack: bool = True,
               ) -> tuple[Shell, Any, Queue]:
    """A queue of ``n`` messages, WINDOW bodies in RAM, and a consumer on it."""
    shell = Shell(Broker(now=FakeClock(), body_window=WINDOW), store)
    ch, q = _fill(shell.b, shell, queue, n)
    shell.b.basic_consume(ch, queue, "c", no_ack=no_ack)
    shell.b.start_consumer(ch, "c")
    shell.settle()
    return shell, ch, q


def _paged_out(q: Queue) -> list[int]:
    return [i for i, e in enumerate(q.ready) if e.message.body is None]


def test_bodies_beyond_the_window_page_out_and_come_back_in_order(store: Store) -> None:
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = Shell(b, store)
    n = WINDOW + PAGE_IN_BATCH + 20  # two reads: one PageIn asks for at most a batch
    ch, q = _fill(b, shell, "deep", n)
    assert _paged_out(q) == list(range(WINDOW, n)), "committed bodies past the window leave RAM"
    assert q.ready.disk_count == 0  # a length-limited queue keeps its entries
    b.basic_consume(ch, "deep", "c", no_ack=True)
    b.start_consumer(ch, "c")
    shell.settle()
    assert shell.delivered == [b"m%04d" % i for i in range(WINDOW)]
    assert len(shell.page_ins) == 1 and q.paging
    asked = shell.page_ins[0]
    assert asked.queue is q
    assert [e.message.body for e in asked.entries] == [None] * PAGE_IN_BATCH
    # a basic.get while the read is out waits on it too, and asks for nothing more
    assert b.basic_get(ch, "deep", no_ack=True) is NEED_PAGE_IN
    shell.settle()
    assert len(shell.page_ins) == 1
    shell.answer()
    assert shell.delivered == [b"m%04d" % i for i in range(WINDOW + PAGE_IN_BATCH)]
    assert [len(e.entries) for e in shell.page_ins] == [20]
    shell.drain()
    assert not q.paging
    assert shell.delivered == [b"m%04d" % i for i in range(n)]
    assert q.message_count == 0


def test_a_failed_read_is_asked_for_again(store: Store) -> None:
    """The shell reports a failed read as ``paged_in(q, {}, ())``: nothing is lost,
    and the next dispatch asks again."""
    shell, _, q = _consuming(store, "retry", 12)
    b = shell.b
    first = shell.page_ins.pop()
    b.paged_in(q, {}, ())
    shell.settle()
    assert q.message_count == 12 - WINDOW
    assert [e.message.key for e in shell.page_ins[0].entries] == [
        e.message.key for e in first.entries]
    shell.drain()
    assert shell.delivered == [b"m%04d" % i for i in range(12)]


def test_basic_get_pages_the_head_in(store: Store) -> None:
    b = Broker(now=FakeClock(), body_window=1)
    shell = Shell(b, store)
    ch, q = _fill(b, shell, "get", 3)
    got = b.basic_get(ch, "get", no_ack=True)
    assert got is not None and got.message.body == b"m0000"  # type: ignore[union-attr]
    assert len(_paged_out(q)) == 2
    assert b.basic_get(ch, "get", no_ack=True) is NEED_PAGE_IN
    shell.settle()
    shell.answer()
    bodies = []
    while (g := b.basic_get(ch, "get", no_ack=True)) is not None:
        bodies.append(g.message.body)  # type: ignore[union-attr]
    assert bodies == [b"m0001", b"m0002"]


def test_a_body_gone_from_the_store_is_dropped_with_a_log_row(store: Store) -> None:
    b = Broker(now=FakeClock(), body_window=WINDOW)
    shell = Shell(b, store)
    n = 10
    ch, q = _fill(b, shell, "lossy", n)
    lost = list(q.ready)[WINDOW + 2]
    with store.engine.begin() as conn:  # the row vanished under the broker
        conn.execute(text("DELETE FROM messages WHERE id = :k"), {"k": lost.message.key})
    b.basic_consume(ch, "lossy", "c", no_ack=True)
    b.start_consumer(ch, "c")
    shell.settle()
    shell.drain()
    assert shell.delivered == [b"m%04d" % i for i in range(n) if i != WINDOW + 2]
    assert q.message_count == 0 and not q.paging
    dropped = shell.dropped()
    assert [(r["message_key"], r["reason"], r["queue"]) for r in dropped] == [
        (lost.message.key, "body_missing", "lossy")]


def test_paged_out_entries_dead_lettered_wait_for_their_bodies(store: Store) -> None:
    """drop-head overflow dead-letters paged-out heads to a queue that does not
    store them: each parks on ``awaiting_body`` and is routed once its body is in."""
    b = Broker(now=FakeClock(), body_window=2)
    shell = Shell(b, store)
    _, ch = session_channel(b)
    b.queue_declare(ch, "dlq")  # transient: the copy needs the body in RAM
    b.queue_declare(ch, "src", durable=True, arguments={
        "x-max-length": 5, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    q = b.vhost("/").queues["src"]
    for i in range(9):
        b.basic_publish(ch, "", "src", PERSISTENT, b"m%04d" % i)
        shell.settle()
    # m0000..m0001 kept their bodies and went at once; m0002..m0003 wait on one read
    assert [e.message.body for e, _ in q.awaiting_body] == [None, None]
    assert [r for _, r in q.awaiting_body] == ["maxlen", "maxlen"]
    assert len(shell.page_ins) == 1
    shell.drain()
    assert q.awaiting_body == []
    assert q.message_count == 5
    got = []
    while (g := b.basic_get(ch, "dlq", no_ack=True)) is not None:
        got.append(g.message.body)  # type: ignore[union-attr]
    assert got == [b"m%04d" % i for i in range(4)]


def test_a_parked_dead_letter_whose_body_is_gone_is_dropped(store: Store) -> None:
    b = Broker(now=FakeClock(), body_window=1)
    shell = Shell(b, store)
    _, ch = session_channel(b)
    b.queue_declare(ch, "dlq")
    b.queue_declare(ch, "src", durable=True, arguments={
        "x-max-length": 3, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    q = b.vhost("/").queues["src"]
    for i in range(5):
        b.basic_publish(ch, "", "src", PERSISTENT, b"m%04d" % i)
        shell.settle()
    (parked, _), = q.awaiting_body
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM messages WHERE id = :k"), {"k": parked.message.key})
    shell.drain()
    assert q.awaiting_body == []
    assert [r["reason"] for r in shell.dropped()] == ["body_missing"]
    assert b.vhost("/").queues["dlq"].message_count == 1  # m0000 only


@pytest.mark.parametrize("how", ["purge", "delete"])
def test_purge_or_delete_while_a_page_in_is_out(store: Store, how: str) -> None:
    shell, ch, q = _consuming(store, "gone", 20, no_ack=False)
    b = shell.b
    assert len(shell.page_ins) == 1
    if how == "purge":
        assert b.queue_purge(ch, "gone") == 20 - WINDOW
    else:
        b.queue_delete(ch, "gone")
        assert q.deleted
    shell.settle()
    shell.answer()  # the read lands after: nothing is delivered, nothing asked again
    assert not q.paging and shell.page_ins == []
    assert shell.delivered == [b"m%04d" % i for i in range(WINDOW)]
    assert q.message_count == 0
    if how == "purge":  # the queue works on
        b.basic_publish(ch, "", "gone", PERSISTENT, b"after")
        shell.settle()
        assert shell.delivered[-1] == b"after"


def test_a_message_shared_by_two_queues_is_read_once_and_kept(store: Store) -> None:
    """A fanout copy shares one Message: the first queue's read restores the body
    the second queue's read also asked for; that one keeps it."""
    b = Broker(now=FakeClock(), body_window=1)
    shell = Shell(b, store)
    _, ch = session_channel(b)
    b.exchange_declare(ch, "fan", "fanout", durable=True)
    for name in ("a", "b"):
        b.queue_declare(ch, name, durable=True, arguments=NO_SPILL)
        b.queue_bind(ch, name, "fan", "")
    for i in range(4):
        b.basic_publish(ch, "fan", "", PERSISTENT, b"m%04d" % i)
        shell.settle()
    qa, qb = (b.vhost("/").queues[n] for n in ("a", "b"))
    assert list(qa.ready)[1].message is list(qb.ready)[1].message
    for name in ("a", "b"):
        b.basic_consume(ch, name, name, no_ack=True)
        b.start_consumer(ch, name)
    shell.settle()
    assert [e.queue.name for e in shell.page_ins] == ["a", "b"]
    shell.drain()
    assert sorted(shell.delivered) == sorted(b"m%04d" % i for i in range(4) for _ in "ab")
    assert qa.message_count == qb.message_count == 0
