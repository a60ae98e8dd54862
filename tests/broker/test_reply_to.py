"""Direct reply-to in the pure broker: names, routing, and cleanup."""

from __future__ import annotations

import pytest

from amqplite.broker.core import REPLY_TO, Broker
from amqplite.broker.effects import Deliver, Return
from amqplite.protocol.errors import ChannelError
from amqplite.protocol.properties import (
    BasicProperties,
    decode_properties,
    encode_properties,
    reply_to_of,
    with_reply_to,
)
from tests.broker.conftest import TRANSIENT, deliveries, session_channel

REQUEST = encode_properties(BasicProperties(content_type="text/plain", headers={"k": 1},
                                            reply_to=REPLY_TO, correlation_id="c"))


def _request_name(b: Broker, ch: object) -> str:
    b.queue_declare(ch, "work")  # type: ignore[arg-type]
    b.basic_publish(ch, "", "work", REQUEST, b"req")  # type: ignore[arg-type]
    q = b.vhosts["/"].queues["work"]
    name = reply_to_of(q.ready.peek().message.properties_raw)
    assert name is not None
    b.queue_purge(ch, "work")  # type: ignore[arg-type]
    return name


def test_with_reply_to_keeps_other_fields() -> None:
    raw = with_reply_to(REQUEST, "amq.rabbitmq.reply-to.x")
    p = decode_properties(raw)
    assert (p.reply_to, p.content_type, p.correlation_id) == ("amq.rabbitmq.reply-to.x",
                                                              "text/plain", "c")
    assert p.headers == {"k": 1}
    assert reply_to_of(TRANSIENT) is None


def test_names_are_private_per_channel(broker: Broker) -> None:
    _, a = session_channel(broker)
    _, b = session_channel(broker)
    broker.basic_consume(a, REPLY_TO, "ra", no_ack=True)
    broker.basic_consume(b, REPLY_TO, "rb", no_ack=True)
    na, nb = _request_name(broker, a), _request_name(broker, b)
    assert na != nb and na.startswith(REPLY_TO + ".") and nb.startswith(REPLY_TO + ".")
    assert len(na.rsplit(".", 1)[1]) >= 24  # the random secret
    _, replier = session_channel(broker)
    broker.effects.clear()
    broker.basic_publish(replier, "", nb, TRANSIENT, b"for b")
    (d,) = deliveries(broker)
    assert (d.channel, d.consumer_tag, d.message.body) == (b, "rb", b"for b")


def test_reply_unroutable_after_channel_close(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.basic_consume(ch, REPLY_TO, "r", no_ack=True)
    name = _request_name(broker, ch)
    broker.close_channel(ch)
    assert broker.reply_channels == {}
    _, replier = session_channel(broker)
    broker.effects.clear()
    res = broker.basic_publish(replier, "", name, TRANSIENT, b"late", mandatory=True)
    assert not res.routed
    (r,) = broker.effects
    assert isinstance(r, Return) and (r.reply_code, r.reply_text) == (312, "NO_ROUTE")


def test_cancel_then_new_consumer_gets_a_new_name(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.basic_consume(ch, REPLY_TO, "r", no_ack=True)
    first = _request_name(broker, ch)
    broker.basic_cancel(ch, "r")
    with pytest.raises(ChannelError) as exc:
        broker.basic_publish(ch, "", "work", REQUEST, b"req")
    assert exc.value.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"
    broker.basic_consume(ch, REPLY_TO, "r2", no_ack=True)
    assert _request_name(broker, ch) != first
    assert not any(isinstance(e, Deliver) for e in broker.effects)
