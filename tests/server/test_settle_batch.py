"""A message delivered and acked while its insert still waits in the shell's batch
leaves the batch unwritten (``Persistence.flush_settled``): plain calls."""

from __future__ import annotations

from amqplite.storeops import (
    DeleteEntry,
    DeleteQueue,
    PutEntry,
    PutMessage,
    UpdateEntry,
    settle_batch,
)


def _published(mid: int, *queues: int) -> list[object]:
    return [PutMessage(mid, "", "q", b"", b"x", True), *(PutEntry(q, mid, mid) for q in queues)]


def test_an_insert_acked_in_the_same_batch_is_never_written() -> None:
    ops = [*_published(1, 1), *_published(2, 1), UpdateEntry(1, 1, 1, False),
           DeleteEntry(1, 1, 1)]
    assert settle_batch(ops) == _published(2, 1)


def test_a_message_stays_while_another_queue_still_holds_it() -> None:
    ops = [*_published(1, 1, 2), DeleteEntry(1, 1, 1)]
    assert settle_batch(ops) == [PutMessage(1, "", "q", b"", b"x", True), PutEntry(2, 1, 1)]


def test_acks_of_rows_written_before_and_metadata_in_between_stay() -> None:
    older = [DeleteEntry(1, 9, 9)]
    assert settle_batch(older) == older
    across = [*_published(1, 1), DeleteQueue(2), DeleteEntry(1, 1, 1)]
    assert settle_batch(across) == across
    untouched = _published(3, 1)
    assert settle_batch(untouched) is untouched


def test_a_batch_with_metadata_keeps_its_message_rows() -> None:
    """A later op may read a cancelled message's row (the store's Applier cancels
    those within its own segments): only the entry pair goes."""
    ops = [*_published(1, 1), DeleteEntry(1, 1, 1), DeleteQueue(2)]
    assert settle_batch(ops) == [PutMessage(1, "", "q", b"", b"x", True), DeleteQueue(2)]
