"""tx.select / commit / rollback of publishes and acknowledgements."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from conformance._util import drain, message_count
from conformance.conftest import Names


def test_commit_publishes(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    observer = connection.channel()
    observer.queue_declare(queue)
    ch = connection.channel()
    ch.tx_select()
    ch.basic_publish("", queue, b"1")
    ch.basic_publish("", queue, b"2")
    assert message_count(observer, queue) == 0
    ch.tx_commit()
    assert message_count(observer, queue) == 2
    assert [b for _, _, b in drain(observer, queue, 2)] == [b"1", b"2"]


def test_rollback_discards_publishes(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    observer = connection.channel()
    observer.queue_declare(queue)
    ch = connection.channel()
    ch.tx_select()
    ch.basic_publish("", queue, b"lost")
    ch.tx_rollback()
    ch.tx_commit()  # the channel stays transactional; nothing pending
    assert message_count(observer, queue) == 0
    ch.basic_publish("", queue, b"kept")
    ch.tx_commit()
    assert [b for _, _, b in drain(observer, queue, 1)] == [b"kept"]


def test_acks_in_transaction(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    setup = connection.channel()
    setup.queue_declare(queue)
    setup.confirm_delivery()
    for body in (b"a", b"b"):
        setup.basic_publish("", queue, body)
    ch = connection.channel()
    ch.tx_select()
    got = drain(ch, queue, 2, auto_ack=False)
    ch.basic_ack(got[0][0].delivery_tag)
    ch.tx_rollback()  # the ack is forgotten; the message stays unacked (not requeued)
    assert message_count(setup, queue) == 0
    ch.basic_ack(got[0][0].delivery_tag)  # the tag is still valid
    ch.tx_commit()
    ch.close()  # only "b" was never acked
    back = drain(setup, queue, 1)
    assert [(b, m.redelivered) for m, _, b in back] == [(b"b", True)]
    assert message_count(setup, queue) == 0


def test_reject_in_transaction_takes_effect_on_commit(connection: pika.BlockingConnection,
                                                      names: Names) -> None:
    queue = names.queue()
    setup = connection.channel()
    setup.queue_declare(queue)
    setup.confirm_delivery()
    setup.basic_publish("", queue, b"r")
    ch = connection.channel()
    ch.tx_select()
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    ch.basic_reject(method.delivery_tag, requeue=True)
    assert message_count(setup, queue) == 0
    ch.tx_commit()
    assert [b for _, _, b in drain(setup, queue, 1)] == [b"r"]


@pytest.mark.parametrize("method", ["commit", "rollback"])
def test_commit_without_select_is_406(connection: pika.BlockingConnection, method: str) -> None:
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_commit() if method == "commit" else ch.tx_rollback()
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - channel is not transactional"


def test_confirm_then_tx_is_406(connection: pika.BlockingConnection) -> None:
    ch = connection.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.tx_select()
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - cannot switch from confirm to tx mode"


def test_tx_then_confirm_is_406(connection: pika.BlockingConnection) -> None:
    ch = connection.channel()
    ch.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - cannot switch from tx to confirm mode"


def test_tx_select_twice_is_ok(connection: pika.BlockingConnection) -> None:
    ch = connection.channel()
    ch.tx_select()
    ch.tx_select()
    ch.tx_commit()


def test_uncommitted_publishes_vanish_with_channel(connection: pika.BlockingConnection,
                                                   names: Names) -> None:
    queue = names.queue()
    observer = connection.channel()
    observer.queue_declare(queue)
    ch = connection.channel()
    ch.tx_select()
    ch.basic_publish("", queue, b"never")
    ch.close()
    assert message_count(observer, queue) == 0
