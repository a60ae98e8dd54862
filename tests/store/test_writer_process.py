"""The store with its writer in a child process, driven from this thread (no event loop)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select

from amqplite.store import schema as s
from amqplite.store.engine import Store
from amqplite.store.writer import ProcessStore, StoreWriterError, StoreWriterGone
from amqplite.store.writer_frames import FrameBuffer, encode
from amqplite.storeops import LogEvent, PutMessage, PutMeta, PutQueue
from tests.brokerproc import wait_for
from tests.pg_server import both_backends
from tests.server.dying_writer import dead


def _row(i: int) -> tuple[object, ...]:
    return (i, "published", "/", "", "q", None, None, i, None, None, 10, None, "amqp-0-9-1")


def _log_rows(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(s.delivery_log)).scalar_one())


def _pump_until(store: ProcessStore, cond: object, timeout: float = 20.0) -> None:
    """What the broker's loop does: send when writable, read when readable."""
    def step() -> bool:
        store.send_some()
        sock = store.sock
        if sock is None:
            store.respawn()
        elif not store.receive_some():
            pass
        return bool(cond())  # type: ignore[operator]
    wait_for(step, timeout, interval=0.005, what="the writer process")


@pytest.fixture
def pstore(db_url: str):  # type: ignore[no-untyped-def]
    store = ProcessStore(db_url, log_linger_s=0)
    store.start()
    store.create()
    yield store
    store.close(20)


def test_frames_round_trip_hot_ops_and_log_rows() -> None:
    ops = [PutMessage(1, "ex", "rk", b"\x00\x01", b"body"), _row(1), PutQueue(3, "/", "q")]
    frames = FrameBuffer()
    data = encode(("s", 7, ops)) + encode(("x",))
    frames.feed(data[:5])
    assert frames.next() is None  # half a frame is no frame
    frames.feed(data[5:])
    assert frames.next() == ("s", 7, ops)
    assert frames.next() == ("x",)
    assert frames.next() is None


@both_backends
def test_submissions_commit_in_the_child_and_callbacks_run_here(pstore: ProcessStore) -> None:
    assert pstore.writer_pid is not None and pstore.writer_pid != os.getpid()
    results: list[BaseException | None] = []
    threads: set[int] = set()

    def cb(err: BaseException | None) -> None:
        results.append(err)
        threads.add(threading.get_ident())

    for i in range(50):
        pstore.submit([_row(i), _row(i + 1000)], cb)
    pstore.flush(20)
    assert results == [None] * 50
    assert threads == {threading.get_ident()}
    assert _log_rows(pstore) == 100


@both_backends
def test_a_failing_submission_fails_alone(pstore: ProcessStore) -> None:
    got: dict[str, BaseException | None] = {}
    pstore.submit([PutMessage(1, "", "q", b"", b"x")], lambda e: got.__setitem__("a", e))
    pstore.flush(20)
    # the same message id again violates the key: only this submission fails
    pstore.submit([PutMessage(1, "", "q", b"", b"y")], lambda e: got.__setitem__("b", e))
    pstore.submit([PutQueue(2, "/", "q2")], lambda e: got.__setitem__("c", e))
    pstore.flush(20)
    assert got["a"] is None and got["c"] is None
    assert isinstance(got["b"], StoreWriterError) and "IntegrityError" in str(got["b"])


@both_backends
def test_a_killed_writer_fails_what_it_had_and_a_new_one_takes_over(
        pstore: ProcessStore) -> None:
    pstore.submit([_row(1)])
    pstore.flush(20)
    first = pstore.writer_pid
    assert first is not None
    os.kill(first, signal.SIGSTOP)  # it holds the next submission, then dies with it
    got: list[BaseException | None] = []
    pstore.submit([PutMeta("k", "v")], got.append)
    pstore.send_some()
    os.kill(first, signal.SIGKILL)
    _pump_until(pstore, lambda: got)
    assert isinstance(got[0], StoreWriterError)
    assert pstore.failing is not None  # publishers are blocked until a writer commits
    _pump_until(pstore, lambda: pstore.sock is not None)
    assert pstore.writer_pid not in (None, first)
    assert pstore.restarts == 1
    later: list[BaseException | None] = []
    pstore.submit([_row(2)], later.append)
    _pump_until(pstore, lambda: later)
    assert later == [None]
    assert pstore.failing is None
    assert _log_rows(pstore) == 2


def test_close_stops_the_writer_and_records_a_clean_stop(tmp_path: Path) -> None:
    store = ProcessStore(f"sqlite:///{tmp_path / 'c.db'}")
    store.start()
    store.create()
    store.mark_open()
    pid = store.writer_pid
    assert pid is not None
    for i in range(10):
        store.submit([_row(i)])
    store.close(20, clean=True)
    assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)
    again = Store(f"sqlite:///{tmp_path / 'c.db'}")
    assert _log_rows(again) == 10
    assert again.get_meta("clean_shutdown") == "1"
    again.close()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except OSError:
        return True


def test_log_rows_linger_but_work_someone_waits_on_does_not(tmp_path: Path) -> None:
    """A group of log rows alone waits for company; a metadata op ends the wait."""
    store = Store(f"sqlite:///{tmp_path / 'l.db'}", log_linger_s=30)
    store.create()
    store.start()
    try:
        logged = threading.Event()
        store.submit([_row(1)], lambda _e: logged.set())
        wait_for(lambda: store._lingering, 10, what="the writer to linger")
        done = threading.Event()
        store.submit([PutMeta("k", "v")], lambda _e: done.set())
        assert done.wait(10), "a metadata op waited for the log linger"
        assert logged.is_set()
        assert store.groups == 1 and store.last_group_size == 2
    finally:
        store.close(20)


@pytest.mark.parametrize("kind", [Store, ProcessStore])
def test_an_urgent_submission_ends_the_linger(tmp_path: Path, kind: type[Store]) -> None:
    """Log rows someone waits on (a confirm of a transient message) commit at once."""
    store = kind(f"sqlite:///{tmp_path / 'u.db'}", log_linger_s=30)
    store.start()  # a process store's writer creates the schema: it goes first
    store.create()
    try:
        got: list[BaseException | None] = []
        store.submit([_row(1)])
        store.submit([_row(2)], got.append, urgent=True)
        if isinstance(store, ProcessStore):
            _pump_until(store, lambda: got, 10)
        else:
            wait_for(lambda: got, 10, what="the urgent commit")
        assert got == [None]
        assert _log_rows(store) == 2
    finally:
        store.close(20)


@both_backends
def test_a_read_sees_every_submission_sent_before_it(pstore: ProcessStore) -> None:
    """No flush in between: the writer commits what came first, then reads."""
    from amqplite.storeops import PutEntry

    pstore.submit([PutQueue(1, "/", "q"), *[PutMessage(i, "", "q", b"", b"m%d" % i)
                                            for i in range(1, 6)],
                   *[PutEntry(1, i, i) for i in range(1, 6)]])
    got: list[tuple[object, BaseException | None]] = []
    pstore.read("fetch_entries", (1, 2, 4, 10), lambda r, e: got.append((r, e)))
    pstore.read("fetch_bodies", ([1, 5, 99],), lambda r, e: got.append((r, e)))
    pstore.read("drop_everything", (), lambda r, e: got.append((r, e)))
    _pump_until(pstore, lambda: len(got) == 3)
    (entries, err1), (bodies, err2), (nothing, err3) = got
    assert err1 is None and [row[0] for row in entries] == [2, 3, 4]  # type: ignore[union-attr]
    assert err2 is None and bodies == {1: b"m1", 5: b"m5"}
    assert nothing is None and isinstance(err3, StoreWriterError)
    assert "not a store read" in str(err3)


@both_backends
def test_log_rows_cross_encoded_and_keep_their_order_ids_and_values(pstore: ProcessStore) -> None:
    """The process store sends a submission's row tuples as JSON batches
    (EncodedLog); what the view shows is what was submitted, in order, with
    consecutive ids, odd values made storable, and the message-key mark raised."""
    weird = (5, "published", "/", "", "q", None, "id-\udcff", 2**70, None, None, 10, None, None)
    rows = [_row(i) for i in range(1, 1500)]  # more than one batch row
    pstore.submit([rows[0], PutMessage(9_000, "ex", "rk", b"\x00\x00", b"b"), *rows[1:], weird,
                   LogEvent(7, "acked", "/", "", "q", message_key=12_345)])
    pstore.flush(20)
    with pstore.engine.connect() as conn:
        got = conn.execute(select(s.delivery_log).order_by(s.delivery_log.c.id)).all()
        mark = conn.execute(select(s.meta.c.value).where(s.meta.c.key == "max_message_id")).scalar()
    # the LogEvent (an attrs op) goes its own way: its row is there, after or before
    assert [r.id for r in got] == list(range(1, 1502))
    tuples = [tuple(r)[1:] for r in got if r.event == "published"]
    assert tuples == [*rows, (5, "published", "/", "", "q", None, "id-\\udcff", None, None, None, 10,
                              None, None)]
    assert [r.message_key for r in got if r.event == "acked"] == [12_345]
    assert int(mark) == 12_345


@pytest.mark.parametrize("noticed", [False, True])
def test_close_after_the_writer_died_writes_what_waits(tmp_path: Path, noticed: bool) -> None:
    """The writer dies and the loop stops before it starts the next one (``noticed``:
    it saw the death; else not even that): close() starts one, and what was
    submitted since (a repair of failed metadata, say) is written, not dropped."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = ProcessStore(url, log_linger_s=0)
    store.start()
    store.create()
    got: list[BaseException | None] = []
    store.submit([PutQueue(1, "/", "before")], got.append)
    _pump_until(store, lambda: got == [None])
    pid = store.writer_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: dead(pid), 10, what="the writer to die")  # not a frame to it now
    if noticed:
        wait_for(lambda: not store.receive_some(), 10, what="the writer's end to be seen")
        assert store.sock is None
    store.submit([PutQueue(2, "/", "after")], got.append)
    store.close(20, clean=True)
    assert len(got) == 2 and got[0] is None
    if got[1] is None:  # queued (the dead socket refused it): written by a new writer
        expected = {"before", "after"}
    else:  # the dead writer's socket took it before its end was seen: failed, not silent
        assert isinstance(got[1], StoreWriterGone), got[1]
        expected = {"before"}
    again = Store(url)
    names = {q.name for q in again.load().queues}
    again.close()
    assert names == expected


def test_a_submission_that_cannot_be_encoded_leaves_nothing_behind(pstore: ProcessStore) -> None:
    """``submit`` raises for an op the writer cannot be sent, and keeps no callback for
    it: a later flush does not wait for it, and close does not call it back (the
    broker already failed that submission itself)."""
    called: list[BaseException | None] = []
    with pytest.raises(Exception):  # noqa: B017 - pickle's own error
        pstore.submit([lambda: None], called.append)  # type: ignore[list-item]
    pstore.submit([_row(1)])
    pstore.flush(5)
    pstore.close(20)
    assert called == []


def test_the_broker_store_carries_no_thread_writer() -> None:
    """The broker's store is not the thread store, and the loop's side of it (the
    store, the persistence bridge) takes no lock and asks no thread id."""
    import ast
    from pathlib import Path as P

    import amqplite.server.persistence as persistence
    import amqplite.store.writer as writer

    assert not issubclass(ProcessStore, Store)
    for mod in (writer, persistence):
        tree = ast.parse(P(str(mod.__file__)).read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert "threading" not in names, mod.__name__
        assert not attrs & {"get_ident", "_lock", "Lock", "Condition"}, mod.__name__


def _maps_sqlalchemy(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return "/sqlalchemy/" in f.read()


def test_the_broker_process_never_loads_sqlalchemy(tmp_path: Path) -> None:
    """On SQLite the writer process opens the database, creates the schema and reads
    everything back: the broker's own process keeps SQLAlchemy's 17 MiB out, through
    a start, persistent traffic and a restart with a backlog to recover."""
    import pika

    from tests.brokerproc import BrokerProcess

    b = BrokerProcess(tmp_path / "data").start()
    try:
        for round_ in range(2):  # the second start recovers the first one's backlog
            c = pika.BlockingConnection(pika.URLParameters(b.url))
            ch = c.channel()
            ch.confirm_delivery()
            ch.queue_declare("kept", durable=True)
            for i in range(20):
                ch.basic_publish("", "kept", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
            _m, _p, body = ch.basic_get("kept", auto_ack=True)
            assert body == [b"m0", b"m1"][round_]  # the second start recovered m1..m19
            c.close()
            assert b.proc is not None
            pid = b.proc.pid
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                writers = [int(p) for p in f.read().split()]
            assert writers and all(_maps_sqlalchemy(w) for w in writers)  # the probe works
            assert not _maps_sqlalchemy(pid)
            b.stop()
            b.start()
    finally:
        b.kill()
