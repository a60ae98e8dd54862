"""The per-message shortcuts give what the general code gives (see docs/internals.md)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.broker.core import Broker
from amqplite.broker.model import Message
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from tests.protocol.strategies import hostile_properties, properties


@settings(max_examples=300, deadline=None)
@given(properties())
def test_persistent_flag_and_message_id_read_from_the_flags(props: BasicProperties) -> None:
    raw = encode_properties(props)
    m = Message(7, "ex", "rk", raw, b"body")
    assert m.persistent is (props.delivery_mode == 2)
    assert m.message_id == (props.message_id or "amq-7")


@settings(max_examples=300, deadline=None)
@given(hostile_properties())
def test_shortcuts_fail_or_agree_where_the_full_decode_does(raw: bytes) -> None:
    try:
        props = decode_properties(raw)
    except Exception:
        return  # refused at the door: never reaches a Message
    m = Message(3, "", "q", raw, b"")
    assert m.persistent is (props.delivery_mode == 2)


@given(st.sampled_from(["q", "absent", ""]))
def test_default_exchange_routes_by_queue_name(name: str) -> None:
    b = Broker()
    ch = b.open_channel(b.open_session("guest", "/"), 1)
    b.queue_declare(ch, "q")
    vh = b.vhost("/")
    msg = Message(1, "", name, b"\x00\x00", b"")
    expected = [vh.queues["q"]] if name == "q" else []
    assert list(vh.route(vh.exchanges[""], name, msg).queues) == expected
    assert list(vh._walk(vh.exchanges[""], name, msg).queues) == expected


def test_one_queue_publish_results_are_shared_but_correct() -> None:
    b = Broker()
    ch = b.open_channel(b.open_session("guest", "/"), 1)
    b.queue_declare(ch, "t")
    b.queue_declare(ch, "d", durable=True)
    transient = b.basic_publish(ch, "", "t", b"\x00\x00", b"x")
    persistent = b.basic_publish(ch, "", "d", encode_properties(BasicProperties(delivery_mode=2)),
                                 b"x")
    nowhere = b.basic_publish(ch, "", "nope", b"\x00\x00", b"x")
    assert (transient.routed, transient.stored, transient.rejected) == (True, False, False)
    assert (persistent.routed, persistent.stored, persistent.rejected) == (True, True, False)
    assert (nowhere.routed, nowhere.stored) == (False, False)
