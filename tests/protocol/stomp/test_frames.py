"""STOMP frame codec: the specs' examples, escaping per version, limits, round trips, fuzz."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.stomp.errors import FrameError
from amqplite.protocol.stomp.frames import (
    MAX_COMMAND_LENGTH,
    V10,
    V11,
    V12,
    Frame,
    FrameParser,
    ParserLimits,
    encode_frame,
    escape,
    header_tables,
    parse_all,
    serialize,
    translated,
    unescape,
)

VERSIONS = (V10, V11, V12)


def one(data: bytes, version: str | None = V12, limits: ParserLimits | None = None) -> Frame:
    frames = parse_all(data, version, limits)
    assert len(frames) == 1
    return frames[0]


def error(data: bytes, version: str | None = V12, limits: ParserLimits | None = None) -> FrameError:
    with pytest.raises(FrameError) as info:
        parse_all(data, version, limits)
    return info.value


# ------------------------------------------------------------------ the specs' examples


def test_stomp_1_2_connect_example() -> None:
    f = one(b"CONNECT\naccept-version:1.2\nhost:stomp.github.org\n\n\x00", None)
    assert f == Frame("CONNECT", {"accept-version": "1.2", "host": "stomp.github.org"})


def test_send_example_with_content_type() -> None:
    f = one(b"SEND\ndestination:/queue/a\ncontent-type:text/plain\n\nhello queue a\n\x00")
    assert f.command == "SEND"
    assert f.headers == {"destination": "/queue/a", "content-type": "text/plain"}
    assert f.body == b"hello queue a\n"


def test_crlf_line_endings_are_equivalent_to_lf() -> None:
    f = one(b"SEND\r\ndestination:/queue/a\r\nreceipt:77\r\n\r\nbody\x00")
    assert f == Frame("SEND", {"destination": "/queue/a", "receipt": "77"}, b"body")


def test_repeated_header_first_occurrence_wins() -> None:
    f = one(b"MESSAGE\nfoo:World\nfoo:Hello\n\n\x00")
    assert f.headers == {"foo": "World"}


def test_header_order_is_kept() -> None:
    f = one(b"SEND\nz:1\na:2\nm:3\n\n\x00")
    assert list(f.headers) == ["z", "a", "m"]


def test_header_values_may_hold_colons_and_be_empty() -> None:
    f = one(b"SEND\nurl:http://x:80/\nempty:\n\n\x00", V10)
    assert f.headers == {"url": "http://x:80/", "empty": ""}


def test_content_length_body_may_hold_nuls() -> None:
    f = one(b"SEND\ndestination:/queue/a\ncontent-length:5\n\na\x00b\x00c\x00")
    assert f.body == b"a\x00b\x00c"


def test_zero_content_length() -> None:
    assert one(b"SEND\ncontent-length:0\n\n\x00").body == b""


def test_content_length_honoured_on_every_command() -> None:
    assert one(b"ACK\nid:1\ncontent-length:2\n\n\x00\x00\x00").body == b"\x00\x00"


def test_heart_beats_and_nuls_between_frames_are_skipped() -> None:
    data = b"\n\r\n\x00SEND\n\nx\x00\n\n\r\nBEGIN\ntransaction:t\n\n\x00\n"
    frames = parse_all(data)
    assert [f.command for f in frames] == ["SEND", "BEGIN"]


def test_many_frames_in_one_chunk() -> None:
    data = b"".join(serialize("SEND", {"n": str(i)}, b"x" * i) for i in range(50))
    frames = parse_all(data)
    assert [f.headers["n"] for f in frames] == [str(i) for i in range(50)]
    assert [len(f.body) for f in frames] == list(range(50))


def test_unicode_headers_and_command_case_kept() -> None:
    f = one("SEND\ndestination:/queue/é\nclé:ünï\n\n\x00".encode())
    assert f.headers == {"destination": "/queue/é", "clé": "ünï"}
    assert one(b"send\n\n\x00").command == "send"  # commands are case-sensitive: "send" is unknown


# ------------------------------------------------------------------ escaping per version


def test_escapes_decoded_in_1_1_and_1_2() -> None:
    raw = b"MESSAGE\nk\\ce\\ny:a\\\\b\\cc\\nd\n\n\x00"
    for version in (V11, V12):
        assert one(raw, version).headers == {"k:e\ny": "a\\b:c\nd"}


def test_cr_escape_in_1_2_and_accepted_in_1_1_like_rabbitmq() -> None:
    assert one(b"SEND\nx:a\\rb\n\n\x00", V12).headers == {"x": "a\rb"}
    assert one(b"SEND\nx:a\\rb\n\n\x00", V11).headers == {"x": "a\rb"}


def test_no_escaping_in_1_0() -> None:
    assert one(b"SEND\nx:a\\nb\\t\n\n\x00", V10).headers == {"x": "a\\nb\\t"}


@pytest.mark.parametrize("command", [b"CONNECT", b"STOMP", b"CONNECTED"])
def test_no_escaping_in_connect_frames(command: bytes) -> None:
    f = one(command + b"\nlogin:us\\er\npasscode:p\\ass\n\n\x00", V12)
    assert f.headers == {"login": "us\\er", "passcode": "p\\ass"}


@pytest.mark.parametrize("raw", [b"x:a\\tb", b"x:a\\", b"x\\q:a"])
def test_undefined_escape_is_an_error_in_1_1_and_1_2(raw: bytes) -> None:
    for version in (V11, V12):
        err = error(b"SEND\n" + raw + b"\n\n\x00", version)
        assert err.message == "Malformed frame"
        assert "escape" in err.detail


def test_no_version_yet_means_no_unescaping() -> None:
    assert one(b"SEND\nx:a\\tb\n\n\x00", None).headers == {"x": "a\\tb"}


def test_escape_unescape_inverse() -> None:
    text = "a:b\nc\\d\re"
    assert escape(text) == "a\\cb\\nc\\\\d\\re"
    assert unescape(escape(text)) == text


def test_serializer_escapes_by_version() -> None:
    headers = {"k:x": "a\nb:c\\d"}
    assert serialize("MESSAGE", headers, b"", V12, trailing_lf=False) == (
        b"MESSAGE\nk\\cx:a\\nb\\cc\\\\d\ncontent-length:0\n\n\x00"
    )
    assert serialize("RECEIPT", {"receipt-id": "a:b"}, b"", V11, trailing_lf=False) == (
        b"RECEIPT\nreceipt-id:a\\cb\n\n\x00"
    )
    # 1.0 cannot carry CR/LF: blanked, colons in values kept, none escaped
    assert serialize("RECEIPT", {"receipt-id": "a:b\nc\\"}, b"", V10, trailing_lf=False) == (
        b"RECEIPT\nreceipt-id:a:b c\\\n\n\x00"
    )
    # CONNECTED is never escaped
    assert serialize("CONNECTED", {"server": "x:y"}, b"", V12, trailing_lf=False) == (
        b"CONNECTED\nserver:x:y\n\n\x00"
    )


def test_serializer_content_length_and_trailing_lf() -> None:
    # computed, never taken from the caller; always on MESSAGE; RabbitMQ's EOL after NUL
    data = serialize("ERROR", {"message": "m", "content-length": "99"}, b"detail")
    assert data == b"ERROR\nmessage:m\ncontent-length:6\n\ndetail\x00\n"
    assert serialize("MESSAGE", {}, b"") == b"MESSAGE\ncontent-length:0\n\n\x00\n"
    assert serialize("RECEIPT", [("receipt-id", "1")]) == b"RECEIPT\nreceipt-id:1\n\n\x00\n"


# ------------------------------------------------------------------ malformed input


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"SEND\nnocolon\n\n\x00", "without a colon"),
        (b"SEND\n:value\n\n\x00", "empty name"),
        (b"SEND\nx:a\rb\n\n\x00", "CR not followed by LF"),
        (b"SE\rND\n\n\x00", "CR not followed by LF"),
        (b"\rX", "between frames"),
        (b"SEND\ncontent-length:2\n\nabc\x00", "not terminated by NUL"),
        (b"SEND\ncontent-length:xx\n\nab\x00", "invalid content-length"),
        (b"SEND\ncontent-length:-1\n\n\x00", "invalid content-length"),
        (b"SEND\nx:\xff\n\n\x00", "UTF-8"),
        (b"\xc3\n\n\x00", "UTF-8"),
        (b"junk\x00", "NUL) inside its command line"),  # no LF will ever come
        (b"ju\x00nk\n\n\x00", "NUL) inside its command line"),
    ],
)
def test_malformed_frames(data: bytes, fragment: str) -> None:
    assert fragment in error(data).detail


def test_truncated_frame() -> None:
    assert "truncated" in error(b"SEND\n\nabc").detail


def test_parser_is_poisoned_after_an_error() -> None:
    p = FrameParser(version=V12)
    with pytest.raises(FrameError):
        p.feed(b"SEND\nbad\n\n\x00")
    with pytest.raises(FrameError):
        p.feed(b"SEND\n\n\x00")
    assert p.buffered == 0


# ------------------------------------------------------------------ limits


def test_command_length_limit_before_the_line_ends() -> None:
    p = FrameParser()
    p.receive(b"X" * (MAX_COMMAND_LENGTH + 2))
    with pytest.raises(FrameError, match="command longer"):
        p.next_frame()


def test_header_length_limit() -> None:
    limits = ParserLimits(max_header_length=10)
    assert one(b"SEND\nx:" + b"v" * 10 + b"\n\n\x00", limits=limits)
    err = error(b"SEND\nx:" + b"v" * 11 + b"\n\n\x00", limits=limits)
    assert err.message == "Header too long"
    # a line that never ends is refused before it is all buffered
    p = FrameParser(limits)
    p.receive(b"SEND\nx:" + b"v" * 100)
    with pytest.raises(FrameError, match="header longer"):
        p.next_frame()


def test_header_count_limit_counts_distinct_names() -> None:
    limits = ParserLimits(max_headers=3)
    ok = b"SEND\na:1\nb:2\nc:3\na:4\na:5\n\n\x00"
    assert one(ok, limits=limits).headers == {"a": "1", "b": "2", "c": "3"}
    assert error(b"SEND\na:1\nb:2\nc:3\nd:4\n\n\x00", limits=limits).message == "Too many headers"


def test_frame_size_limit_with_content_length_fails_before_the_body_arrives() -> None:
    p = FrameParser(ParserLimits(max_frame_size=100))
    p.receive(b"SEND\ncontent-length:200\n\n")
    with pytest.raises(FrameError) as info:
        p.next_frame()
    assert info.value.message == "Frame too large"


def test_frame_size_limit_without_content_length() -> None:
    p = FrameParser(ParserLimits(max_frame_size=100))
    p.receive(b"SEND\n\n" + b"x" * 50)
    assert p.next_frame() is None
    p.receive(b"x" * 50)
    with pytest.raises(FrameError, match="frame larger than 100"):
        p.next_frame()


def test_frame_exactly_at_the_limit_passes() -> None:
    frame = b"SEND\n\n" + b"x" * 93 + b"\x00"
    assert len(frame) == 100
    assert one(frame, limits=ParserLimits(max_frame_size=100)).body == b"x" * 93


def test_body_length_limit() -> None:
    limits = ParserLimits(max_body_length=4)
    assert error(b"SEND\ncontent-length:5\n\nabcde\x00", limits=limits).message == "Frame too large"
    assert error(b"SEND\n\nabcde\x00", limits=limits).message == "Frame too large"


def test_max_frame_size_can_change_between_frames() -> None:
    p = FrameParser(ParserLimits(max_frame_size=1000))
    p.max_frame_size = 20
    assert p.feed(b"SEND\n\nshort\x00")[0].body == b"short"
    p.max_frame_size = 1000
    assert p.feed(b"SEND\n\n" + b"x" * 500 + b"\x00")[0].body == b"x" * 500


# ------------------------------------------------------------------ hypothesis

_text = st.text(st.characters(codec="utf-8"), max_size=20)
_names = _text.filter(lambda s: s != "" and s != "content-length")
_commands = st.sampled_from(["SEND", "MESSAGE", "ERROR", "RECEIPT", "ACK", "SUBSCRIBE", "BEGIN", "X-CUSTOM"])


@st.composite
def frames(draw: st.DrawFn) -> Frame:
    names = draw(st.lists(_names, max_size=8, unique=True))
    headers = {n: draw(_text) for n in names}
    return Frame(draw(_commands), headers, draw(st.binary(max_size=300)))


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return out


def _expected(frame: Frame) -> Frame:
    headers = dict(frame.headers)
    if frame.body or frame.command == "MESSAGE":
        headers["content-length"] = str(len(frame.body))
    return Frame(frame.command, headers, frame.body)


@settings(max_examples=300)
@given(
    fs=st.lists(frames(), min_size=1, max_size=5),
    version=st.sampled_from([V11, V12]),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    trailing_lf=st.booleans(),
)
def test_round_trip_with_random_chunking_1_1_and_1_2(
    fs: list[Frame], version: str, cuts: list[int], trailing_lf: bool
) -> None:
    data = b"".join(encode_frame(f, version, trailing_lf=trailing_lf) for f in fs)
    parser = FrameParser(version=version)
    got: list[Frame] = []
    for chunk in _chunks(data, cuts):
        got += parser.feed(chunk)
    assert got == [_expected(f) for f in fs]
    assert not parser.in_frame


_text_10 = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20
)


@settings(max_examples=200)
@given(
    names=st.lists(_text_10.filter(lambda s: s and ":" not in s and s != "content-length"),
                   max_size=6, unique=True),
    data=st.data(),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
)
def test_round_trip_with_random_chunking_1_0(names: list[str], data: st.DataObject, cuts: list[int]) -> None:
    # what 1.0 can carry: no CR/LF anywhere, no colon in names; backslashes are literal
    headers = {n: data.draw(_text_10) for n in names}
    frame = Frame("SEND", headers, data.draw(st.binary(max_size=200)))
    parser = FrameParser(version=V10)
    got: list[Frame] = []
    for chunk in _chunks(encode_frame(frame, V10), cuts):
        got += parser.feed(chunk)
    assert got == [_expected(frame)]


@settings(max_examples=500)
@given(data=st.binary(max_size=400), version=st.sampled_from([None, V10, V11, V12]),
       cuts=st.lists(st.integers(min_value=0), max_size=6))
def test_fuzz_random_bytes_raise_only_frame_error(data: bytes, version: str | None, cuts: list[int]) -> None:
    limits = ParserLimits(max_frame_size=256, max_header_length=32, max_headers=4, max_body_length=128)
    parser = FrameParser(limits, version)
    try:
        for chunk in _chunks(data, cuts):
            parser.feed(chunk)
            # memory stays bounded: at most one frame's limit is ever held
            assert parser.buffered <= len(data)
            if parser.in_frame:
                assert parser.buffered <= 256
    except FrameError:
        pass


@settings(max_examples=300)
@given(frame=frames(), version=st.sampled_from([V11, V12]),
       pos=st.integers(min_value=0), byte=st.integers(0, 255))
def test_fuzz_mutated_frames_raise_only_frame_error(frame: Frame, version: str, pos: int, byte: int) -> None:
    data = bytearray(encode_frame(frame, version))
    data[pos % len(data)] = byte
    with contextlib.suppress(FrameError):
        parse_all(bytes(data), version)


def test_frames_rabbitmq_3_10_8_sent_parse() -> None:
    # bytes captured from RabbitMQ 3.10.8 (docs/dev/stomp-reference.md): EOL after each NUL
    data = (
        b"CONNECTED\nserver:RabbitMQ/3.10.8\nsession:session-pWwjG0EN1Nsh7bA-2kT-Qw\n"
        b"heart-beat:0,0\nversion:1.2\n\n\x00\n"
        b"MESSAGE\nsubscription:sub-1\ndestination:/queue/probe-msg\n"
        b"message-id:T_sub-1@@session-pWwjG0EN1Nsh7bA-2kT-Qw@@1\nredelivered:false\n"
        b"ack:T_sub-1@@session-pWwjG0EN1Nsh7bA-2kT-Qw@@1\nx-custom:a\\cb\\nc\\\\d\n"
        b"reply-to:/reply-queue/foo\ncorrelation-id:c1\npersistent:true\ncontent-type:text/plain\n"
        b"content-length:5\n\nhello\x00\n"
        b"ERROR\nmessage:Missing destination\ncontent-type:text/plain\nversion:1.0,1.1,1.2\n"
        b"content-length:43\n\n\"SEND\" must include a 'destination' header\n\x00\n"
    )
    connected, message, error = parse_all(data, V12)
    assert connected.headers["version"] == "1.2"
    assert message.headers["x-custom"] == "a:b\nc\\d"
    assert message.body == b"hello"
    assert error.headers["message"] == "Missing destination"
    assert error.body == b"\"SEND\" must include a 'destination' header\n"


def _outcome(data: bytes, version: str, chunk: int) -> tuple[list[Frame], bool]:
    limits = ParserLimits(max_frame_size=120, max_header_length=12, max_headers=3, max_body_length=60)
    parser = FrameParser(limits, version)
    frames: list[Frame] = []
    try:
        for i in range(0, len(data), chunk):
            parser.receive(data[i : i + chunk])
            while (frame := parser.next_frame()) is not None:
                frames.append(frame)
    except FrameError:
        return frames, True
    return frames, False


@settings(max_examples=400)
@given(
    data=st.lists(
        st.sampled_from([b"SEND", b"ACK", b"\n", b"\r\n", b"\r", b":", b"a", b"bb", b"\\", b"\\n", b"\\c",
                         b"\x00", b"\xc3\xa9", b"\xff", b"content-length:", b"3", b"x" * 13]),
        max_size=40,
    ).map(b"".join),
    version=st.sampled_from([V10, V11, V12]),
)
def test_whole_head_fast_path_agrees_with_line_by_line(data: bytes, version: str) -> None:
    # fed at once, a buffered LF-only ASCII head takes the fast path; byte by byte, never.
    # Same frames, same refusal (which limit is named first may depend on the chunking)
    assert _outcome(data, version, len(data) or 1) == _outcome(data, version, 1)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("text", ["plain", "a:b", "line\nbreak", "cr\rlf", "back\\slash", ""])
def test_translated_is_str_translate_and_skips_plain_text(version: str, text: str) -> None:
    """The escaping shortcut changes nothing but the cost: the same as
    ``str.translate`` with each table, and a plain value comes back as it is."""
    for table in header_tables("MESSAGE", version):
        assert translated(text, table) == text.translate(table)
    assert translated("T_0@@session-x@@17", header_tables("MESSAGE", V12)[1]) == "T_0@@session-x@@17"
