"""Routing through the default, direct, fanout, topic and headers exchanges."""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._raw import RawConnection, headers_property, table
from conformance._util import routed
from conformance.conftest import Names


@pytest.fixture
def confirmed(channel: BlockingChannel) -> BlockingChannel:
    """A channel in confirm mode: once publish returns, the message is enqueued."""
    channel.confirm_delivery()
    return channel


def test_default_exchange_routes_by_queue_name(confirmed: BlockingChannel,
                                               names: Names) -> None:
    q1, q2 = names.queue("a"), names.queue("b")
    confirmed.queue_declare(q1)
    confirmed.queue_declare(q2)
    confirmed.basic_publish("", q1, b"1")
    confirmed.basic_publish("", q2, b"2")
    confirmed.basic_publish("", names.prefix + "-nobody", b"lost")
    assert routed(confirmed, [q1, q2]) == {q1: [b"1"], q2: [b"2"]}


def test_default_exchange_cannot_be_deleted(connection: pika.BlockingConnection) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().exchange_delete("")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - operation not permitted on the default exchange")


def test_direct(confirmed: BlockingChannel, names: Names) -> None:
    ex = names.exchange()
    q1, q2 = names.queue("a"), names.queue("b")
    confirmed.exchange_declare(ex, "direct")
    for q in (q1, q2):
        confirmed.queue_declare(q)
    confirmed.queue_bind(q1, ex, "k1")
    confirmed.queue_bind(q1, ex, "k2")
    confirmed.queue_bind(q1, ex, "k1")  # duplicate binding: still one copy
    confirmed.queue_bind(q2, ex, "k1")
    for key in ("k1", "k2", "k3", "K1", ""):
        confirmed.basic_publish(ex, key, key.encode())
    assert routed(confirmed, [q1, q2]) == {q1: [b"k1", b"k2"], q2: [b"k1"]}
    confirmed.queue_unbind(q1, ex, "k1")
    confirmed.basic_publish(ex, "k1", b"again")
    assert routed(confirmed, [q1, q2]) == {q1: [], q2: [b"again"]}


def test_fanout_ignores_routing_key(confirmed: BlockingChannel, names: Names) -> None:
    ex = names.exchange()
    q1, q2 = names.queue("a"), names.queue("b")
    confirmed.exchange_declare(ex, "fanout")
    for q in (q1, q2):
        confirmed.queue_declare(q)
    confirmed.queue_bind(q1, ex, "ignored")
    confirmed.queue_bind(q2, ex)
    confirmed.basic_publish(ex, "anything", b"1")
    confirmed.basic_publish(ex, "", b"2")
    assert routed(confirmed, [q1, q2]) == {q1: [b"1", b"2"], q2: [b"1", b"2"]}


TOPIC_KEYS = ["", "a", "b", "a.b", "a.c", "a.b.c", "a.x.b", "a.x.y.b", "a..b", ".a",
              "a.", "b.a", "a.b.b", "x.a.b"]
TOPIC_CASES: list[tuple[str, list[str]]] = [
    ("#", TOPIC_KEYS),
    ("*", ["a", "b"]),
    ("a", ["a"]),
    ("a.*", ["a.b", "a.c", "a."]),
    ("a.#", ["a", "a.b", "a.c", "a.b.c", "a.x.b", "a.x.y.b", "a..b", "a.", "a.b.b"]),
    ("#.b", ["b", "a.b", "a.x.b", "a.x.y.b", "a..b", "a.b.b", "x.a.b"]),
    ("a.#.b", ["a.b", "a.x.b", "a.x.y.b", "a..b", "a.b.b"]),
    ("a.*.b", ["a.x.b", "a..b", "a.b.b"]),
    ("*.*", ["a.b", "a.c", ".a", "a.", "b.a"]),
    ("#.#", TOPIC_KEYS),
    ("*.#", [k for k in TOPIC_KEYS if k != ""]),
    ("#.a.#", ["a", "a.b", "a.c", "a.b.c", "a.x.b", "a.x.y.b", "a..b", ".a", "a.", "b.a",
               "a.b.b", "x.a.b"]),
    ("a.b", ["a.b"]),
    ("", [""]),
]


def test_topic_patterns(confirmed: BlockingChannel, names: Names) -> None:
    ex = names.exchange()
    confirmed.exchange_declare(ex, "topic")
    queues = {}
    for i, (pattern, _) in enumerate(TOPIC_CASES):
        queue = names.queue(f"p{i}")
        confirmed.queue_declare(queue)
        confirmed.queue_bind(queue, ex, pattern)
        queues[pattern] = queue
    for key in TOPIC_KEYS:
        confirmed.basic_publish(ex, key, key.encode())
    got = routed(confirmed, list(queues.values()))
    for pattern, expected in TOPIC_CASES:
        assert sorted(b.decode() for b in got[queues[pattern]]) == sorted(expected), pattern


def test_topic_one_copy_per_queue(confirmed: BlockingChannel, names: Names) -> None:
    ex, queue = names.exchange(), names.queue()
    confirmed.exchange_declare(ex, "topic")
    confirmed.queue_declare(queue)
    for pattern in ("a.*", "#", "a.b", "*.b"):
        confirmed.queue_bind(queue, ex, pattern)
    confirmed.basic_publish(ex, "a.b", b"x")
    assert routed(confirmed, [queue]) == {queue: [b"x"]}


HEADER_BINDINGS: list[tuple[str, dict[str, Any]]] = [
    ("all", {"x-match": "all", "a": 1, "b": "x"}),
    ("any", {"x-match": "any", "a": 1, "b": "x"}),
    ("default", {"a": 1, "b": "x"}),  # x-match defaults to all
    ("presence", {"x-match": "all", "p": None}),  # void value: the header must be present
    ("bool", {"x-match": "all", "flag": True}),
    ("empty-all", {"x-match": "all"}),
    ("empty-any", {"x-match": "any"}),
    ("x-ignored", {"x-match": "all", "x-other": "zzz", "a": 1}),
]
HEADER_MESSAGES: list[tuple[str, dict[str, Any] | None]] = [
    ("both", {"a": 1, "b": "x"}),
    ("both-extra", {"a": 1, "b": "x", "c": 3}),
    ("only-a", {"a": 1}),
    ("a-wrong-b", {"a": 1, "b": "y"}),
    ("a-as-string", {"a": "1", "b": "x"}),
    ("neither", {"c": 3}),
    ("none", None),
    ("p-present", {"p": "anything"}),
    ("flag-true", {"flag": True}),
    ("flag-false", {"flag": False}),
    ("flag-int", {"flag": 1}),
    ("a-big", {"a": 2**40, "b": "x"}),
]
HEADER_EXPECTED = {
    "all": ["both", "both-extra"],
    "any": ["both", "both-extra", "only-a", "a-wrong-b", "a-as-string", "a-big"],
    "default": ["both", "both-extra"],
    "presence": ["p-present"],
    "bool": ["flag-true"],
    "empty-all": [name for name, _ in HEADER_MESSAGES],
    "empty-any": [],
    "x-ignored": ["both", "both-extra", "only-a", "a-wrong-b"],
}


def test_headers_exchange(confirmed: BlockingChannel, names: Names) -> None:
    ex = names.exchange()
    confirmed.exchange_declare(ex, "headers")
    queues = {}
    for label, args in HEADER_BINDINGS:
        queue = names.queue(label)
        confirmed.queue_declare(queue)
        confirmed.queue_bind(queue, ex, "", arguments=args)
        queues[label] = queue
    for label, headers in HEADER_MESSAGES:
        confirmed.basic_publish(ex, "ignored", label.encode(),
                                pika.BasicProperties(headers=headers))
    got = routed(confirmed, list(queues.values()))
    for label, expected in HEADER_EXPECTED.items():
        assert sorted(b.decode() for b in got[queues[label]]) == sorted(expected), label


def test_headers_numeric_tags_compare_by_value(confirmed: BlockingChannel, names: Names,
                                               url: str) -> None:
    """Binding value 5 (tag I) matches any numeric 5 (b, B, s, u, i, l, even double 5.0).

    RabbitMQ compares header values numerically across integer and float tags;
    the long string "5" does not match.
    """
    ex, queue = names.exchange(), names.queue()
    confirmed.exchange_declare(ex, "headers")
    confirmed.queue_declare(queue)
    confirmed.queue_bind(queue, ex, "", arguments={"x-match": "all", "n": 5})
    raw = RawConnection(url).open()
    raw.confirm_select()
    try:
        sent = [b"b", b"B", b"s", b"u", b"I", b"i", b"l", b"d", b"S"]
        for tag in sent:
            value: Any = 5.0 if tag == b"d" else (b"5" if tag == b"S" else 5)
            raw.publish(ex, "", tag, headers_property(table([("n", tag, value)])))
        acks = 0
        while acks < len(sent):
            method = raw.read_method()
            if method.ids == (60, 80):
                acks = int.from_bytes(method.args[:8], "big")
    finally:
        raw.close()
    got = routed(confirmed, [queue])[queue]
    assert sorted(got) == sorted([b"b", b"B", b"s", b"u", b"I", b"i", b"l", b"d"])


def test_headers_unbind_needs_same_arguments(confirmed: BlockingChannel, names: Names) -> None:
    ex, queue = names.exchange(), names.queue()
    confirmed.exchange_declare(ex, "headers")
    confirmed.queue_declare(queue)
    confirmed.queue_bind(queue, ex, "", arguments={"x-match": "any", "a": 1})
    confirmed.queue_bind(queue, ex, "", arguments={"x-match": "any", "b": 2})
    confirmed.queue_unbind(queue, ex, "", arguments={"x-match": "any", "a": 1})
    confirmed.basic_publish(ex, "", b"a", pika.BasicProperties(headers={"a": 1}))
    confirmed.basic_publish(ex, "", b"b", pika.BasicProperties(headers={"b": 2}))
    assert routed(confirmed, [queue]) == {queue: [b"b"]}


def test_unbind_missing_binding_is_ok(confirmed: BlockingChannel, names: Names) -> None:
    ex, queue = names.exchange(), names.queue()
    confirmed.exchange_declare(ex, "direct")
    confirmed.queue_declare(queue)
    confirmed.queue_unbind(queue, ex, "never-bound")
    assert confirmed.is_open


# ------------------------------------------------- sender-selected distribution
def _cc_exchange(ch: BlockingChannel, names: Names, kind: str = "direct",
                 keys: tuple[str, ...] = ("k1", "k2", "k3", "k4")) -> tuple[str, dict[str, str]]:
    """An exchange with one queue bound per key: (exchange, key -> queue)."""
    ex = names.exchange()
    ch.exchange_declare(ex, kind)
    queues = {}
    for k in keys:
        q = queues[k] = names.queue(k.replace("*", "star").replace("#", "hash"))
        ch.queue_declare(q)
        ch.queue_bind(q, ex, k)
    return ex, queues


def _got(ch: BlockingChannel, queues: dict[str, str]) -> dict[str, list[Any]]:
    """key -> the headers of each message its queue holds (emptied)."""
    out: dict[str, list[Any]] = {}
    for k, q in queues.items():
        out[k] = []
        while True:
            method, props, _ = ch.basic_get(q, auto_ack=True)
            if method is None:
                break
            out[k].append(props.headers)
    return out


def test_cc_and_bcc_headers_add_routing_keys(confirmed: BlockingChannel, names: Names) -> None:
    """RabbitMQ's sender-selected distribution: the message also goes where the keys
    in its CC and BCC arrays lead, once per queue; BCC is stripped, CC stays."""
    ex, queues = _cc_exchange(confirmed, names)
    confirmed.basic_publish(ex, "k1", b"m", pika.BasicProperties(
        headers={"CC": ["k2"], "BCC": ["k3"], "app": "kept"}))
    kept = {"CC": ["k2"], "app": "kept"}
    assert _got(confirmed, queues) == {"k1": [kept], "k2": [kept], "k3": [kept], "k4": []}


def test_cc_elements_not_longstr_are_skipped(confirmed: BlockingChannel, names: Names) -> None:
    ex, queues = _cc_exchange(confirmed, names)
    confirmed.basic_publish(ex, "k1", b"m", pika.BasicProperties(
        headers={"CC": ["k2", 5, "k2"], "BCC": ["k1", "k4"]}))
    kept = {"CC": ["k2", 5, "k2"]}
    assert _got(confirmed, queues) == {"k1": [kept], "k2": [kept], "k3": [], "k4": [kept]}


def test_cc_through_topic_and_default_exchanges(confirmed: BlockingChannel,
                                                names: Names) -> None:
    ex, queues = _cc_exchange(confirmed, names, "topic", ("a.*", "b.#", "c"))
    confirmed.basic_publish(ex, "nowhere", b"m", pika.BasicProperties(
        headers={"CC": ["a.x", "b"], "BCC": ["a.y"]}))
    kept = {"CC": ["a.x", "b"]}
    assert _got(confirmed, queues) == {"a.*": [kept], "b.#": [kept], "c": []}
    q = names.queue("plain")
    confirmed.queue_declare(q)
    confirmed.basic_publish("", names.prefix + "-nobody", b"m",
                            pika.BasicProperties(headers={"BCC": [q]}))
    assert _got(confirmed, {"q": q}) == {"q": [{}]}


def test_cc_header_names_are_case_sensitive(confirmed: BlockingChannel, names: Names) -> None:
    ex, queues = _cc_exchange(confirmed, names)
    confirmed.basic_publish(ex, "k1", b"m", pika.BasicProperties(
        headers={"cc": ["k2"], "bcc": ["k3"]}))
    kept = {"cc": ["k2"], "bcc": ["k3"]}
    assert _got(confirmed, queues) == {"k1": [kept], "k2": [], "k3": [], "k4": []}


@pytest.mark.parametrize(("headers", "kind"), [
    ({"CC": "k2"}, '"CC",longstr'),
    ({"BCC": 5}, '"BCC",signedint'),
    ({"CC": {"k": "v"}}, '"CC",table'),
])
def test_cc_that_is_not_an_array_refuses_the_publish(
        connection: pika.BlockingConnection, names: Names, headers: dict[str, Any],
        kind: str) -> None:
    ch = connection.channel()
    q = names.queue()
    ch.queue_declare(q)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", q, b"m", pika.BasicProperties(headers=headers))
        ch.queue_declare(q, passive=True)  # a round trip: the close arrives first
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid message: {{unacceptable_type_in_header,{kind}}}")
    assert connection.is_open
    assert connection.channel().queue_declare(q, passive=True).method.message_count == 0
