"""Topic permissions (RabbitMQ's topic authorisation, set through the management API's
``/api/topic-permissions``): a publish to a topic exchange needs its routing key to
match the user's write expression, a bind or unbind from one the binding key to match
the read expression; a refusal closes the channel with 403 and the texts below
(RabbitMQ 3.10.8's, the same for write and read)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pika.exceptions
import pytest

from conformance.conftest import Names, amqp_url, connect


@pytest.fixture
def protected(names: Names, management: httpx.Client) -> Iterator[tuple[str, str, str]]:
    """A topic exchange of this test with a topic permission for the suite's user:
    write keys starting ``a.``, read keys starting ``b.``; (exchange, user, vhost)."""
    params = pika.URLParameters(amqp_url())
    creds = params.credentials
    assert isinstance(creds, pika.PlainCredentials)
    user, vhost = creds.username, params.virtual_host
    exchange = names.exchange("topic")
    conn = connect()
    conn.channel().exchange_declare(exchange, "topic")
    conn.close()
    url = f"/api/topic-permissions/{quote(vhost, safe='')}/{quote(user, safe='')}"
    r = management.put(url, json={"exchange": exchange, "write": "^a\\.", "read": "^b\\."})
    assert r.status_code in (201, 204), r.text
    yield exchange, user, vhost
    # RabbitMQ 3.10 ignores ?exchange= and clears all of the user's; nothing else in the
    # suite sets any
    assert management.delete(url, params={"exchange": exchange}).status_code == 204


def refusal(key: str, exchange: str, user: str, vhost: str) -> tuple[int, str]:
    return 403, (f"ACCESS_REFUSED - access to topic '{key}' in exchange '{exchange}' in "
                 f"vhost '{vhost}' refused for user '{user}'")


def attempt(step: Callable[[Any], None],
            connection: Callable[[], pika.BlockingConnection] = connect
            ) -> tuple[int, str] | None:
    """Run ``step`` on a fresh channel of a fresh ``connection()``; the channel error it
    met, or None (a basic.qos round trip after it makes a refused publish show)."""
    conn = connection()
    try:
        ch = conn.channel()
        try:
            step(ch)
            ch.basic_qos(prefetch_count=0)
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code, exc.reply_text
        return None
    finally:
        if conn.is_open:
            conn.close()


def test_publish_checks_write_expression(protected: tuple[str, str, str]) -> None:
    x, user, vhost = protected
    assert attempt(lambda ch: ch.basic_publish(x, "x.y", b"m")) == refusal("x.y", x, user,
                                                                          vhost)
    assert attempt(lambda ch: ch.basic_publish(x, "a.y", b"m")) is None
    # the read expression is not the one a publish needs
    assert attempt(lambda ch: ch.basic_publish(x, "b.y", b"m")) == refusal("b.y", x, user,
                                                                          vhost)


def test_bind_and_unbind_check_read_expression(protected: tuple[str, str, str],
                                               names: Names) -> None:
    x, user, vhost = protected

    def bind(key: str, unbind: bool = False) -> Callable[[Any], None]:
        def step(ch: Any) -> None:
            q = ch.queue_declare("", exclusive=True).method.queue
            (ch.queue_unbind if unbind else ch.queue_bind)(q, x, key)
        return step

    assert attempt(bind("a.#")) == refusal("a.#", x, user, vhost)
    assert attempt(bind("b.*")) is None
    assert attempt(bind("x.y", unbind=True)) == refusal("x.y", x, user, vhost)
    dest = names.exchange("dest")
    conn = connect()
    conn.channel().exchange_declare(dest, "fanout")
    conn.close()
    assert attempt(lambda ch: ch.exchange_bind(dest, x, "q.r")) == refusal("q.r", x, user,
                                                                          vhost)
    assert attempt(lambda ch: ch.exchange_bind(dest, x, "b.r")) is None


def test_other_exchanges_are_not_checked(protected: tuple[str, str, str],
                                         names: Names) -> None:
    """Only the exchange named in the permission, and only a topic one, is checked."""
    other = names.exchange("other")
    conn = connect()
    conn.channel().exchange_declare(other, "topic")
    conn.close()
    assert attempt(lambda ch: ch.basic_publish(other, "x.y", b"m")) is None
    assert attempt(lambda ch: ch.basic_publish("amq.direct", "x.y", b"m")) is None
