"""Methods and content properties: round trips and pamqp as an oracle."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands as pc
from pamqp import frame as pframe
from pamqp import header as pheader

from amqplite.protocol import methods as m
from amqplite.protocol import streamrecord
from amqplite.protocol.codec import FieldTable, to_plain
from amqplite.protocol.errors import AMQPError, FrameSyntaxError
from amqplite.protocol.frames import encode_frame
from amqplite.protocol.methods import METHODS, Method, decode_method, encode_method
from amqplite.protocol.properties import (
    BasicProperties,
    decode_properties,
    delivery_mode_of,
    encode_properties,
    expiration_of,
    headers_of,
    long_header_splice,
    message_id_of,
    priority_of,
    with_header,
    with_long_header,
)
from tests.protocol.strategies import FAST, FAST_PER_METHOD, method_instances, properties

ALL_METHODS = sorted(METHODS.values(), key=lambda c: (c.CLASS_ID, c.METHOD_ID))
NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyzABC0123456789-_.:"


def test_method_table_is_complete() -> None:
    names = {c.NAME for c in ALL_METHODS}
    for expected in [
        "connection.blocked", "connection.unblocked", "connection.update-secret",
        "connection.update-secret-ok", "exchange.bind", "exchange.unbind-ok", "basic.nack",
        "confirm.select", "confirm.select-ok", "tx.rollback-ok", "basic.recover-async",
    ]:
        assert expected in names
    assert len(ALL_METHODS) == 64
    assert m.ExchangeUnbindOk.METHOD_ID == 51  # RabbitMQ's id, not 41
    assert m.BasicPublish.HAS_CONTENT and not m.BasicPublish.SYNCHRONOUS
    assert m.QueueDeclare.SYNCHRONOUS and m.QueueDeclare.NAME == "queue.declare"


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda c: c.NAME)
def test_every_method_round_trips(cls: type[Method]) -> None:
    @FAST_PER_METHOD
    @given(method_instances(cls, simple_tables=True))
    def check(method: Method) -> None:
        raw = encode_method(method)
        assert raw[:4] == struct.pack(">HH", cls.CLASS_ID, cls.METHOD_ID)
        decoded = decode_method(raw)
        assert decoded == method
        assert encode_method(decoded) == raw

    check()


# pamqp uses pre-0-9-1 names for a few fields.
_PAMQP_NAMES = {"no_wait": "nowait", "type": "exchange_type"}


def _pamqp_class(cls: type[Method]) -> Any:
    klass, _, meth = cls.NAME.partition(".")
    name = "".join(part.capitalize() for part in meth.split("-"))
    return getattr(getattr(pc, klass.capitalize()), name)


def _ours_to_pamqp_kwargs(method: Method) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind in type(method).WIRE:
        if name.startswith("reserved"):
            continue
        value = getattr(method, name)
        if kind == "longstr":
            value = value.decode("latin-1")
        if kind == "table":
            value = to_plain(value)
        out[_PAMQP_NAMES.get(name, name)] = value
    return out


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda c: c.NAME)
def test_methods_against_pamqp(cls: type[Method]) -> None:
    pcls = _pamqp_class(cls)

    @FAST_PER_METHOD
    @given(method_instances(cls, NAME_ALPHABET, simple_tables=True))
    def check(method: Method) -> None:
        ours = encode_method(method)
        theirs = pframe.marshal(pcls(**_ours_to_pamqp_kwargs(method)), 1)
        if cls not in (m.ChannelOpen, m.ChannelOpenOk):  # pamqp fills reserved with "0"
            assert theirs[7:-1] == ours  # identical method payloads
        _, _, decoded = pframe.unmarshal(encode_frame(1, 1, ours))
        for key, value in _ours_to_pamqp_kwargs(method).items():
            assert getattr(decoded, key) == value, key
        assert decode_method(theirs[7:-1]) == method

    check()


def test_unknown_method_is_not_implemented() -> None:
    with pytest.raises(AMQPError) as info:
        decode_method(b"\x00\x3c\x00\x99")
    assert info.value.reply_code == 540
    assert (info.value.class_id, info.value.method_id) == (60, 0x99)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x3c",
        b"\x00\x3c\x00\x28\x00\x00\x05ab",  # shortstr runs past the end
        b"\x00\x3c\x00\x28\x00\x00\x00\x01",  # routing key length with no data
        b"\x00\x32\x00\x0a\x00\x00\x01q\x00\x00\x00\x00\x09",  # table beyond payload
        b"\x00\x32\x00\x0a\x00\x00\x01\xff\x00\x00\x00\x00\x00",  # bad utf-8 name
    ],
)
def test_malformed_method_arguments(raw: bytes) -> None:
    with pytest.raises(FrameSyntaxError):
        decode_method(raw)


# ---------------------------------------------------------------- properties


@FAST
@given(properties())
def test_properties_round_trip(props: BasicProperties) -> None:
    raw = encode_properties(props)
    decoded = decode_properties(raw)
    assert decoded == props
    assert encode_properties(decoded) == raw
    assert delivery_mode_of(raw) == props.delivery_mode
    assert priority_of(raw) == props.priority
    assert expiration_of(raw) == props.expiration
    assert message_id_of(raw) == props.message_id
    headers = headers_of(raw)
    assert headers == props.headers
    if headers is not None:
        assert headers.tags == (props.headers or FieldTable()).tags


# pamqp treats "" as an absent property, so only non-empty strings here.
_pamqp_text = st.none() | st.text(alphabet=NAME_ALPHABET, min_size=1, max_size=20)


@FAST
@given(
    content_type=_pamqp_text,
    headers=st.none() | st.dictionaries(st.text(alphabet="abc", min_size=1, max_size=3),
                                        st.integers(-5, 5) | st.text(max_size=4), max_size=3),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
    correlation_id=_pamqp_text,
    expiration=st.none() | st.integers(0, 10**6).map(str),
    message_id=_pamqp_text,
    timestamp=st.none() | st.integers(0, 2**32 - 1),
    app_id=_pamqp_text,
)
def test_properties_against_pamqp(**fields: Any) -> None:
    kwargs = dict(fields)
    if kwargs["timestamp"] is not None:
        kwargs["timestamp"] = datetime.datetime.fromtimestamp(kwargs["timestamp"], datetime.UTC)
    header = pheader.ContentHeader(0, 10, pc.Basic.Properties(**kwargs))
    raw = pframe.marshal(header, 1)[7 + 12 : -1]
    ours = decode_properties(raw)
    for key, value in fields.items():
        got = getattr(ours, key)
        assert (to_plain(got) if key == "headers" else got) == value, key
    assert encode_properties(ours) == raw
    assert delivery_mode_of(raw) == fields["delivery_mode"]
    # and the other way round
    _, _, frame = pframe.unmarshal(
        encode_frame(2, 1, b"\x00\x3c\x00\x00" + (10).to_bytes(8, "big") + raw)
    )
    assert frame.properties.delivery_mode == fields["delivery_mode"]
    assert frame.properties.message_id == fields["message_id"]


def test_property_helpers_without_full_decode() -> None:
    raw = encode_properties(BasicProperties(content_type="a/b", headers=FieldTable(x=1),
                                            delivery_mode=2, priority=7, expiration="60000"))
    assert delivery_mode_of(raw) == 2
    assert priority_of(raw) == 7
    assert expiration_of(raw) == "60000"
    assert message_id_of(raw) is None
    assert delivery_mode_of(b"\x10\x00\x01") == 1
    assert delivery_mode_of(b"\x00\x00") is None


def test_binary_shortstr_properties_survive() -> None:
    raw = b"\x00\x80\x02\xff\xfe"  # message_id = two non-UTF-8 bytes
    props = decode_properties(raw)
    assert encode_properties(props) == raw


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\x80\x00\x05ab", b"\x20\x00\x00\x00\x00\x09",
                                 b"\x10\x00"])
def test_malformed_properties(raw: bytes) -> None:
    with pytest.raises(FrameSyntaxError):
        decode_properties(raw)


@FAST
@given(properties(), st.integers(-(2**63), 2**63 - 1),
       st.sampled_from(["x-stream-offset", "x-other"]), st.booleans())
def test_spliced_long_header_equals_the_full_re_encode(
        props: BasicProperties, value: int, name: str, present: bool) -> None:
    """The splice used at every stream append gives the bytes with_header gives, also
    when the key is already there (then it is with_header)."""
    if present:
        props.headers = (props.headers or FieldTable()).copy()
        props.headers.set(name, 7, "l")
    raw = encode_properties(props)
    assert with_long_header(raw, name, value) == with_header(raw, name, value, "l")
    assert decode_properties(with_long_header(raw, name, value)).headers[name] == value
    # the parts a stream caches per properties: any value spliced between them
    parts = long_header_splice(raw, name)
    if present:  # (a key's bytes inside the table also leave it to the full decode)
        assert parts is None
    if parts is not None:
        before, after = parts
        spliced = before + struct.pack(">q", value) + after
        assert spliced == with_header(raw, name, value, "l")
        route = streamrecord.route("ex", "rk")
        assert streamrecord.pack_spliced(5, 6, route, before, value, after, b"body") == \
            streamrecord.pack(5, 6, route, spliced, b"body")


def test_spliced_long_header_leaves_odd_bytes_to_the_full_decode() -> None:
    with pytest.raises(FrameSyntaxError):
        with_long_header(b"\x20\x00\x00\x00\x00\x09", "x-stream-offset", 1)  # table overruns
    assert with_long_header(b"\x00\x00", "k", 1) == with_header(b"\x00\x00", "k", 1, "l")
