"""Direct reply-to (``amq.rabbitmq.reply-to``), as RabbitMQ does it.

RPC clients (aio-pika's patterns.RPC, FastStream, hand-written pika) consume
from the pseudo-queue in no-ack mode and publish requests with
``reply_to=amq.rabbitmq.reply-to``; the broker rewrites that to a private
name and routes replies straight to the consumer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._util import wait_until

REPLY_TO = "amq.rabbitmq.reply-to"


def _collect(ch: BlockingChannel, sink: list[Any], **kw: Any) -> str:
    return ch.basic_consume(REPLY_TO, lambda c, m, p, b: sink.append((m, p, b)),
                            auto_ack=True, **kw)


def test_passive_declare_of_pseudo_queue(channel: BlockingChannel) -> None:
    # RabbitMQ 3.10 answers 0 messages and 1 consumer, with or without one
    ok = channel.queue_declare(REPLY_TO, passive=True)
    assert ok.method.queue == REPLY_TO
    assert (ok.method.message_count, ok.method.consumer_count) == (0, 1)


def test_active_declare_of_pseudo_queue(channel: BlockingChannel) -> None:
    ok = channel.queue_declare(REPLY_TO)
    assert ok.method.queue == REPLY_TO
    assert (ok.method.message_count, ok.method.consumer_count) == (0, 1)


def test_consume_with_acks_refused(channel: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        channel.basic_consume(REPLY_TO, lambda *a: None, auto_ack=False)
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == "PRECONDITION_FAILED - reply consumer cannot acknowledge"


def test_second_reply_consumer_on_channel_refused(channel: BlockingChannel) -> None:
    _collect(channel, [])
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        _collect(channel, [])
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == "PRECONDITION_FAILED - reply consumer already set"


def test_publish_without_reply_consumer_refused(channel: BlockingChannel, names: Any) -> None:
    q = names.queue()
    channel.queue_declare(q)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        channel.basic_publish("", q, b"req", pika.BasicProperties(reply_to=REPLY_TO))
        channel.queue_declare(q, passive=True)  # a round trip to see the close
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"


def test_request_reply_round_trip(
    connection: pika.BlockingConnection,
    connection_factory: Callable[..., pika.BlockingConnection],
    names: Any,
) -> None:
    client = connection.channel()
    q = names.queue("rpc")
    client.queue_declare(q)
    replies: list[Any] = []
    tag = _collect(client, replies)
    client.basic_publish("", q, b"ping", pika.BasicProperties(reply_to=REPLY_TO,
                                                              correlation_id="c1"))

    server_conn = connection_factory()
    server = server_conn.channel()
    got: list[Any] = []
    wait_until(server_conn, lambda: bool(got.append(server.basic_get(q, auto_ack=True))
                                         or got[-1][0]), what="the request")
    _m, props, body = got[-1]
    assert body == b"ping"
    name = props.reply_to
    assert name.startswith(REPLY_TO + ".") and len(name) > len(REPLY_TO) + 8
    assert props.correlation_id == "c1"
    server.basic_publish("", name, b"pong", pika.BasicProperties(correlation_id="c1"))

    wait_until(connection, lambda: bool(replies), what="the reply")
    method, rprops, rbody = replies[0]
    assert rbody == b"pong"
    assert rprops.correlation_id == "c1"
    assert method.consumer_tag == tag
    assert method.exchange == ""
    assert method.routing_key == name

    # every request of this consumer carries the same private name
    client.basic_publish("", q, b"ping2", pika.BasicProperties(reply_to=REPLY_TO))
    wait_until(server_conn, lambda: bool(got.append(server.basic_get(q, auto_ack=True))
                                         or got[-1][0]), what="the second request")
    assert got[-1][1].reply_to == name
    server.basic_publish("", name, b"pong2")
    wait_until(connection, lambda: len(replies) == 2, what="the second reply")
    assert replies[1][2] == b"pong2"


def test_reply_to_gone_consumer_returned_when_mandatory(
    connection: pika.BlockingConnection,
    connection_factory: Callable[..., pika.BlockingConnection],
    names: Any,
) -> None:
    client = connection.channel()
    q = names.queue("rpc")
    client.queue_declare(q)
    tag = _collect(client, [])
    client.basic_publish("", q, b"ping", pika.BasicProperties(reply_to=REPLY_TO))
    client.basic_cancel(tag)

    server_conn = connection_factory()
    server = server_conn.channel()
    got: list[Any] = []
    wait_until(server_conn, lambda: bool(got.append(server.basic_get(q, auto_ack=True))
                                         or got[-1][0]), what="the request")
    name = got[-1][1].reply_to
    returned: list[Any] = []
    server.add_on_return_callback(lambda c, m, p, b: returned.append((m, b)))
    server.basic_publish("", name, b"late", mandatory=True)
    wait_until(server_conn, lambda: bool(returned), what="basic.return")
    method, body = returned[0]
    assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")
    assert (method.exchange, method.routing_key, body) == ("", name, b"late")


def test_reply_after_connection_closed_is_returned(
    connection_factory: Callable[..., pika.BlockingConnection], names: Any,
) -> None:
    client_conn = connection_factory()
    client = client_conn.channel()
    q = names.queue("rpc")
    client.queue_declare(q)
    _collect(client, [])
    client.basic_publish("", q, b"ping", pika.BasicProperties(reply_to=REPLY_TO))
    client.queue_declare(q, passive=True)  # the publish has been handled
    client_conn.close()

    server_conn = connection_factory()
    server = server_conn.channel()
    server.confirm_delivery()
    method, props, _ = server.basic_get(q, auto_ack=True)
    assert method is not None
    with pytest.raises(pika.exceptions.UnroutableError):
        server.basic_publish("", props.reply_to, b"late", mandatory=True)


def test_guessed_reply_name_is_not_routed(channel: BlockingChannel) -> None:
    channel.confirm_delivery()
    _collect(channel, [])
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", REPLY_TO + ".bogus-token", b"x", mandatory=True)


def test_passive_declare_of_private_name(
    connection: pika.BlockingConnection, names: Any,
) -> None:
    ch = connection.channel()
    q = names.queue("rpc")
    ch.queue_declare(q)
    tag = _collect(ch, [])
    ch.basic_publish("", q, b"ping", pika.BasicProperties(reply_to=REPLY_TO))
    wait_until(connection, lambda: ch.queue_declare(q, passive=True).method.message_count == 1,
               what="the request")
    _m, props, _b = ch.basic_get(q, auto_ack=True)
    name = props.reply_to
    ok = connection.channel().queue_declare(name, passive=True)
    assert (ok.method.queue, ok.method.message_count, ok.method.consumer_count) == (name, 0, 1)
    ch.basic_cancel(tag)
    for probe in (name, REPLY_TO + ".no-such-consumer"):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            connection.channel().queue_declare(probe, passive=True)
        assert exc.value.reply_code == 404
        assert exc.value.reply_text == f"NOT_FOUND - no queue '{probe}' in vhost '/'"
