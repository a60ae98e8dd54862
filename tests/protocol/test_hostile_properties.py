"""The publish-time check accepts exactly what later lazy decoding can handle (issue 7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.codec import MAX_NESTING, check_table, decode_table, encode_table
from amqplite.protocol.connection import _truncate_shortstr
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import (
    check_properties,
    decode_properties,
    delivery_mode_of,
    encode_properties,
    expiration_of,
    headers_of,
    message_id_of,
    printable,
    priority_of,
    user_id_of,
)
from tests.protocol.strategies import (
    _mutated,
    _nested,
    field_tables,
    hostile_properties,
    properties,
)

MANY = settings(max_examples=400, deadline=None)


def _outcome(fn, *args):  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except FrameSyntaxError:
        return False
    return True


@MANY
@given(hostile_properties(["q1", "q2"]))
def test_check_properties_accepts_exactly_what_decodes(raw: bytes) -> None:
    ok = _outcome(check_properties, raw)
    assert ok == _outcome(decode_properties, raw)
    if not ok:
        return
    # everything the broker may ask later works, and the copy it re-encodes decodes again
    for probe in (delivery_mode_of, priority_of, expiration_of, message_id_of, user_id_of,
                  headers_of):
        probe(raw)
    again = encode_properties(decode_properties(raw))
    check_properties(again)
    assert encode_properties(decode_properties(again)) == again  # bytes: NaN != NaN


@MANY
@given(field_tables().map(encode_table).flatmap(_mutated))
def test_check_table_accepts_exactly_what_decode_table_accepts(raw: bytes) -> None:
    ok = _outcome(check_table, raw, 0)
    assert ok == _outcome(decode_table, raw, 0)
    if ok:
        assert check_table(raw, 0) == decode_table(raw, 0)[1]


@pytest.mark.parametrize("depth", [MAX_NESTING, MAX_NESTING + 1, 3000])
def test_nesting_deeper_than_the_limit_is_a_syntax_error(depth: int) -> None:
    raw = _nested(depth)
    fine = depth <= MAX_NESTING
    assert _outcome(decode_table, raw, 0) is fine
    assert _outcome(check_table, raw, 0) is fine


@given(st.binary(max_size=40))
def test_printable_text_always_encodes_and_keeps_valid_text(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    out = printable(text)
    out.encode()
    try:
        assert out == data.decode()
    except UnicodeDecodeError:
        assert "\\x" in out


def test_reply_text_with_undecodable_bytes_is_escaped_and_short() -> None:
    text = "PRECONDITION_FAILED - user_id property set to '" + "\udcff" * 300 + "'"
    out = _truncate_shortstr(text)
    assert len(out.encode()) <= 255 and out.startswith("PRECONDITION_FAILED - ")
    assert "\\xff" in out


@MANY
@given(properties().filter(lambda p: p.headers is not None).map(encode_properties)
       .flatmap(lambda raw: st.tuples(st.just(raw), _mutated(raw))))
def test_a_known_table_only_skips_the_identical_table(pair: tuple[bytes, bytes]) -> None:
    raw, changed = pair
    known = check_properties(raw)  # what the channel remembers after a publish
    assert known and check_properties(raw, known) is known
    assert _outcome(check_properties, changed, known) == _outcome(decode_properties, changed)
