"""One submission's bad row fails at most that submission, never the group (issue 7)."""

from __future__ import annotations

from amqplite.storeops import LogEvent, PutEntry, PutMessage, PutQueue
from tests.pg_server import both_backends


def _row(message_id: object, ts: int = 1) -> tuple[object, ...]:
    """A delivery_log row as the broker emits it (a tuple in column order)."""
    return (ts, "published", "/", "", "q", None, message_id, None, None, None, 3, None)


@both_backends
def test_unencodable_log_row_fails_no_one_and_is_stored_escaped(make_store, raw) -> None:
    store = make_store()
    results: list[BaseException | None] = []
    # Submitted before start(): one group holding all three.
    store.submit([PutQueue(1, "/", "q"), PutMessage(1, "", "q", b"\x00\x00", b"a"),
                  PutEntry(1, 1, 1)], results.append)
    store.submit([_row("id-\udcff"), LogEvent(2, "published", "/", "", "q", message_id="\ud800")],
                 results.append)
    store.submit([PutMessage(2, "", "q", b"\x00\x00", b"b"), PutEntry(1, 2, 2), _row("ok", 3)],
                 results.append)
    store.start()
    store.flush(10)
    assert results == [None, None, None]
    assert raw("SELECT position FROM queue_entries ORDER BY position") == [(1,), (2,)]
    assert raw("SELECT message_id FROM delivery_log ORDER BY id") == [
        ("id-\\udcff",), ("\\ud800",), ("ok",)]


@both_backends
def test_a_submission_that_cannot_commit_fails_alone(make_store, raw) -> None:
    first = make_store()
    first.start()
    first.submit([PutQueue(1, "/", "q"), PutMessage(1, "", "q", b"", b"x"), PutEntry(1, 1, 1)])
    first.flush(10)
    first.close(10)
    store = make_store()
    results: list[BaseException | None] = []
    store.submit([_row("a")], results.append)
    store.submit([PutEntry(1, 1, 1)], results.append)  # the key exists: no retry can fix it
    store.submit([PutMessage(2, "", "q", b"", b"y"), PutEntry(1, 2, 2)], results.append)
    store.start()
    store.flush(10)
    assert results[0] is None and results[2] is None
    assert results[1] is not None
    assert raw("SELECT position FROM queue_entries ORDER BY position") == [(1,), (2,)]
    assert raw("SELECT message_id FROM delivery_log") == [("a",)]
