"""exchange.declare / delete / bind: types, passive, equivalence, reserved names."""

from __future__ import annotations

from collections.abc import Callable

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._raw import RawConnection, shortstr, table
from conformance._util import exchange_exists, routed
from conformance.conftest import Names

TYPES = ["direct", "fanout", "topic", "headers"]


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("durable", [False, True])
def test_declare_every_type(channel: BlockingChannel, names: Names, kind: str,
                            durable: bool) -> None:
    name = names.exchange(kind)
    ok = channel.exchange_declare(name, kind, durable=durable)
    assert ok.method.NAME == "Exchange.DeclareOk"
    # Redeclaring with the same properties is fine; passive finds it.
    channel.exchange_declare(name, kind, durable=durable)
    channel.exchange_declare(name, passive=True)


@pytest.mark.parametrize("name", ["amq.direct", "amq.fanout", "amq.topic", "amq.headers",
                                  "amq.match"])
def test_predeclared_exchanges_exist(channel: BlockingChannel, name: str) -> None:
    channel.exchange_declare(name, passive=True)


def test_passive_missing_is_404(channel: BlockingChannel, names: Names) -> None:
    name = names.exchange("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.exchange_declare(name, passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no exchange '{name}' in vhost '/'"


def test_redeclare_different_type_is_406(connection: pika.BlockingConnection,
                                         names: Names) -> None:
    name = names.exchange()
    connection.channel().exchange_declare(name, "direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_declare(name, "fanout")
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/':"
        " received 'fanout' but current is 'direct'"
    )


def test_redeclare_different_durable_is_406(connection: pika.BlockingConnection,
                                            names: Names) -> None:
    name = names.exchange()
    connection.channel().exchange_declare(name, "direct", durable=False)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_declare(name, "direct", durable=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{name}' in vhost '/':"
        " received 'true' but current is 'false'"
    )


def test_passive_ignores_type(connection: pika.BlockingConnection, names: Names) -> None:
    name = names.exchange()
    ch = connection.channel()
    ch.exchange_declare(name, "topic")
    ch.exchange_declare(name, "fanout", passive=True)  # passive checks existence only


def test_amq_prefix_is_403(channel: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.exchange_declare("amq.conformance-reserved", "direct")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - exchange name 'amq.conformance-reserved' contains reserved prefix"
        " 'amq.*'"
    )


def test_unknown_type_is_503_connection_error(connection: pika.BlockingConnection,
                                              names: Names) -> None:
    name = names.exchange()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        connection.channel().exchange_declare(name, "no-such-type")
    assert info.value.reply_code == 503
    assert info.value.reply_text == "COMMAND_INVALID - unknown exchange type 'no-such-type'"


def test_delete_if_unused(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    source, queue = names.exchange(), names.queue()
    ch.exchange_declare(source, "direct")
    ch.queue_declare(queue)
    ch.queue_bind(queue, source, "k")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_delete(source, if_unused=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == f"PRECONDITION_FAILED - exchange '{source}' in vhost '/' in use"
    ch = connection.channel()
    ch.queue_unbind(queue, source, "k")
    ch.exchange_delete(source, if_unused=True)
    assert not exchange_exists(connection, source)


def test_delete_removes_bindings(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    ch.confirm_delivery()
    source, queue = names.exchange(), names.queue()
    ch.exchange_declare(source, "fanout")
    ch.queue_declare(queue)
    ch.queue_bind(queue, source)
    ch.exchange_delete(source)
    ch.exchange_declare(source, "fanout")  # a fresh one has no bindings
    ch.basic_publish(source, "", b"lost")
    assert routed(ch, [queue]) == {queue: []}


def test_delete_missing_is_ok(channel: BlockingChannel, names: Names) -> None:
    ok = channel.exchange_delete(names.exchange("never-declared"))
    assert ok.method.NAME == "Exchange.DeleteOk"
    assert channel.is_open


def test_exchange_to_exchange_binding(connection: pika.BlockingConnection,
                                      names: Names) -> None:
    ch = connection.channel()
    ch.confirm_delivery()
    upstream, downstream = names.exchange("up"), names.exchange("down")
    q1, q2 = names.queue("q1"), names.queue("q2")
    ch.exchange_declare(upstream, "topic")
    ch.exchange_declare(downstream, "direct")
    for q in (q1, q2):
        ch.queue_declare(q)
    ch.exchange_bind(destination=downstream, source=upstream, routing_key="a.*")
    ch.queue_bind(q1, downstream, "a.b")
    ch.queue_bind(q2, upstream, "#")
    ch.basic_publish(upstream, "a.b", b"1")
    ch.basic_publish(upstream, "a.c", b"2")  # reaches downstream, no queue bound for a.c
    ch.basic_publish(upstream, "x", b"3")
    assert routed(ch, [q1, q2]) == {q1: [b"1"], q2: [b"1", b"2", b"3"]}
    ch.exchange_unbind(destination=downstream, source=upstream, routing_key="a.*")
    ch.basic_publish(upstream, "a.b", b"4")
    assert routed(ch, [q1, q2]) == {q1: [], q2: [b"4"]}


def test_exchange_bindings_dedupe_across_paths(connection: pika.BlockingConnection,
                                               names: Names) -> None:
    """A queue reachable by two paths receives one copy."""
    ch = connection.channel()
    ch.confirm_delivery()
    top, mid, queue = names.exchange("top"), names.exchange("mid"), names.queue()
    ch.exchange_declare(top, "fanout")
    ch.exchange_declare(mid, "fanout")
    ch.queue_declare(queue)
    ch.exchange_bind(mid, top)
    ch.queue_bind(queue, top)
    ch.queue_bind(queue, mid)
    ch.basic_publish(top, "", b"once")
    assert routed(ch, [queue]) == {queue: [b"once"]}


def test_exchange_binding_cycle_terminates(connection: pika.BlockingConnection,
                                           names: Names) -> None:
    ch = connection.channel()
    ch.confirm_delivery()
    a, b, queue = names.exchange("a"), names.exchange("b"), names.queue()
    ch.exchange_declare(a, "fanout")
    ch.exchange_declare(b, "fanout")
    ch.queue_declare(queue)
    ch.exchange_bind(b, a)
    ch.exchange_bind(a, b)
    ch.queue_bind(queue, b)
    ch.basic_publish(a, "", b"cycle")
    assert routed(ch, [queue]) == {queue: [b"cycle"]}


def test_bind_to_missing_exchange_is_404(connection: pika.BlockingConnection,
                                         names: Names) -> None:
    ch = connection.channel()
    queue, missing = names.queue(), names.exchange("missing")
    ch.queue_declare(queue)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(queue, missing, "k")
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no exchange '{missing}' in vhost '/'"


def test_bind_missing_queue_is_404(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    queue = names.queue("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(queue, "amq.direct", "k")
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no queue '{queue}' in vhost '/'"


def test_bind_to_default_exchange_is_403(connection: pika.BlockingConnection,
                                         names: Names) -> None:
    ch = connection.channel()
    queue = names.queue()
    ch.queue_declare(queue)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_bind(queue, "", "k")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - operation not permitted on the default exchange"
    )


def test_passive_declare_of_default_exchange_is_403(url: str) -> None:
    """Refused even though it exists; the reopened channel gets the same answer each time."""
    raw = RawConnection(url).open()
    try:
        for _ in range(3):
            raw.send_method(1, 40, 10, b"\x00\x00" + shortstr("") + shortstr("direct") + b"\x01"
                            + table())
            assert raw.expect_close(1) == (
                403, "ACCESS_REFUSED - operation not permitted on the default exchange", 40, 10)
            raw.open_channel(1)
    finally:
        raw.close()


@pytest.mark.parametrize("passive", [True, False])
def test_declare_default_exchange_pika(connection: pika.BlockingConnection,
                                       passive: bool) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_declare("", passive=passive)
    assert (info.value.reply_code, info.value.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    assert connection.channel().is_open


def test_bind_checks_the_exchange_before_the_queue(connection: pika.BlockingConnection,
                                                   names: Names) -> None:
    missing_q, missing_x = names.queue("missing"), names.exchange("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_bind(missing_q, missing_x, "k")
    assert info.value.reply_text == f"NOT_FOUND - no exchange '{missing_x}' in vhost '/'"


# RabbitMQ 3.10: unbinding what is not bound succeeds, whatever is missing.
QUEUE_UNBIND_CASES = ["no-binding", "no-queue", "no-exchange", "neither",
                      "queue-deleted", "exchange-deleted"]


@pytest.mark.parametrize("case", QUEUE_UNBIND_CASES)
def test_queue_unbind_when_already_gone_is_ok(connection: pika.BlockingConnection,
                                              names: Names, case: str) -> None:
    ch = connection.channel()
    queue, exchange = names.queue(), names.exchange()
    if case not in ("no-queue", "neither"):
        ch.queue_declare(queue)
    if case not in ("no-exchange", "neither"):
        ch.exchange_declare(exchange, "direct")
    if case.endswith("-deleted"):
        ch.queue_bind(queue, exchange, "k")
        if case == "queue-deleted":
            ch.queue_delete(queue)
        else:
            ch.exchange_delete(exchange)
    ok = ch.queue_unbind(queue, exchange, "k")
    assert ok.method.NAME == "Queue.UnbindOk"
    assert ch.is_open


EXCHANGE_UNBIND_CASES = ["no-binding", "no-source", "no-destination", "neither",
                         "source-deleted", "destination-deleted"]


@pytest.mark.parametrize("case", EXCHANGE_UNBIND_CASES)
def test_exchange_unbind_when_already_gone_is_ok(connection: pika.BlockingConnection,
                                                 names: Names, case: str) -> None:
    ch = connection.channel()
    source, destination = names.exchange("src"), names.exchange("dst")
    if case not in ("no-source", "neither"):
        ch.exchange_declare(source, "direct")
    if case not in ("no-destination", "neither"):
        ch.exchange_declare(destination, "direct")
    if case.endswith("-deleted"):
        ch.exchange_bind(destination, source, "k")
        ch.exchange_delete(source if case == "source-deleted" else destination)
    ok = ch.exchange_unbind(destination, source, "k")
    assert ok.method.NAME == "Exchange.UnbindOk"
    assert ch.is_open


@pytest.mark.parametrize("kind", ["queue", "exchange"])
def test_unbind_from_default_exchange_is_403(connection: pika.BlockingConnection,
                                             names: Names, kind: str) -> None:
    ch = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        if kind == "queue":
            ch.queue_unbind(names.queue(), "", "k")
        else:
            ch.exchange_unbind(names.exchange(), "", "k")
    assert (info.value.reply_code, info.value.reply_text) == (
        403, "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_unbind_exclusive_queue_of_another_connection(
    connection: pika.BlockingConnection, connection_factory: Callable[..., pika.BlockingConnection],
    names: Names,
) -> None:
    """Without a binding there is nothing to check; an existing binding is 405."""
    queue = names.queue()
    owner = connection.channel()
    owner.queue_declare(queue, exclusive=True)
    owner.queue_bind(queue, "amq.direct", "bound")
    other = connection_factory()
    other.channel().queue_unbind(queue, "amq.direct", "never-bound")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        other.channel().queue_unbind(queue, "amq.direct", "bound")
    assert info.value.reply_code == 405
    assert info.value.reply_text.startswith(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}'")
