"""What MQTT clients create always survives backup and restore (issue 33, item 8):
client ids whose queue names would pass AMQP's 255 bytes are refused at CONNECT,
filters whose binding keys would are refused at SUBSCRIBE, so the broker's own
export (GET /api/definitions) imports into a fresh broker (POST) without a 400.
Topic names past 255 bytes are refused too: an AMQP consumer's basic.deliver could
not carry their routing key (it killed that consumer's connection)."""

from __future__ import annotations

import httpx
import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
)
from amqplite.protocol.mqtt.properties import Properties
from amqplite.protocol.mqtt.subscriptions import MAX_CLIENT_ID_BYTES, MAX_FILTER_BYTES
from tests.brokerproc import BrokerProcess
from tests.server.mqttclient import V5, V311, RawClient, module_broker

mb = module_broker("mqtt-defs")
#: the broker the exports are restored into
target = module_broker("mqtt-defs-target")


def _connect(b: BrokerProcess, cid: str, version: int) -> tuple[RawClient, ConnAck]:
    raw = RawClient(b.mqtt_port, version)  # type: ignore[attr-defined]
    props = Properties(session_expiry_interval=3600) if version == V5 else Properties()
    raw.send(Connect(cid, protocol_level=version, clean_start=False, username="guest",
                     password=b"guest", properties=props))
    ack = raw.recv()
    assert isinstance(ack, ConnAck)
    return raw, ack


def _restore(source: BrokerProcess, target: BrokerProcess) -> None:
    with httpx.Client(auth=("guest", "guest"), timeout=60) as api:
        defs = api.get(f"{source.admin_url}/api/definitions")
        defs.raise_for_status()
        r = api.post(f"{target.admin_url}/api/definitions", content=defs.content,
                     headers={"content-type": "application/json"})
        assert r.status_code in (200, 204), r.text


@pytest.mark.parametrize("version", [V311, V5])
def test_long_client_id_refused_and_export_imports(mb: BrokerProcess, target: BrokerProcess,
                                                   version: int) -> None:
    """The reproduction: client ids of 300 and 5,000 bytes are refused (3.1.1 CONNACK 2,
    5.0 0x85) and leave nothing; one of 233 bytes is accepted, and the export with its
    queue (255 bytes) imports back."""
    for n in (300, 5000, MAX_CLIENT_ID_BYTES + 1):
        raw, ack = _connect(mb, f"{version}" + "x" * (n - 1), version)
        assert ack.reason_code == (ReasonCode.CLIENT_IDENTIFIER_NOT_VALID if version == V5
                                   else 2)
        assert raw.closed_by_broker()
    cid = f"{version}" + "y" * (MAX_CLIENT_ID_BYTES - 1)
    raw, ack = _connect(mb, cid, version)
    assert ack.reason_code == 0
    raw.send(Subscribe(1, (Subscription("long/#", 1),)))
    assert raw.recv() == SubAck(1, (1,))
    raw.send(Disconnect())
    assert raw.closed_by_broker()
    _restore(mb, target)
    r = httpx.get(f"{target.admin_url}/api/queues", auth=("guest", "guest"))
    assert f"mqtt-subscription-{cid}qos1" in {q["name"] for q in r.json()}


_char = st.characters(blacklist_categories=("Cs", "Cc"))
_level = st.one_of(st.sampled_from(["+", "a", "$x"]),
                   st.text(st.characters(blacklist_categories=("Cs", "Cc"),
                                         blacklist_characters="/+#"), max_size=40))


@st.composite
def _filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(_level, min_size=1, max_size=12))
    f = "/".join(levels) or "a"
    if draw(st.booleans()):
        f += "/#"
    if draw(st.booleans()):
        group = draw(st.text(st.characters(blacklist_categories=("Cs", "Cc"),
                                           blacklist_characters="/+#"), min_size=1,
                             max_size=300))
        f = f"$share/{group}/{f}"
    return f


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cids=st.lists(st.one_of(st.text(_char, min_size=1, max_size=20),
                               st.text(_char, min_size=100, max_size=240)),
                     min_size=1, max_size=3),
       filters=st.lists(_filters(), min_size=1, max_size=4),
       version=st.sampled_from([V311, V5]))
def test_any_mqtt_state_exports_and_imports(mb: BrokerProcess, target: BrokerProcess,
                                            cids: list[str], filters: list[str],
                                            version: int) -> None:
    """Whatever persistent sessions, subscriptions and shared subscriptions clients
    with any client ids and filters set up (within the protocol's limits), the
    broker's export re-imports without a 400; ids and filters past the limits are
    refused with the codes the clients expect."""
    for cid in cids:
        raw, ack = _connect(mb, cid, version)
        too_long = len(cid.encode()) > MAX_CLIENT_ID_BYTES
        assert ack.reason_code == (0 if not too_long else
                                   ReasonCode.CLIENT_IDENTIFIER_NOT_VALID if version == V5 else 2)
        if too_long:
            raw.closed_by_broker()
            continue
        raw.send(Subscribe(1, tuple(Subscription(f, 1) for f in filters)))
        suback = raw.recv()
        assert isinstance(suback, SubAck)
        for f, code in zip(filters, suback.reason_codes, strict=True):
            rest = f.split("/", 2)[2] if f.startswith("$share/") else f
            if len(rest.encode()) > MAX_FILTER_BYTES:
                assert code == (ReasonCode.TOPIC_FILTER_INVALID if version == V5 else 0x80)
        raw.send(Disconnect())
        raw.closed_by_broker()
    _restore(mb, target)


def test_long_topic_refused_and_amqp_consumers_unharmed(mb: BrokerProcess) -> None:
    """A PUBLISH to a topic over 255 bytes: MQTT 5 PUBACK 0x90 (the connection stays),
    3.1.1 closed; an AMQP consumer of ``#`` on amq.topic keeps its connection and gets
    the next message."""
    amqp = pika.BlockingConnection(pika.URLParameters(mb.url))
    ch = amqp.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.topic", "long.#")
    long = "long/" + "x" * 251  # 256 bytes
    v5, ack = _connect(mb, "long-topic-5", V5)
    assert ack.reason_code == 0
    v5.send(Publish(long, b"too long", qos=1, packet_id=1))
    assert v5.recv() == PubAck(1, ReasonCode.TOPIC_NAME_INVALID)
    v5.send(Publish(long[:255], b"fits", qos=1, packet_id=2))
    assert v5.recv() == PubAck(2, 0)
    v311, ack = _connect(mb, "long-topic-4", V311)
    assert ack.reason_code == 0
    v311.send(Publish(long, b"too long", qos=1, packet_id=1))
    assert v311.closed_by_broker()
    method, _props, body = next(ch.consume(q, inactivity_timeout=15))
    assert method is not None and (len(method.routing_key), body) == (255, b"fits")
    assert amqp.is_open
    amqp.close()
    v5.send(Disconnect())
