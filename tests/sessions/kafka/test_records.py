"""Kafka records <-> AMQP stream entries, and idempotent producers' sequence rules, with
plain calls (issue 37)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.codec import FieldTable
from amqplite.protocol.kafka import records as rb
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.mapping import (
    RESERVED,
    Record,
    _direct,
    _generic,
    _to_amqp_table,
    from_amqp,
    produced,
    record_time,
    routing_key_of,
    to_amqp,
)
from amqplite.protocol.properties import (
    BasicProperties,
    decode_properties,
    encode_properties,
    with_header,
)
from amqplite.sessions.kafka.producers import INT32_MAX, Producers, last_sequence

APPENDED_US = 1_800_000_000_123_456

names = st.text(max_size=12).filter(lambda n: n not in RESERVED)
records = st.builds(
    Record,
    offset_delta=st.integers(0, 100),
    timestamp=st.one_of(st.just(-1), st.integers(0, 2**50)),
    key=st.one_of(st.none(), st.binary(max_size=300)),
    value=st.one_of(st.none(), st.binary(max_size=50)),
    headers=st.lists(st.tuples(st.sampled_from(["a", "b", "é"]) | names,
                               st.one_of(st.none(), st.binary(max_size=20))), max_size=6),
)


def grouped(headers: list[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    """Record headers as they come back: a repeated name's values together, at the
    place of its first one (an AMQP table holds each name once)."""
    out: dict[str, list[bytes | None]] = {}
    for k, v in headers:
        out.setdefault(k, []).append(v)
    return [(k, v) for k, vs in out.items() for v in vs]


@given(records, st.integers(0, 2**40))
@settings(max_examples=300, deadline=None)
def test_a_record_comes_back_as_it_was_produced(r: Record, offset: int) -> None:
    rk, props = to_amqp(r)
    # as a stream stores it: the offset header added to the properties
    stored = with_header(props, "x-stream-offset", offset, "l")
    back = from_amqp(offset, APPENDED_US, "", rk, stored, r.value or b"")
    assert back.offset == offset
    assert back.key == r.key
    assert back.value == r.value
    assert back.timestamp == (r.timestamp if r.timestamp >= 0 else APPENDED_US // 1000)
    assert back.headers == grouped(list(r.headers))


@given(records)
@settings(max_examples=300, deadline=None)
def test_the_direct_encoding_is_the_generic_ones(r: Record) -> None:
    assert to_amqp(r) == _to_amqp_table(r)


@given(records, st.sampled_from(["", "amq.direct"]))
@settings(max_examples=300, deadline=None)
def test_the_direct_decoding_is_the_generic_ones(r: Record, exchange: str) -> None:
    rk, props = to_amqp(r)
    stored = with_header(props, "x-stream-offset", 5, "l")
    names = [k for k, _ in r.headers]
    if len(set(names)) == len(names):  # a repeated name is an array: the generic way
        assert _direct(stored) is not None, "a Kafka record's properties take the direct way"
    assert (from_amqp(5, APPENDED_US, exchange, rk, stored, b"v")
            == _generic(5, APPENDED_US, exchange, rk, stored, b"v"))


@given(records, st.sampled_from([None, 1_700_000_000]))
@settings(max_examples=200, deadline=None)
def test_a_records_time_alone_is_the_one_its_record_has(r: Record, seconds: int | None,
                                                        ) -> None:
    """``record_time`` (ListOffsets by time) gives what ``from_amqp`` would, for Kafka's
    shape of properties and for others (an AMQP publisher's timestamp, a content type)."""
    _rk, props = to_amqp(r)
    for raw in (with_header(props, "x-stream-offset", 5, "l"),
                encode_properties(BasicProperties(content_type="text/plain",
                                                  timestamp=seconds))):
        assert record_time(APPENDED_US, raw) == from_amqp(5, APPENDED_US, "", "k", raw,
                                                           b"v").timestamp


def test_a_produced_batchs_records_carry_their_own_times() -> None:
    """What Produce appends (one by one, or expanded later from the stored batch): each
    record's time is the batch's base plus its delta; a batch without times has none."""
    wire = [rb.Record(0, 0, b"k", b"v0", [("h", b"x")]), rb.Record(1, 250, None, None, [])]
    timed = rb.decode_batch(rb.encode_batch(wire, base_timestamp=1_700_000_000_000))
    assert produced(timed) == [Record(0, 1_700_000_000_000, b"k", b"v0", [("h", b"x")]),
                               Record(1, 1_700_000_000_250, None, None, [])]
    untimed = rb.decode_batch(rb.encode_batch(wire, base_timestamp=-1))
    assert [r.timestamp for r in produced(untimed)] == [-1, -1]


def test_other_properties_take_the_generic_way() -> None:
    for props in (BasicProperties(content_type="text/plain"),
                  BasicProperties(headers=FieldTable({"n": 1})),  # an int32 header
                  BasicProperties(headers=FieldTable({"a": [b"x"]}))):
        raw = encode_properties(props)
        assert _direct(raw) is None
        assert from_amqp(0, APPENDED_US, "", "", raw, b"") == _generic(0, APPENDED_US, "", "",
                                                                       raw, b"")
    assert _direct(b"\x20\x00\x00\x00\x00\x09") is None, "a table running past its end"


def test_the_key_is_the_routing_key_when_it_is_a_shortstr() -> None:
    assert routing_key_of(b"user-1") == "user-1"
    assert routing_key_of("ключ".encode()) == "ключ"
    assert routing_key_of(b"\xff\xfe") == ""
    assert routing_key_of(b"k" * 256) == ""
    assert routing_key_of(None) == routing_key_of(b"") == ""
    rk, props = to_amqp(Record(key=b"\xff", value=b"v", timestamp=2000))
    p = decode_properties(props)
    assert rk == "" and p.headers == {"x-kafka-key": b"\xff"} and p.timestamp == 2
    assert p.delivery_mode == 2


def test_a_record_cannot_forge_the_mappings_headers() -> None:
    rk, props = to_amqp(Record(key=None, value=b"v", timestamp=5000,
                               headers=[("x-kafka-key", b"forged"),
                                        ("x-stream-offset", b"9")]))
    back = from_amqp(0, APPENDED_US, "", rk, props, b"v")
    assert back.key is None and back.headers == []


def test_a_header_name_no_table_holds_is_refused() -> None:
    try:
        to_amqp(Record(value=b"v", headers=[("n" * 256, b"x")]))
    except ValueError:
        pass
    else:
        raise AssertionError("a 256-byte header name was encoded")


def test_amqp_headers_of_any_type_read_as_bytes() -> None:
    props = encode_properties(BasicProperties(headers=FieldTable({
        "flag": True, "n": -3, "f": 1.5, "nested": {"a": 1, "b": [b"\xff", None]}, "arr": [1, 2],
        "x-kafka-timestamp": 1234})))
    back = from_amqp(3, APPENDED_US, "amq.direct", "rk", props, b"body")
    assert back.key == b"rk", "an exchange routed it: its routing key is the key"
    assert back.timestamp == 1234
    assert dict(back.headers) == {"flag": b"true", "n": b"-3", "f": b"1.5",
                                  "nested": b'{"a":1,"b":["\\\\xff",null]}', "arr": b"[1,2]"}


# -------------------------------------------------------------- producers
def test_sequences_wrap_after_int32_max() -> None:
    assert last_sequence(INT32_MAX - 1, 3) == 0
    p = Producers(1_700_000_000)
    _e, pid, _ep = p.init_producer_id(None)
    assert pid == 1_700_000_000 << 22
    assert p.check(1, pid, 0, INT32_MAX - 1, 2) == (ErrorCode.NONE, None)
    p.appended(1, pid, 0, INT32_MAX - 1, 2, 10, 0.0)
    assert p.check(1, pid, 0, 0, 1) == (ErrorCode.NONE, None), "0 follows INT32_MAX"
    assert p.check(1, pid, 0, 1, 1)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.check(1, -1, -1, -1, 5) == (ErrorCode.NONE, None), "not idempotent: no check"


def test_ids_of_a_later_start_never_repeat_earlier_ones() -> None:
    first = Producers(1_700_000_000)
    ids = {first.init_producer_id(None)[1] for _ in range(1000)}
    later = Producers(1_700_000_001)
    assert later.init_producer_id(None)[1] > max(ids)


def test_idle_producers_expire_and_a_failed_batch_is_forgotten() -> None:
    p = Producers(0)
    p.appended(1, 7, 0, 0, 1, 0, now=100.0)
    p.appended(2, 7, 0, 0, 1, 0, now=200.0)
    assert p.expire(100.0 + 86_400) == 1
    assert set(p.entries) == {(2, 7)}
    p.forget(2, 7)
    assert p.check(2, 7, 0, 0, 1) == (ErrorCode.NONE, None), "the retry is appended again"
    p.appended(3, 7, 0, 0, 1, 0, now=0.0)
    p.forget_queue(3)
    assert not p.entries
