"""The pure parts of links: URIs, shovel definitions, the client protocol's
handshake and content assembly (bytes in, events out), message shaping."""

from __future__ import annotations

from typing import Any

import pytest

from amqplite.links import config, federation_config, uri
from amqplite.links.client_protocol import ClientProtocol, ContentIn, MethodIn, Opened, ProtocolFailure
from amqplite.links.shovel import outgoing
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.frames import encode_content, encode_frame
from amqplite.protocol.methods import (
    BasicDeliver,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    decode_method,
    encode_method,
)
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from amqplite.protocol.spec import PROTOCOL_HEADER


def frames(data: bytes) -> list[Any]:
    """Methods of the frames in ``data`` (method frames only)."""
    out, i = [], 0
    while i < len(data):
        kind, size = data[i], int.from_bytes(data[i + 3:i + 7], "big")
        if kind == 1:
            out.append(decode_method(data[i + 7:i + 7 + size]))
        i += 8 + size
    return out


def method(channel: int, m: Any) -> bytes:
    return encode_frame(1, channel, encode_method(m))


def test_uri_parsing() -> None:
    ep = uri.parse("amqps://u%40x:p%3Aw@host.example:5999/v%2Fh?heartbeat=7&verify=verify_none"
                   "&server_name_indication=sni.example&cacertfile=/ca.pem")
    assert (ep.tls, ep.host, ep.port, ep.vhost, ep.user, ep.password) == (
        True, "host.example", 5999, "v/h", "u@x", "p:w")
    assert (ep.heartbeat, ep.verify, ep.server_name, ep.cacertfile) == (
        7, False, "sni.example", "/ca.pem")
    local = uri.parse("amqp://")
    assert local.local and local.vhost == "/" and local.port == 5672
    assert uri.parse("amqps://h").port == 5671
    assert uri.parse("amqp://h/%2F").vhost == "/"
    for bad, why in [("http://h", "scheme"), ("amqp://h?nope=1", "nope"),
                     ("amqp://h/a/b", "one path segment"), ("amqp://h?heartbeat=x", "heartbeat"),
                     ("amqp://h:99999", "not a valid URI")]:
        with pytest.raises(ValueError, match=why):
            uri.parse(bad, "src-uri")


def test_mask() -> None:
    assert uri.mask("amqp://u:secret@h:5672/v") == "amqp://u:***@h:5672/v"
    assert uri.mask("amqp://h/v") == "amqp://h/v"
    assert uri.mask("amqp://u:p%40ss@[::1]/v?x=1") == "amqp://u:***@[::1]/v?x=1"
    assert "secret" not in uri.mask("amqp://u:secret@h:bad/v")


def test_shovel_config_defaults_and_errors() -> None:
    spec = config.parse({"src-uri": "amqp://", "src-queue": "a", "dest-uri": ["amqp://h"]})
    assert spec.ack_mode == "on-confirm" and spec.prefetch == 1000
    assert spec.delete_after == "never" and spec.dest_uris == ("amqp://h",)
    assert config.parse({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://",
                         "src-delete-after": 5}).delete_after == 5
    with pytest.raises(ValueError, match=r"^src-delete-after"):
        config.parse({"src-uri": "amqp://", "src-exchange": "x", "dest-uri": "amqp://",
                      "src-delete-after": "queue-length"})
    with pytest.raises(ValueError, match=r"^src-protocol"):
        config.parse({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://",
                      "src-protocol": "amqp10"})
    masked = config.masked({"src-uri": "amqp://u:pw@h", "dest-uri": ["amqp://u:pw@h"]})
    assert masked == {"src-uri": "amqp://u:***@h", "dest-uri": ["amqp://u:***@h"]}


@pytest.mark.parametrize(("raw", "why"), [
    (None, "is required (a URI or a non-empty list of URIs)"),
    ([], "must be a URI or a non-empty list of URIs"),
    (7, "must be a URI or a non-empty list of URIs"),
    (["amqp://h", "http://h"], "scheme must be amqp:// or amqps://"),
])
def test_uri_fields_are_read_alike_by_shovels_and_federation(raw: Any, why: str) -> None:
    """A shovel's src-uri/dest-uri and an upstream's uri follow one rule and one wording
    (null reads as missing), each refusal naming its own field."""
    shovel = {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://"}
    for field, check in [("src-uri", config.parse), ("dest-uri", config.parse),
                         ("uri", federation_config.parse_upstream)]:
        value = {**shovel, field: raw} if field != "uri" else {"uri": raw}
        with pytest.raises(ValueError) as exc:
            check(value)
        assert str(exc.value).startswith(f"{field}: {why}"), exc.value
    with pytest.raises(ValueError, match=r"^uri: is required \(a URI"):
        federation_config.parse_upstream({"max-hops": 2})
    assert federation_config.masked_upstream({"uri": ["amqp://u:pw@h", 3], "max-hops": 2}) == \
        {"uri": ["amqp://u:***@h", 3], "max-hops": 2}
    assert federation_config.masked_upstream(["not", "a", "dict"]) == ["not", "a", "dict"]


def test_handshake_and_delivery() -> None:
    p = ClientProtocol("user", "pw", "vh", heartbeat=30)
    assert p.data_to_send() == PROTOCOL_HEADER
    assert p.feed(method(0, ConnectionStart(mechanisms="PLAIN AMQPLAIN"))) == []
    (start_ok,) = frames(p.data_to_send())
    assert isinstance(start_ok, ConnectionStartOk) and start_ok.response == b"\0user\0pw"
    assert p.feed(method(0, ConnectionTune(2047, 65536, 60))) == []
    tune_ok, open_ = frames(p.data_to_send())
    assert isinstance(tune_ok, ConnectionTuneOk) and tune_ok.heartbeat == 30
    assert tune_ok.frame_max == 65536
    assert isinstance(open_, ConnectionOpen) and open_.virtual_host == "vh"
    data = method(0, ConnectionOpenOk()) + method(1, ChannelOpenOk())
    ev = p.feed(data[:5]) + p.feed(data[5:])  # frames may arrive in pieces
    assert ev == [Opened(65536, 30), MethodIn(1, ChannelOpenOk())]
    props = encode_properties(BasicProperties(delivery_mode=2))
    body = b"x" * 150000  # several body frames
    raw = encode_content(1, encode_method(BasicDeliver("t", 7, False, "", "q")), 60, props,
                         body, 65536)
    got = [e for i in range(0, len(raw), 1000) for e in p.feed(raw[i:i + 1000])]
    assert got == [ContentIn(1, BasicDeliver("t", 7, False, "", "q"), props, body)]
    empty = encode_content(1, encode_method(BasicDeliver("t", 8, False, "", "q")), 60, props,
                           b"", 65536)
    assert p.feed(empty) == [ContentIn(1, BasicDeliver("t", 8, False, "", "q"), props,
                                       b"")]
    with pytest.raises(ProtocolFailure, match="320 bye"):
        p.feed(method(0, ConnectionClose(320, "bye")))


def test_refusals() -> None:
    p = ClientProtocol("u", "p", "/")
    with pytest.raises(ProtocolFailure, match="PLAIN"):
        p.feed(method(0, ConnectionStart(mechanisms="EXTERNAL")))
    with pytest.raises(ProtocolFailure, match="refused AMQP"):
        ClientProtocol("u", "p", "/").feed(b"AMQP\x00\x00\x09\x00")


def test_outgoing_shapes_the_publish() -> None:
    base = {"src-uri": "amqp://u:pw@a", "src-queue": "q", "dest-uri": "amqp://u:pw@b"}
    d = BasicDeliver("t", 1, False, "ex", "rk")
    props = encode_properties(BasicProperties(headers=FieldTable({"k": "v"})))
    assert outgoing(config.parse({**base, "dest-queue": "d"}), "s", "/", d, props,
                    "amqp://u:pw@a", "amqp://u:pw@b") == ("", "d", props)
    assert outgoing(config.parse(base), "s", "/", d, props, "", "")[:2] == ("ex", "rk")
    assert outgoing(config.parse({**base, "dest-exchange": "x"}), "s", "/", d, props, "",
                    "")[:2] == ("x", "rk")
    spec = config.parse({**base, "dest-exchange": "x", "dest-exchange-key": "k2",
                         "dest-add-forward-headers": True,
                         "dest-publish-properties": {"delivery_mode": 2}})
    ex, key, raw = outgoing(spec, "s", "vh", d, props, "amqp://u:pw@a", "amqp://u:pw@b")
    out = decode_properties(raw)
    assert (ex, key, out.delivery_mode, out.headers["k"]) == ("x", "k2", 2, "v")
    (fwd,) = out.headers["x-shovelled"]
    assert fwd["shovel-name"] == "s" and fwd["shovel-vhost"] == "vh"
    assert fwd["src-uri"] == "amqp://u:***@a" and fwd["dest-exchange"] == "x"
