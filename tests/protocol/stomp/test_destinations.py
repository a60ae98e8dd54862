"""RabbitMQ's destination grammar, with the texts RabbitMQ 3.10.8 answers (docs/dev/stomp-reference.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqplite.protocol.stomp.destinations import (
    Destination,
    Kind,
    check_direction,
    format_destination,
    parse_destination,
    reply_to_header,
)
from amqplite.protocol.stomp.errors import StompError


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("/queue/a", Destination(Kind.QUEUE, "a")),
        ("/queue/a%2Fb", Destination(Kind.QUEUE, "a/b")),
        ("bare-name", Destination(Kind.QUEUE, "bare-name")),
        ("/topic/a.*.#", Destination(Kind.TOPIC, "a.*.#")),
        ("/exchange/amq.direct", Destination(Kind.EXCHANGE, "amq.direct")),
        ("/exchange/amq.direct/key", Destination(Kind.EXCHANGE, "amq.direct", "key")),
        ("/exchange/x/", Destination(Kind.EXCHANGE, "x", "")),
        ("/exchange/x/k%2Fx", Destination(Kind.EXCHANGE, "x", "k/x")),
        ("/amq/queue/existing", Destination(Kind.AMQ_QUEUE, "existing")),
        ("/temp-queue/replies", Destination(Kind.TEMP_QUEUE, "replies")),
        ("/reply-queue/amq.gen-x/y", Destination(Kind.REPLY_QUEUE, "amq.gen-x/y")),
        ("/reply-queue/", Destination(Kind.REPLY_QUEUE, "")),
    ],
)
def test_valid_destinations(header: str, expected: Destination) -> None:
    assert parse_destination(header) == expected


UNKNOWN_TAIL = (
    "Valid destination types are: /temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/.\n"
)


@pytest.mark.parametrize(
    ("header", "message", "detail"),
    [
        # each text as RabbitMQ 3.10.8 sent it
        ("/foo/bar", "Unknown destination", f"'/foo/bar' is not a valid destination.\n{UNKNOWN_TAIL}"),
        ("/reply-queue", "Unknown destination",
         f"'/reply-queue' is not a valid destination.\n{UNKNOWN_TAIL}"),
        ("a/b", "Unknown destination", f"'a/b' is not a valid destination.\n{UNKNOWN_TAIL}"),
        ("/amq/foo", "Unknown destination", f"'/amq/foo' is not a valid destination.\n{UNKNOWN_TAIL}"),
        ("", "Invalid destination", "Destination cannot be blank"),
        ("/queue", "Invalid destination", "'' is not a valid queue destination\n"),
        ("/queue/", "Invalid destination", "'/' is not a valid queue destination\n"),
        ("/queue/a/b", "Invalid destination", "'/a/b' is not a valid queue destination\n"),
        ("/exchange", "Invalid destination", "'' is not a valid exchange destination\n"),
        ("/exchange/", "Invalid destination", "'/' is not a valid exchange destination\n"),
        ("/exchange/amq.direct/b/c", "Invalid destination",
         "'/amq.direct/b/c' is not a valid exchange destination\n"),
        ("/topic/a/b", "Invalid destination", "'/a/b' is not a valid topic destination\n"),
        ("/amq/queue", "Invalid destination", "'' is not a valid amqqueue destination\n"),
        ("/temp-queue/", "Invalid destination", "'/' is not a valid temp_queue destination\n"),
    ],
)
def test_malformed_destinations(header: str, message: str, detail: str) -> None:
    with pytest.raises(StompError) as info:
        parse_destination(header)
    assert (info.value.message, info.value.detail) == (message, detail)


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE"])
def test_temp_queue_is_no_send_or_subscribe_destination(command: str) -> None:
    dest = parse_destination("/temp-queue/x")
    with pytest.raises(StompError) as info:
        check_direction(dest, "/temp-queue/x", command)
    assert info.value.detail == f"'/temp-queue/x' is not a valid destination for '{command}'\n"
    check_direction(parse_destination("/queue/x"), "/queue/x", command)


def test_routing() -> None:
    assert parse_destination("/queue/q").routing() == ("", "q")
    assert parse_destination("/amq/queue/q").routing() == ("", "q")
    assert parse_destination("/reply-queue/q").routing() == ("", "q")
    assert parse_destination("/topic/a.b").routing() == ("amq.topic", "a.b")
    assert parse_destination("/topic/a.b").routing("my.topic") == ("my.topic", "a.b")
    assert parse_destination("/exchange/x").routing() == ("x", "")
    assert parse_destination("/exchange/x/k").routing() == ("x", "k")
    with pytest.raises(ValueError, match="temp-queue"):
        parse_destination("/temp-queue/t").routing()


def test_format_destination_as_rabbitmq_rebuilds_it() -> None:
    assert format_destination("", "q") == "/queue/q"
    assert format_destination("amq.topic", "a.b") == "/topic/a.b"
    assert format_destination("amq.direct", "") == "/exchange/amq.direct"
    assert format_destination("amq.direct", "k/x") == "/exchange/amq.direct/k%2Fx"  # seen on 3.10.8
    assert format_destination("", "50%") == "/queue/50%25"
    assert format_destination("", "é\t") == "/queue/%C3%A9%09"


_plain = st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="%"), min_size=1,
                 max_size=30)


@given(key=_plain, exchange=_plain)
def test_formatted_destination_parses_back(key: str, exchange: str) -> None:
    # printable ASCII without '%' comes back exactly ('/' travels as %2F)
    assert parse_destination(format_destination("", key)) == Destination(Kind.QUEUE, key)
    assert parse_destination(format_destination("amq.topic", key)) == Destination(Kind.TOPIC, key)
    if exchange != "amq.topic":
        expected = Destination(Kind.EXCHANGE, exchange, key)
        assert parse_destination(format_destination(exchange, key)) == expected
        assert parse_destination(format_destination(exchange, "")) == Destination(Kind.EXCHANGE, exchange)


def test_reply_to_header() -> None:
    assert reply_to_header("foo") == "/reply-queue/foo"  # seen on 3.10.8
    assert reply_to_header("/queue/q") == "/queue/q"
    assert reply_to_header("/temp-queue/t") == "/reply-queue//temp-queue/t"
