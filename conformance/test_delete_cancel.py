"""queue.delete of a queue with consumers: delete-ok and the consumers' basic.cancel.

RabbitMQ answers queue.delete before the deleted queue's consumers on the
same channel get basic.cancel (a channel sends its reply, then handles the
queue's going). Node amqplib's "cancelled consumer" test relies on it: it
closes the channel as soon as the cancel arrives, and a delete-ok still owed
then never comes. A consumer on another channel of the connection gets its
cancel in either order (each RabbitMQ channel has its own writer), so only
its arrival is pinned down. Without the ``consumer_cancel_notify``
capability a client gets no basic.cancel at all.
"""

from __future__ import annotations

import struct

import pytest

from conformance._raw import RawConnection, shortstr, table
from conformance.conftest import Names

CANCEL_NOTIFY = ("consumer_cancel_notify",)
DELETE_OK = (50, 41)
CANCEL = (60, 30)


def _declare(raw: RawConnection, queue: str, durable: bool) -> None:
    raw.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(queue)
                    + struct.pack(">B", 2 if durable else 0) + table())
    raw.expect((50, 11), channel=1)


def _delete(raw: RawConnection, queue: str) -> None:
    raw.send_method(1, 50, 40, struct.pack(">H", 0) + shortstr(queue) + b"\x00")


def _frames(raw: RawConnection, count: int) -> list[tuple[int, tuple[int, int], bytes]]:
    """The next ``count`` methods as (channel, ids, arguments)."""
    return [(m.channel, m.ids, m.args) for m in (raw.read_method() for _ in range(count))]


def _tag(args: bytes) -> str:
    return args[1 : 1 + args[0]].decode()


@pytest.mark.parametrize("durable", [False, True], ids=["transient", "durable"])
def test_delete_ok_precedes_the_cancel_on_the_same_channel(
    url: str, names: Names, durable: bool
) -> None:
    raw = RawConnection(url).open(capabilities=CANCEL_NOTIFY)
    try:
        queue = names.queue()
        _declare(raw, queue, durable)
        raw.consume(queue, "mine")
        _delete(raw, queue)
        got = _frames(raw, 2)
        assert [(ch, ids) for ch, ids, _ in got] == [(1, DELETE_OK), (1, CANCEL)]
        assert _tag(got[1][2]) == "mine"
        raw.queue_declare("", exclusive=True)  # the channel carries on
    finally:
        raw.close()


@pytest.mark.parametrize("durable", [False, True], ids=["transient", "durable"])
def test_consumers_on_both_channels_are_cancelled(url: str, names: Names, durable: bool) -> None:
    raw = RawConnection(url).open(capabilities=CANCEL_NOTIFY)
    try:
        raw.open_channel(2)
        queue = names.queue()
        _declare(raw, queue, durable)
        raw.consume(queue, "here", channel=1)
        raw.consume(queue, "there", channel=2)
        _delete(raw, queue)
        got = _frames(raw, 3)
        on_one = [(ids, args) for ch, ids, args in got if ch == 1]
        assert [ids for ids, _ in on_one] == [DELETE_OK, CANCEL]
        assert _tag(on_one[1][1]) == "here"
        assert [(ch, ids, _tag(args)) for ch, ids, args in got if ch == 2] == [
            (2, CANCEL, "there")]
    finally:
        raw.close()


def test_no_cancel_without_the_capability(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    try:
        queue = names.queue()
        _declare(raw, queue, False)
        raw.consume(queue, "mine")
        _delete(raw, queue)
        raw.expect(DELETE_OK, channel=1)
        # the next frame on the wire answers this declare: no basic.cancel came between
        raw.queue_declare("", exclusive=True)
    finally:
        raw.close()
