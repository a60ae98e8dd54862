"""x-recent-history exchanges (RabbitMQ's rabbitmq_recent_history_exchange plugin).

The exchange routes like fanout and keeps its last N messages (routed or not);
every new binding receives them. A re-issued binding receives nothing, which a
marker published after it shows: the marker is the first message to arrive.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._util import drain, wait_count
from conformance.conftest import Names

KIND = "x-recent-history"


def _publish(ch: BlockingChannel, exchange: str, bodies: list[str],
             headers: dict[str, object] | None = None) -> None:
    for i, body in enumerate(bodies):
        ch.basic_publish(exchange, f"key-{i}", body.encode(),
                         pika.BasicProperties(headers=headers))


def _bodies(ch: BlockingChannel, queue: str, n: int) -> list[bytes]:
    got = [body for _m, _p, body in drain(ch, queue, n)]
    wait_count(ch, queue, 0)
    return got


def _queue(ch: BlockingChannel, names: Names, suffix: str) -> str:
    name = names.queue(suffix)
    ch.queue_declare(name)
    return name


def test_new_binding_gets_last_n_oldest_first(channel: BlockingChannel, names: Names) -> None:
    x = names.exchange()
    channel.exchange_declare(x, KIND, arguments={"x-recent-history-length": 3})
    _publish(channel, x, [f"m{i}" for i in range(5)])
    q = _queue(channel, names, "q")
    channel.queue_bind(q, x, "any-key")
    got = drain(channel, q, 3)
    assert [b for _m, _p, b in got] == [b"m2", b"m3", b"m4"]
    # each keeps its exchange and routing key
    assert [(m.exchange, m.routing_key) for m, _p, _b in got] == [
        (x, "key-2"), (x, "key-3"), (x, "key-4")]
    wait_count(channel, q, 0)


def test_default_length_is_20(channel: BlockingChannel, names: Names) -> None:
    x = names.exchange()
    channel.exchange_declare(x, KIND)
    _publish(channel, x, [str(i) for i in range(25)])
    q = _queue(channel, names, "q")
    channel.queue_bind(q, x, "")
    assert _bodies(channel, q, 20) == [str(i).encode() for i in range(5, 25)]


def test_history_is_per_exchange_across_keys_and_routes_like_fanout(
        channel: BlockingChannel, names: Names) -> None:
    x = names.exchange()
    channel.exchange_declare(x, KIND)
    live = _queue(channel, names, "live")
    channel.queue_bind(live, x, "one-key")
    _publish(channel, x, ["a", "b"])  # keys key-0, key-1: fanout ignores them
    assert _bodies(channel, live, 2) == [b"a", b"b"]
    q = _queue(channel, names, "late")
    channel.queue_bind(q, x, "other-key")
    assert _bodies(channel, q, 2) == [b"a", b"b"]
    # a second binding of the same queue with another key is a new binding
    channel.queue_bind(q, x, "third-key")
    assert _bodies(channel, q, 2) == [b"a", b"b"]


def test_rebinding_the_same_binding_delivers_nothing(channel: BlockingChannel,
                                                     names: Names) -> None:
    x = names.exchange()
    channel.exchange_declare(x, KIND)
    _publish(channel, x, ["a"])
    q = _queue(channel, names, "q")
    channel.queue_bind(q, x, "k")
    assert _bodies(channel, q, 1) == [b"a"]
    channel.queue_bind(q, x, "k")
    channel.basic_publish("", q, b"marker")
    assert _bodies(channel, q, 1) == [b"marker"]


def test_no_store_header_routes_but_is_not_kept(channel: BlockingChannel,
                                               names: Names) -> None:
    x = names.exchange()
    channel.exchange_declare(x, KIND)
    live = _queue(channel, names, "live")
    channel.queue_bind(live, x, "")
    _publish(channel, x, ["kept"])
    _publish(channel, x, ["not-kept"], headers={"x-recent-history-no-store": True})
    assert _bodies(channel, live, 2) == [b"kept", b"not-kept"]
    q = _queue(channel, names, "late")
    channel.queue_bind(q, x, "")
    assert _bodies(channel, q, 1) == [b"kept"]


def test_unroutable_message_is_kept(channel: BlockingChannel, names: Names) -> None:
    x = names.exchange()
    channel.exchange_declare(x, KIND)
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(x, "", b"nobody", mandatory=True)
    q = _queue(channel, names, "q")
    channel.queue_bind(q, x, "")
    assert _bodies(channel, q, 1) == [b"nobody"]


def test_deleting_the_exchange_drops_its_history(channel: BlockingChannel,
                                                 names: Names) -> None:
    x = names.exchange()
    channel.exchange_declare(x, KIND)
    _publish(channel, x, ["old"])
    channel.exchange_delete(x)
    channel.exchange_declare(x, KIND)
    q = _queue(channel, names, "q")
    channel.queue_bind(q, x, "")
    channel.basic_publish("", q, b"marker")
    assert _bodies(channel, q, 1) == [b"marker"]


def test_exchange_binding_gets_history_newest_first(channel: BlockingChannel,
                                                    names: Names) -> None:
    """Through an exchange-to-exchange binding the plugin hands the history over
    newest first (RabbitMQ 3.10.8); it is routed by the destination exchange."""
    x = names.exchange("src")
    dst = names.exchange("dst")
    channel.exchange_declare(x, KIND)
    channel.exchange_declare(dst, "direct")
    _publish(channel, x, ["a", "b", "c"])  # keys key-0, key-1, key-2
    q = _queue(channel, names, "q")
    q_other = _queue(channel, names, "other")
    channel.queue_bind(q, dst, "key-0")
    channel.queue_bind(q, dst, "key-2")
    channel.queue_bind(q_other, dst, "key-1")
    channel.exchange_bind(dst, x, "ignored")
    assert _bodies(channel, q, 2) == [b"c", b"a"]
    assert _bodies(channel, q_other, 1) == [b"b"]


@pytest.mark.parametrize(("value", "shown"), [
    (0, "0"), (-1, "-1"), ("x", '<<"x">>'), (True, "true"),
])
def test_bad_length_is_406(channel: BlockingChannel, names: Names, value: object,
                           shown: str) -> None:
    x = names.exchange()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.exchange_declare(x, KIND, arguments={"x-recent-history-length": value})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - Invalid argument {shown}, 'x-recent-history-length' "
        "must be a positive integer")


def test_a_message_arriving_through_an_exchange_binding_is_kept(channel: BlockingChannel,
                                                                names: Names) -> None:
    src = names.exchange("src")
    x = names.exchange("rh")
    channel.exchange_declare(src, "fanout")
    channel.exchange_declare(x, KIND)
    channel.exchange_bind(x, src, "")
    channel.basic_publish(src, "k", b"via-binding")
    q = _queue(channel, names, "q")
    channel.queue_bind(q, x, "")
    got = drain(channel, q, 1)
    assert [(m.exchange, m.routing_key, b) for m, _p, b in got] == [(src, "k", b"via-binding")]
    wait_count(channel, q, 0)


def test_dead_letters_are_kept(channel: BlockingChannel, names: Names) -> None:
    """A message dead-lettered to a recent-history exchange is kept like a publish,
    with its x-death header, the exchange's name and its original routing key."""
    x = names.exchange()
    channel.exchange_declare(x, KIND)
    live = _queue(channel, names, "live")
    channel.queue_bind(live, x, "")
    src = names.queue("src")
    channel.queue_declare(src, arguments={"x-dead-letter-exchange": x})
    channel.basic_publish("", src, b"dead", pika.BasicProperties(headers={"a": 1}))
    (method, _p, _b), = drain(channel, src, 1, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    wait_count(channel, live, 1)  # dead-lettered (and routed) by now
    late = _queue(channel, names, "late")
    channel.queue_bind(late, x, "")
    (m, props, body), = drain(channel, late, 1)
    assert body == b"dead"
    assert (m.exchange, m.routing_key) == (x, src)
    assert props.headers["a"] == 1
    death = props.headers["x-death"][0]
    assert (death["queue"], death["reason"]) == (src, "rejected")
    wait_count(channel, late, 0)
