"""MQTT 5 properties <-> AMQP properties, as RabbitMQ 3.13's plugin maps them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from amqplite.protocol.codec import FieldTable
from amqplite.protocol.mqtt.mapping import amqp_properties, mqtt_properties
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties

_mqtt_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                     max_size=20)


def test_mqtt_to_amqp() -> None:
    props = Properties(content_type="application/json", correlation_data=b"req-1",
                       response_topic="replies/me", payload_format_indicator=1,
                       user_properties=(("k", "v"), ("k", "second"), ("x-mqtt-publisher", "forged")))
    p = decode_properties(amqp_properties(1, props, "client-a"))
    assert p.delivery_mode == 2
    assert p.content_type == "application/json"
    assert p.correlation_id == "req-1"
    assert p.headers is not None
    assert p.headers["k"] == "v"  # the first of a repeated name
    assert p.headers["x-reply-to-topic"] == "replies.me"
    assert p.reply_to == "replies.me"  # an AMQP service answers to amq.topic with it
    assert p.headers["x-mqtt-publisher"] == "client-a"


def test_binary_correlation_data_goes_to_a_header() -> None:
    p = decode_properties(amqp_properties(0, Properties(correlation_data=b"\xff\x00"), "c"))
    assert p.correlation_id is None and p.delivery_mode == 1
    assert p.headers is not None and p.headers["x-correlation-id"] == b"\xff\x00"
    back = mqtt_properties(amqp_properties(0, Properties(correlation_data=b"\xff\x00"), "c"))
    assert back.properties.correlation_data == b"\xff\x00" and back.publisher == "c"


@given(st.none() | _mqtt_text, st.none() | st.binary(max_size=300),
       st.none() | _mqtt_text.filter(lambda t: t and "+" not in t and "#" not in t),
       st.sampled_from([None, 0, 1]),
       st.lists(st.tuples(_mqtt_text.filter(lambda t: not t.startswith("x-")), _mqtt_text),
                max_size=4, unique_by=lambda kv: kv[0]))
def test_mqtt_round_trip(content_type: str | None, corr: bytes | None, response: str | None,
                         fmt: int | None, user: list[tuple[str, str]]) -> None:
    """MQTT -> AMQP -> MQTT keeps what a subscriber sees (PFI 0 is its absence)."""
    props = Properties(content_type=content_type, correlation_data=corr, response_topic=response,
                       payload_format_indicator=fmt, user_properties=tuple(user))
    mapped = mqtt_properties(amqp_properties(1, props, "me"))
    back = mapped.properties
    assert mapped.publisher == "me"
    assert back.content_type == content_type
    assert back.correlation_data == corr
    assert back.response_topic == response
    assert back.payload_format_indicator == (1 if fmt == 1 else None)
    assert dict(back.user_properties) == dict(user)


def test_amqp_to_mqtt() -> None:
    headers = FieldTable({"s": "text", "n": 42, "f": 1.5, "t": True, "v": None,
                          "bin": b"\xff", "tbl": {"a": 1}, "arr": [1, 2],
                          "x-reply-to-topic": "a.b"})
    raw = encode_properties(BasicProperties(content_type="text/plain", correlation_id="c-9",
                                            headers=headers, delivery_mode=2))
    mapped = mqtt_properties(raw)
    props = mapped.properties
    assert mapped.publisher is None
    assert props.content_type == "text/plain"
    assert props.correlation_data == b"c-9"
    assert props.response_topic == "a/b"
    assert dict(props.user_properties) == {"s": "text", "n": "42", "f": "1.5", "t": "true",
                                           "v": ""}


def test_amqp_reply_to_becomes_the_response_topic() -> None:
    """An AMQP requester's reply_to (a routing key on the MQTT exchange) is what an
    MQTT 5 responder answers to; the header wins when both are there; direct
    reply-to (amq.rabbitmq.reply-to) names no topic."""
    def topic(**kw: Any) -> str | None:
        return mqtt_properties(encode_properties(BasicProperties(**kw))).properties.response_topic

    assert topic(reply_to="svc.replies.7") == "svc/replies/7"
    assert topic(reply_to="x.y", headers=FieldTable({"x-reply-to-topic": "a.b"})) == "a/b"
    assert topic(reply_to="amq.rabbitmq.reply-to.g2dk") is None


def test_amqp_wildcard_reply_topic_is_not_a_response_topic() -> None:
    raw = encode_properties(BasicProperties(headers=FieldTable({"x-reply-to-topic": "a.#"})))
    assert mqtt_properties(raw).properties == EMPTY


def test_message_expiry_and_retain() -> None:
    """Expiry is the AMQP expiration from the publish time; what is sent back is what
    is left of it. The retain flag travels in a header."""
    raw = amqp_properties(1, Properties(message_expiry_interval=30), "c", retain=True,
                          now=1000.0)
    p = decode_properties(raw)
    assert (p.expiration, p.timestamp) == ("30000", 1000)
    mapped = mqtt_properties(raw)
    assert mapped.retain and mapped.properties == EMPTY
    assert mapped.at(1010.2).message_expiry_interval == 20
    assert mapped.at(2000.0).message_expiry_interval == 1
