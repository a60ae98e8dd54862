"""Field values and tables: lossless round trips, inference, malformed input."""

from __future__ import annotations

import contextlib
import copy
import datetime
import decimal
import pickle
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import decode as pdecode
from pamqp import encode as pencode

from amqplite.protocol import codec
from amqplite.protocol.codec import (
    FieldArray,
    FieldTable,
    Timestamp,
    decode_table,
    decode_value,
    encode_table,
    encode_value,
    infer_tag,
    to_plain,
)
from amqplite.protocol.errors import FrameSyntaxError
from tests.protocol.strategies import FAST, field_tables, plain_values, scalar_tagged, tagged_values


@FAST
@given(scalar_tagged())
def test_every_scalar_tag_round_trips(tagged: tuple[str, Any]) -> None:
    tag, value = tagged
    raw = encode_value(value, tag)
    assert raw[0] == ord(tag)
    decoded, end = decode_value(raw)
    assert end == len(raw)
    assert decoded == value
    assert type(decoded) is type(value) or tag in "SDt"
    assert encode_value(decoded, tag) == raw


@FAST
@given(tagged_values())
def test_nested_values_round_trip_byte_for_byte(tagged: tuple[str, Any]) -> None:
    tag, value = tagged
    raw = encode_value(value, tag)
    decoded, end = decode_value(raw)
    assert end == len(raw)
    assert decoded == value
    # Re-encoding with the *remembered* tags (not the ones we built with) is exact.
    table = FieldTable()
    table.set("v", decoded, tag)
    assert encode_table(table)[5 + 1 :] == raw


@FAST
@given(field_tables())
def test_tables_round_trip(table: FieldTable) -> None:
    raw = encode_table(table)
    decoded, end = decode_table(raw)
    assert end == len(raw)
    assert decoded == table
    assert list(decoded) == list(table)  # key order kept
    assert decoded.tags == table.tags
    assert encode_table(decoded) == raw


@FAST
@given(field_tables(), st.binary(max_size=8), st.binary(max_size=8))
def test_decode_table_at_offset(table: FieldTable, before: bytes, after: bytes) -> None:
    raw = encode_table(table)
    decoded, end = decode_table(before + raw + after, len(before))
    assert end == len(before) + len(raw)
    assert encode_table(decoded) == raw


@FAST
@given(plain_values())
def test_plain_values_infer_tags_and_round_trip(value: Any) -> None:
    raw = encode_value(value)
    decoded, _ = decode_value(raw)
    assert to_plain(decoded) == to_plain(_normalise(value))
    assert encode_value(decoded) == raw or encode_table({"k": decoded})[6:] == raw


def _normalise(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_normalise(v) for v in value]
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    return value


@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_garbage_never_raises_anything_but_syntax_error(data: bytes) -> None:
    for decoder in (decode_table, codec.decode_array, decode_value):
        with contextlib.suppress(FrameSyntaxError):
            decoder(data)


@FAST
@given(field_tables(), st.data())
def test_truncated_tables_are_syntax_errors(table: FieldTable, data: st.DataObject) -> None:
    raw = encode_table(table)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(FrameSyntaxError):
        decode_table(raw[:cut])


def test_inference_rules() -> None:
    assert infer_tag(True) == "t"
    assert infer_tag(1) == "I"
    assert infer_tag(2**31) == "l"
    assert infer_tag(-(2**31)) == "I"
    assert infer_tag(1.5) == "d"
    assert infer_tag("s") == "S"
    assert infer_tag(b"s") == "x"
    assert infer_tag(decimal.Decimal("1.5")) == "D"
    assert infer_tag(datetime.datetime.now(datetime.UTC)) == "T"
    assert infer_tag(Timestamp(5)) == "T"
    assert infer_tag({}) == "F"
    assert infer_tag([]) == "A"
    assert infer_tag(()) == "A"
    assert infer_tag(None) == "V"
    with pytest.raises(ValueError):
        infer_tag(2**64)
    with pytest.raises(TypeError):
        infer_tag(object())


def test_tag_is_kept_until_the_value_is_replaced() -> None:
    raw = b"\x00\x00\x00\x09" + b"\x01ab\x05" + b"\x01cs\x00\x07"  # a: int8 5, c: int16 7
    table, _ = decode_table(raw)
    assert table == {"a": 5, "c": 7}
    assert table.tags == {"a": "b", "c": "s"}
    assert encode_table(table) == raw
    table["c"] = 70000  # plain assignment: tag dropped, inferred as I
    assert table.tag_of("c") is None
    assert encode_table(table) == b"\x00\x00\x00\x0b\x01ab\x05\x01cI\x00\x01\x11\x70"
    table.set("c", 7, "s")
    assert encode_table(table) == raw
    table.update(a=5000)
    assert table.tags == {"c": "s"}


def test_array_tags_follow_elements() -> None:
    arr = FieldArray()
    arr.append_tagged(1, "b")
    arr.append_tagged("x", "S")
    raw = codec.encode_array(arr)
    decoded, _ = codec.decode_array(raw)
    assert decoded.tags == ["b", "S"]
    decoded[0] = 300
    assert decoded.tags == [None, "S"]
    assert codec.encode_array(decoded) == codec.encode_array([300, "x"])


def test_longstr_that_is_not_utf8_stays_bytes_under_tag_S() -> None:
    raw = b"\x00\x00\x00\x08\x01kS\x00\x00\x00\x01\xff"
    table, _ = decode_table(raw)
    assert table["k"] == b"\xff"
    assert table.tags["k"] == "S"
    assert encode_table(table) == raw


def test_non_canonical_bool_is_preserved() -> None:
    raw = b"\x00\x00\x00\x04\x01kt\x07"
    table, _ = decode_table(raw)
    assert table["k"] == 7 and table["k"]
    assert encode_table(table) == raw


def test_timestamp_and_decimal_representation() -> None:
    entries = b"\x01tT\x00\x00\x00\x00\x5f\x5e\x10\x00" + b"\x01dD\x02\x00\x00\x00\x96"
    raw = struct.pack(">I", len(entries)) + entries
    table, _ = decode_table(raw)
    assert table["t"] == Timestamp(0x5F5E1000)
    assert table["t"].datetime == datetime.datetime.fromtimestamp(0x5F5E1000, datetime.UTC)
    assert table["d"] == decimal.Decimal("1.50")
    assert str(table["d"]) == "1.50"
    assert encode_table(table) == raw
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert encode_value(when) == b"T" + struct.pack(">Q", int(when.timestamp()))


def test_copy_deepcopy_pickle_keep_tags() -> None:
    table, _ = decode_table(encode_table({"a": FieldTable()}))
    inner = FieldTable()
    inner.set("n", 1, "b")
    table.set("inner", inner, "F")
    table.set("arr", FieldArray([1]), "A")
    table["arr"]._tags = [("u", table["arr"][0])]
    raw = encode_table(table)
    for clone in (table.copy(), copy.copy(table), copy.deepcopy(table),
                  pickle.loads(pickle.dumps(table))):
        assert isinstance(clone, FieldTable)
        assert encode_table(clone) == raw


def test_to_plain() -> None:
    table, _ = decode_table(encode_table({"a": [1, {"b": Timestamp(3)}], "c": b"x"}))
    plain = to_plain(table)
    assert plain == {"a": [1, {"b": 3}], "c": b"x"}
    assert type(plain) is dict and type(plain["a"]) is list and type(plain["a"][1]["b"]) is int


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x00\x00\x03\x01kZ",  # unknown tag
        b"\x00\x00\x00\x05\x01kI\x00",  # truncated int
        b"\x00\x00\x00\x10\x01kI\x00\x00\x00\x01",  # length beyond data
        b"\x00\x00\x00\x02\x05k",  # key longer than table
        b"\x00\x00\x00\x07\x01kS\x00\x00\x00\x09",  # longstr beyond table
        b"\x00\x00\x00\x04\x01\xffV\x00"[:8],  # bad utf-8 key
        b"\x00\x00\x00\x06\x01kF\x00\x00\x00",  # truncated nested table length
        b"\x00\x00",  # truncated length
    ],
)
def test_malformed_tables(raw: bytes) -> None:
    with pytest.raises(FrameSyntaxError) as info:
        decode_table(raw)
    assert info.value.reply_code == 502
    assert info.value.reply_text.startswith("SYNTAX_ERROR - ")


def test_deep_nesting_is_a_syntax_error_not_a_crash() -> None:
    raw = b"\x00\x00\x00\x00"
    for _ in range(5000):
        raw = struct.pack(">I", len(raw) + 3) + b"\x01kF" + raw
    with pytest.raises(FrameSyntaxError):
        decode_table(raw)


# -------------------------------------------------------------- pamqp oracle

_pamqp_values = st.dictionaries(
    st.text(alphabet="abcdefghijklmnop-_.", min_size=1, max_size=10),
    st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.text(max_size=10),
        st.floats(width=32, allow_nan=False, allow_infinity=False),
        st.lists(st.integers(-(2**31), 2**31 - 1) | st.text(max_size=5), max_size=4),
        st.dictionaries(st.text(alphabet="xyz", min_size=1, max_size=3),
                        st.integers(0, 100), max_size=3),
    ),
    max_size=6,
)


@FAST
@given(_pamqp_values)
def test_pamqp_encoded_tables_decode_and_reencode_identically(value: dict[str, Any]) -> None:
    raw = pencode.field_table(value)
    decoded, end = decode_table(raw)
    assert end == len(raw)
    assert to_plain(decoded) == value
    assert encode_table(decoded) == raw  # pamqp picked b/s/u/I/i/l: we keep them


@FAST
@given(_pamqp_values)
def test_our_tables_decode_with_pamqp(value: dict[str, Any]) -> None:
    raw = encode_table(value)
    consumed, decoded = pdecode.field_table(raw)
    assert consumed == len(raw)
    assert decoded == value
