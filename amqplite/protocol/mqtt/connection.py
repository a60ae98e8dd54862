"""MQTTConnection: the server side of one MQTT connection, sans I/O.

Bytes in (``receive_data(data, now)``), events out (``next_event()``), bytes
to write out (``data_to_send()``); the shell answers events by calling
``accept``/``reject``/``ack_publish``/``send_suback``/... and sends
application messages with ``send_publish``. No sockets, no clocks (the shell
passes ``now``), no randomness except the uuid of an assigned client id.

What lives here is what one connection can check alone: packet order, the
QoS 1/2 flows and their packet ids, receive maximum both ways, topic aliases
both ways, maximum packet size both ways, keep-alive deadlines and every
MUST the specs place on a server that needs no broker state. Sessions (what
survives the connection) are the shell's: it reads :meth:`inflight` and
:meth:`awaiting_pubrel` and hands them back to :meth:`resume`.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Iterator

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.mqtt.datatypes import pack_u16
from amqplite.protocol.mqtt.decoder import Decoder
from amqplite.protocol.mqtt.errors import MQTTError, ReasonCode, connack_code_311, protocol_error
from amqplite.protocol.mqtt.events import (
    AuthReceived,
    ConnectReceived,
    DisconnectReceived,
    MQTTEvent,
    PingReceived,
    ProtocolViolation,
    PubAckReceived,
    PubCompReceived,
    PublishReceived,
    PubRecReceived,
    PubRelReceived,
    SubscribeReceived,
    SubscribeRequest,
    UnsubscribeReceived,
)
from amqplite.protocol.mqtt.packets import (
    CONNECT,
    MQTT_5,
    MQTT_31,
    VALID_REASON_CODES,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    encode,
    encode_publish,
)
from amqplite.protocol.mqtt.properties import CONNACK, DISCONNECT, EMPTY, Properties
from amqplite.protocol.mqtt.subscriptions import (
    MAX_CLIENT_ID_BYTES,
    MAX_FILTER_BYTES,
    MAX_TOPIC_BYTES,
)
from amqplite.protocol.mqtt.topics import SubscriptionFilter, parse_filter

MAX_PACKET_ID = 65_535


class State(enum.Enum):
    AWAIT_CONNECT = "await-connect"
    CONNECTING = "connecting"  # CONNECT received, the shell has not answered yet
    CONNECTED = "connected"
    CLOSED = "closed"


@mypyc_attr(native_class=False)
@attrs.frozen
class ServerLimits:
    """What this server accepts and advertises (MQTT 5 CONNACK properties)."""

    max_packet_size: int = 16 * 1024 * 1024
    # RabbitMQ's mqtt.max_packet_size_unauthenticated: CONNECT and AUTH before acceptance
    max_packet_size_unauthenticated: int = 65_536
    receive_maximum: int = 65_535
    topic_alias_maximum: int = 16
    maximum_qos: int = 2
    retain_available: bool = True
    wildcard_subscription_available: bool = True
    subscription_identifier_available: bool = True
    shared_subscription_available: bool = True
    # MQTT 5 (Mosquitto's max_keepalive): a keep alive of 0 or above this is replaced
    # by it, told in the CONNACK's Server Keep Alive; 3.1.1 clients keep theirs
    server_keep_alive: int | None = None
    connect_timeout: float = 10.0  # seconds from the socket to a CONNECT
    # client ids and filters whose queue names and binding keys fit AMQP's 255 bytes,
    # so what MQTT creates always exports and imports back (definitions)
    max_client_id_bytes: int = MAX_CLIENT_ID_BYTES
    max_filter_bytes: int = MAX_FILTER_BYTES
    # topic names (PUBLISH: the shell answers; a will's: refused at CONNECT)
    max_topic_bytes: int = MAX_TOPIC_BYTES


class InFlight:
    """An outbound QoS 1/2 PUBLISH not yet completed. ``publish`` has the full
    topic (no alias) and its packet id; ``released`` means PUBREC came and
    PUBREL went out, so only PUBCOMP is awaited. A plain class, not attrs: one is
    made per QoS 1/2 delivery, and compiled it is a native one."""

    __slots__ = ("publish", "released")

    def __init__(self, publish: Publish, released: bool = False) -> None:
        self.publish = publish
        self.released = released

    @property
    def packet_id(self) -> int:
        assert self.publish.packet_id is not None
        return self.publish.packet_id


class OutgoingPublish:
    """What ``send_publish`` queued: its packet id (None at QoS 0) and size. A plain
    class, as InFlight."""

    __slots__ = ("packet_id", "size")

    def __init__(self, packet_id: int | None, size: int) -> None:
        self.packet_id = packet_id
        self.size = size


class FlowControlError(Exception):
    """The shell sent a QoS 1/2 PUBLISH with no room in the client's receive
    maximum (or no free packet id); check ``window`` first."""


def _try_parse(raw: str) -> SubscriptionFilter | None:
    try:
        return parse_filter(raw)
    except MQTTError:
        return None


class MQTTConnection:
    """One client connection, server side."""

    def __init__(self, limits: ServerLimits | None = None, now: float = 0.0) -> None:
        self.limits = limits or ServerLimits()
        self.state = State.AWAIT_CONNECT
        self.version = 0  # protocol level once CONNECT arrived (3, 4 or 5)
        self.client_id = ""
        self.connect: Connect | None = None
        self.keep_alive = 0
        self._decoder = Decoder(max_packet_size=self.limits.max_packet_size_unauthenticated)
        self._out = bytearray()
        self._last_rx = now
        self._deadline: float | None = now + self.limits.connect_timeout
        # what the client asked for (MQTT 5 CONNECT properties, defaults otherwise)
        self.client_receive_maximum = MAX_PACKET_ID
        self.client_max_packet_size: int | None = None
        self.client_topic_alias_maximum = 0
        self.request_problem_information = True
        self.session_expiry_interval = 0
        # outbound QoS 1/2 in flight, in send order
        self._inflight: dict[int, InFlight] = {}
        self._next_id = 1
        # inbound: QoS 1 ids not yet PUBACKed; QoS 2 ids -> PUBREC already sent
        # (a dict as a set: an empty set is 216 bytes, an empty dict 64, per connection)
        self._in_qos1: dict[int, None] = {}
        self._in_qos2: dict[int, bool] = {}
        self._alias_in: dict[int, str] = {}
        self._alias_out: dict[str, int] = {}

    # ------------------------------------------------------------ plumbing

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> None:
        """Bytes from the socket at time ``now`` (the shell handles end of stream itself)."""
        if self.state is State.CLOSED:
            return
        self._last_rx = now
        if self.keep_alive and self.state is State.CONNECTED:
            # [MQTT-3.1.2-24] (3.1.1) / [MQTT-3.1.2-22] (5.0): 1.5 x keep alive
            self._deadline = now + 1.5 * self.keep_alive
        self._decoder.receive(data)

    def data_to_send(self) -> bytes:
        """Everything queued for the socket, in order."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def pending_bytes(self) -> int:
        """Bytes queued and not yet taken by ``data_to_send`` (the shell's back-pressure)."""
        return len(self._out)

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def deadline(self) -> float | None:
        """When the connection expires without another packet (None: never)."""
        return None if self.state is State.CLOSED else self._deadline

    def check_deadline(self, now: float) -> bool:
        """True when the keep-alive (or CONNECT) deadline has passed; the
        connection is then closed (MQTT 5 clients get DISCONNECT 0x8D)."""
        if self._deadline is None or now < self._deadline or self.state is State.CLOSED:
            return False
        if self.state is State.CONNECTED and self.version >= MQTT_5:
            self._write(Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT))
        self.state = State.CLOSED
        return True

    def events(self) -> Iterator[MQTTEvent]:
        while (event := self.next_event()) is not None:
            yield event

    def next_event(self) -> MQTTEvent | None:
        """The next thing the client did, or None until more bytes (or an
        answer to ConnectReceived) arrive."""
        while True:
            if self.state is State.CLOSED:
                return None
            if self.state is State.CONNECTING and self._auth_method() is None:
                return None  # hold pipelined packets until accept(): limits depend on it
            try:
                packet = self._decoder.next_packet()
                if packet is None:
                    return None
                event = self._dispatch(packet)
            except MQTTError as err:
                return self._violation(err)
            if event is not None:
                return event

    def _write(self, packet: Packet) -> int:
        data = encode(packet, self.version or 4)
        self._out += data
        return len(data)

    def _auth_method(self) -> str | None:
        return None if self.connect is None else self.connect.properties.authentication_method

    # ------------------------------------------------------------ errors

    def _violation(self, err: MQTTError) -> ProtocolViolation:
        """Answer a broken rule as the version asks, then close."""
        code = err.reason_code
        if self.state is State.CONNECTED:
            if self.version >= MQTT_5:
                # 4.13.2: DISCONNECT with the reason code before closing
                self._write_disconnect(code, err.message)
        elif err.packet_type == CONNECT or self.state is State.CONNECTING:
            self._write_connack_error(code, err.message)
        # else: the first packet was not a CONNECT [MQTT-3.1.0-1]: close, say nothing
        self.state = State.CLOSED
        return ProtocolViolation(code, err.message)

    def _write_connack_error(self, code: int, message: str) -> None:
        version = self._decoder.version if self.version == 0 else self.version
        # [MQTT-3.2.2-6] session present 0 with a failure code; [MQTT-3.2.2-7] then close, and
        # [MQTT-3.1.4-6] process nothing after the CONNECT (the caller sets State.CLOSED)
        if version >= MQTT_5 and code != ReasonCode.UNSUPPORTED_PROTOCOL_VERSION:
            if code not in VALID_REASON_CODES[CONNACK]:  # [MQTT-3.2.2-8]
                code = ReasonCode.UNSPECIFIED_ERROR
            props = Properties(reason_string=message) if message else EMPTY
            self._out += self._fit(ConnAck(False, code, props), MQTT_5)
            return
        legacy = connack_code_311(code)
        if legacy is not None:
            # [MQTT-3.1.2-2] (3.1.1): unacceptable protocol level -> CONNACK 0x01;
            # a client of unknown level gets the 3.1.1 form
            self._out += encode(ConnAck(False, legacy), min(version, 4) or 4)

    def _write_disconnect(self, code: int, message: str | None = None) -> None:
        # [MQTT-3.14.2-1] a DISCONNECT reason code; [MQTT-3.14.2-2] no session expiry from us
        if code not in VALID_REASON_CODES[DISCONNECT]:
            code = ReasonCode.UNSPECIFIED_ERROR
        props = Properties(reason_string=message) if message else EMPTY
        self._out += self._fit(Disconnect(code, props), self.version)

    def _fit(
        self,
        packet: ConnAck | Disconnect | PubAck | PubRec | PubRel | PubComp | SubAck | UnsubAck,
        version: int,
    ) -> bytes:
        """Encode a non-PUBLISH packet within the client's maximum packet size,
        dropping reason string and user properties when they do not fit, or when
        the client asked for no problem information ([MQTT-3.1.2-29])."""
        props = packet.properties
        if props and not self.request_problem_information and not isinstance(packet, ConnAck | Disconnect):
            packet = attrs.evolve(
                packet, properties=attrs.evolve(props, reason_string=None, user_properties=())
            )
        data = encode(packet, version)
        limit = self.client_max_packet_size
        if limit is not None and len(data) > limit and packet.properties:
            # [MQTT-3.1.2-24]: never exceed the client's Maximum Packet Size
            props = attrs.evolve(packet.properties, reason_string=None, user_properties=())
            data = encode(attrs.evolve(packet, properties=props), version)
        return data

    # ------------------------------------------------------------ inbound

    def _dispatch(self, packet: Packet) -> MQTTEvent | None:
        state = self.state
        if state is State.AWAIT_CONNECT:
            if not isinstance(packet, Connect):
                # [MQTT-3.1.0-1]: the first packet from the client MUST be CONNECT
                raise protocol_error("first packet is not CONNECT", getattr(packet, "TYPE", 0))
            return self._on_connect(packet)
        if isinstance(packet, Connect):
            raise protocol_error("second CONNECT", CONNECT)  # [MQTT-3.1.0-2]
        if state is State.CONNECTING:
            # [MQTT-3.1.2-30]: during enhanced authentication only AUTH and DISCONNECT
            if isinstance(packet, Auth):
                return AuthReceived(packet)
            if isinstance(packet, Disconnect):
                return self._on_disconnect(packet)
            raise protocol_error("packet before the end of authentication")
        if isinstance(packet, Publish):
            return self._on_publish(packet)
        if isinstance(packet, PubAck):
            return self._on_puback(packet)
        if isinstance(packet, PubRec):
            return self._on_pubrec(packet)
        if isinstance(packet, PubRel):
            return self._on_pubrel(packet)
        if isinstance(packet, PubComp):
            return self._on_pubcomp(packet)
        if isinstance(packet, Subscribe):
            return self._on_subscribe(packet)
        if isinstance(packet, Unsubscribe):
            parsed = tuple(_try_parse(f) for f in packet.topic_filters)
            return UnsubscribeReceived(packet.packet_id, packet.topic_filters, parsed, packet.properties)
        if isinstance(packet, PingReq):
            self._write(PingResp())  # [MQTT-3.12.4-1]
            return PingReceived()
        if isinstance(packet, Disconnect):
            return self._on_disconnect(packet)
        if isinstance(packet, Auth):
            if self._auth_method() is None:
                raise protocol_error("AUTH without an authentication method in CONNECT")
            return AuthReceived(packet)
        # CONNACK, SUBACK, UNSUBACK, PINGRESP only travel server -> client
        raise protocol_error(f"{type(packet).__name__} sent by a client", packet.TYPE)

    def _on_connect(self, c: Connect) -> ConnectReceived:
        self.version = c.protocol_level
        self.connect = c
        limits = self.limits
        client_id = c.client_id
        assigned = False
        if not client_id:
            if c.protocol_level == MQTT_31 or (c.protocol_level == 4 and not c.clean_start):
                # 3.1 needs an id; 3.1.1: empty id with clean session 0 -> 0x02 [MQTT-3.1.3-8]
                raise MQTTError(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client identifier", CONNECT)
            client_id = f"amqplite-{uuid.uuid4().hex}"  # [MQTT-3.1.3-6]
            assigned = True
        elif len(client_id.encode()) > limits.max_client_id_bytes:  # [MQTT-3.1.3-5] allows it
            raise MQTTError(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                            f"client identifier longer than {limits.max_client_id_bytes} bytes",
                            CONNECT)
        if c.will is not None:
            if c.will.qos > limits.maximum_qos:
                raise MQTTError(
                    ReasonCode.QOS_NOT_SUPPORTED, "will QoS above maximum", CONNECT
                )  # [MQTT-3.2.2-12]
            if c.will.retain and not limits.retain_available:
                raise MQTTError(ReasonCode.RETAIN_NOT_SUPPORTED, "retained will", CONNECT)  # [MQTT-3.2.2-13]
            if len(c.will.topic.encode()) > limits.max_topic_bytes:
                raise MQTTError(ReasonCode.TOPIC_NAME_INVALID,
                                f"will topic longer than {limits.max_topic_bytes} bytes", CONNECT)
        props = c.properties
        if props.receive_maximum is not None:
            self.client_receive_maximum = props.receive_maximum
        self.client_max_packet_size = props.maximum_packet_size
        self.client_topic_alias_maximum = props.topic_alias_maximum or 0
        self.request_problem_information = props.request_problem_information != 0
        self.session_expiry_interval = props.session_expiry_interval or 0
        if c.password is not None and c.username is None and self.version < MQTT_5:
            raise MQTTError(ReasonCode.MALFORMED_PACKET, "password without user name", CONNECT)
        self.client_id = client_id
        self.state = State.CONNECTING
        return ConnectReceived(c, client_id, assigned)

    def _on_publish(self, p: Publish) -> PublishReceived | None:
        limits = self.limits
        props = p.properties
        if p.qos > limits.maximum_qos:
            # [MQTT-3.2.2-11] binds the client; 3.2.2.3.4: answer DISCONNECT 0x9B
            raise MQTTError(ReasonCode.QOS_NOT_SUPPORTED, f"QoS {p.qos} above maximum")
        if p.retain and not limits.retain_available:
            raise MQTTError(ReasonCode.RETAIN_NOT_SUPPORTED, "retain not supported")  # [MQTT-3.2.2-14]
        if props.subscription_identifiers:
            raise protocol_error("PUBLISH from a client with a subscription identifier")  # [MQTT-3.3.4-6]
        alias = props.topic_alias
        if alias is not None:
            if alias == 0 or alias > limits.topic_alias_maximum:
                # [MQTT-3.3.2-8] alias 0; [MQTT-3.2.2-17], [MQTT-3.3.2-9] above our Topic Alias Maximum
                raise MQTTError(ReasonCode.TOPIC_ALIAS_INVALID, f"topic alias {alias}")
            if p.topic:
                self._alias_in[alias] = p.topic
            else:
                topic = self._alias_in.get(alias)
                if topic is None:
                    raise protocol_error(f"unknown topic alias {alias}")  # 3.3.2.3.4
                p = attrs.evolve(p, topic=topic)
        elif not p.topic:
            raise protocol_error("empty topic without a topic alias")  # 3.3.2.1
        if p.qos == 0:
            return PublishReceived(p)
        pid = p.packet_id
        assert pid is not None
        if p.qos == 2 and pid in self._in_qos2:
            # 4.3.3: a PUBLISH whose id awaits PUBREL is the same message: deliver it
            # once; answer a retransmission with PUBREC again if we already had
            if self._in_qos2[pid]:
                self._write(PubRec(pid))
            return None
        pending = len(self._in_qos1) + len(self._in_qos2)
        if pid not in self._in_qos1 and pid not in self._in_qos2 and pending >= limits.receive_maximum:
            # 3.3.4: more unacknowledged QoS 1/2 than our Receive Maximum
            raise MQTTError(ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, "receive maximum exceeded")
        if p.qos == 1:
            self._in_qos1[pid] = None
        else:
            if pid in self._in_qos1:
                raise MQTTError(ReasonCode.PACKET_IDENTIFIER_IN_USE, f"packet id {pid} in use")
            self._in_qos2[pid] = False
        return PublishReceived(p)

    def _on_pubrel(self, packet: PubRel) -> PubRelReceived:
        pid = packet.packet_id
        known = self._in_qos2.pop(pid, None) is not None
        code = 0 if known or self.version < MQTT_5 else ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
        self._write(PubComp(pid, code))  # 4.3.3: PUBCOMP with the PUBREL's packet id
        return PubRelReceived(pid, known)

    def _on_puback(self, packet: PubAck) -> PubAckReceived | None:
        entry = self._inflight.get(packet.packet_id)
        if entry is None or entry.publish.qos != 1:
            return None  # an ack for nothing: ignored, as Mosquitto does
        del self._inflight[packet.packet_id]
        return PubAckReceived(packet.packet_id, packet.reason_code)

    def _on_pubrec(self, packet: PubRec) -> PubRecReceived | None:
        pid = packet.packet_id
        entry = self._inflight.get(pid)
        if entry is None or entry.publish.qos != 2:
            if self.version >= MQTT_5:
                self._write(PubRel(pid, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
            else:
                self._write(PubRel(pid))
            return None
        if packet.reason_code >= 0x80:
            del self._inflight[pid]  # the flow ends; the id is free (4.3.3)
        else:
            self._inflight[pid] = InFlight(entry.publish, released=True)
            self._write(PubRel(pid))
        return PubRecReceived(pid, packet.reason_code)

    def _on_pubcomp(self, packet: PubComp) -> PubCompReceived | None:
        entry = self._inflight.get(packet.packet_id)
        if entry is None or not entry.released:
            return None
        del self._inflight[packet.packet_id]
        return PubCompReceived(packet.packet_id, packet.reason_code)

    def _on_subscribe(self, s: Subscribe) -> SubscribeReceived:
        limits = self.limits
        sub_ids = s.properties.subscription_identifiers
        if sub_ids and not limits.subscription_identifier_available:
            raise MQTTError(ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, "subscription identifiers")
        requests = []
        for sub in s.subscriptions:
            parsed = _try_parse(sub.topic_filter)
            code = 0 if parsed is not None else ReasonCode.TOPIC_FILTER_INVALID
            if parsed is not None and len(parsed.topic_filter.encode()) > limits.max_filter_bytes:
                code = ReasonCode.TOPIC_FILTER_INVALID  # its binding key would not fit
            elif parsed is not None:
                if parsed.share_group is not None:
                    if not limits.shared_subscription_available:
                        code = ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED
                    elif sub.no_local and self.version >= MQTT_5:
                        # [MQTT-3.8.3-4]: No Local on a shared subscription is a protocol error
                        raise protocol_error("no local on a shared subscription")
                wild = "+" in parsed.topic_filter or "#" in parsed.topic_filter
                if wild and not limits.wildcard_subscription_available:
                    code = ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED
            requests.append(
                SubscribeRequest(
                    sub.topic_filter,
                    parsed,
                    min(sub.qos, limits.maximum_qos),
                    sub.no_local,
                    sub.retain_as_published,
                    sub.retain_handling,
                    code,
                )
            )
        return SubscribeReceived(s.packet_id, tuple(requests), sub_ids[0] if sub_ids else None, s.properties)

    def _on_disconnect(self, d: Disconnect) -> DisconnectReceived:
        expiry = d.properties.session_expiry_interval
        if expiry and not self.session_expiry_interval:
            # 3.14.2.2.2: a non-zero expiry at DISCONNECT after 0 at CONNECT is a protocol error
            raise protocol_error("session expiry set at DISCONNECT after 0 at CONNECT", DISCONNECT)
        if expiry is not None:
            self.session_expiry_interval = expiry
        self.state = State.CLOSED  # [MQTT-3.14.4-1]: nothing more is read
        return DisconnectReceived(
            d.reason_code, d.reason_code == ReasonCode.DISCONNECT_WITH_WILL, expiry, d.properties
        )

    # ------------------------------------------------------------ answers

    def accept(self, session_present: bool = False, properties: Properties = EMPTY) -> None:
        """Send CONNACK 0 for the CONNECT of the last ConnectReceived.

        MQTT 5 CONNACK properties for our limits, the assigned client id and
        the server keep alive are filled in; ``properties`` adds the rest.
        """
        if self.state is not State.CONNECTING:
            raise RuntimeError(f"accept() in state {self.state}")
        c = self.connect
        assert c is not None
        limits = self.limits
        if c.clean_start:
            session_present = False  # [MQTT-3.2.2-2] (5.0), [MQTT-3.2.2-1] (3.1.1)
        keep_alive = c.keep_alive
        if self.version >= MQTT_5:
            extra: dict[str, object] = {}
            if self.client_id != c.client_id:
                extra["assigned_client_identifier"] = self.client_id
            cap = limits.server_keep_alive
            if cap is not None and (keep_alive == 0 or keep_alive > cap):
                keep_alive = cap
                extra["server_keep_alive"] = keep_alive
            if limits.receive_maximum != MAX_PACKET_ID:
                extra["receive_maximum"] = limits.receive_maximum
            if limits.topic_alias_maximum:
                extra["topic_alias_maximum"] = limits.topic_alias_maximum
            if limits.maximum_qos < 2:
                extra["maximum_qos"] = limits.maximum_qos
            extra["maximum_packet_size"] = limits.max_packet_size
            for name in (
                "retain_available",
                "wildcard_subscription_available",
                "subscription_identifier_available",
                "shared_subscription_available",
            ):
                if not getattr(limits, name):
                    extra[name] = 0
            if not c.properties.request_response_information:
                extra["response_information"] = None  # [MQTT-3.1.2-28]
            properties = attrs.evolve(properties, **extra)  # type: ignore[arg-type]
        self._out += self._fit(ConnAck(session_present, 0, properties), self.version)
        self.keep_alive = keep_alive
        self._deadline = self._last_rx + 1.5 * keep_alive if keep_alive else None
        self._decoder.max_packet_size = limits.max_packet_size
        self.state = State.CONNECTED

    def reject(self, reason_code: int, reason_string: str | None = None) -> None:
        """Refuse the CONNECT (or end an AUTH exchange) with an MQTT 5 reason code;
        3.1/3.1.1 clients get the nearest return code, or a bare close."""
        if self.state is not State.CONNECTING:
            raise RuntimeError(f"reject() in state {self.state}")
        self._write_connack_error(reason_code, reason_string or "")
        self.state = State.CLOSED

    def send_auth(self, reason_code: int, properties: Properties = EMPTY) -> None:
        """MQTT 5 AUTH (enhanced authentication continue / re-authenticate)."""
        self._write(Auth(reason_code, properties))

    def ack_publish(self, packet_id: int, reason_code: int = 0, properties: Properties = EMPTY) -> bool:
        """PUBACK (QoS 1) or PUBREC (QoS 2) for an inbound PUBLISH, once the shell
        has taken responsibility for the message. False if the id is not pending."""
        if self.state is State.CLOSED:
            return False
        if packet_id in self._in_qos1:
            del self._in_qos1[packet_id]
            if reason_code == 0 and properties is EMPTY:
                self._out += b"\x40\x02" + pack_u16(packet_id)  # the common PUBACK, preencoded
            else:
                self._out += self._fit(PubAck(packet_id, reason_code, properties), self.version)
            return True
        if self._in_qos2.get(packet_id) is False:
            if reason_code >= 0x80:
                del self._in_qos2[packet_id]  # 4.3.3: a failed PUBREC ends the flow
            else:
                self._in_qos2[packet_id] = True
            self._out += self._fit(PubRec(packet_id, reason_code, properties), self.version)
            return True
        return False

    def send_suback(
        self, packet_id: int, reason_codes: Iterable[int], properties: Properties = EMPTY
    ) -> None:
        """SUBACK with one code per requested filter ([MQTT-3.8.4-6]); codes >= 0x80
        become 0x80 for 3.1.1, the only failure it knows."""
        codes = tuple(reason_codes)
        if self.version < MQTT_5:
            codes = tuple(c if c < 0x80 else 0x80 for c in codes)
        self._out += self._fit(SubAck(packet_id, codes, properties), self.version)

    def send_unsuback(
        self, packet_id: int, reason_codes: Iterable[int], properties: Properties = EMPTY
    ) -> None:
        """UNSUBACK (reason codes are sent to MQTT 5 clients only)."""
        self._out += self._fit(UnsubAck(packet_id, tuple(reason_codes), properties), self.version)

    def disconnect(self, reason_code: int = 0, reason_string: str | None = None) -> None:
        """Close from the server side: MQTT 5 gets DISCONNECT with the reason
        (0x8E session taken over, 0x8B shutting down, ...); 3.1.1 a bare close."""
        if self.state is State.CONNECTED and self.version >= MQTT_5:
            self._write_disconnect(reason_code, reason_string)
        elif self.state is State.CONNECTING:
            self._write_connack_error(reason_code, reason_string or "")
        self.state = State.CLOSED

    # ------------------------------------------------------------ outbound publish

    @property
    def window(self) -> int:
        """How many more QoS 1/2 PUBLISH the client's Receive Maximum allows now."""
        return max(0, min(self.client_receive_maximum, MAX_PACKET_ID) - len(self._inflight))

    def inflight(self) -> list[InFlight]:
        """Outbound QoS 1/2 messages awaiting PUBACK/PUBREC/PUBCOMP, oldest first."""
        return list(self._inflight.values())

    def awaiting_pubrel(self) -> frozenset[int]:
        """Inbound QoS 2 packet ids acknowledged with PUBREC and not yet released."""
        return frozenset(pid for pid, sent in self._in_qos2.items() if sent)

    def shares_publish(self) -> bool:
        """May a QoS 0 PUBLISH encoded once for every subscriber (``encode_publish``
        at this ``version``, no properties) be sent here as it is? Not when MQTT 5
        topic aliases rewrite the topic per connection."""
        return self.version < MQTT_5 or not self.client_topic_alias_maximum

    def send_encoded(self, data: bytes) -> bool:
        """Queue a QoS 0 PUBLISH encoded for several connections (``shares_publish``);
        False when it is larger than the client's Maximum Packet Size
        ([MQTT-3.1.2-25]: discarded, as ``send_publish`` discards it)."""
        limit = self.client_max_packet_size
        if limit is not None and len(data) > limit:
            return False
        self._out += data
        return True

    def resume(self, inflight: Iterable[InFlight], awaiting_pubrel: Iterable[int] = ()) -> None:
        """Restore a session after ``accept(session_present=True)``: resend unacknowledged
        PUBLISH with DUP set and PUBREL for released ones, in order ([MQTT-4.4.0-1])."""
        for pid in awaiting_pubrel:
            self._in_qos2[pid] = True
        for entry in inflight:
            self._inflight[entry.packet_id] = entry
            if entry.released:
                self._write(PubRel(entry.packet_id))
            else:
                self._out += self._encode_publish(attrs.evolve(entry.publish, dup=True), alias=False)

    def _allocate_id(self) -> int:
        for _ in range(MAX_PACKET_ID):
            pid = self._next_id
            self._next_id = pid % MAX_PACKET_ID + 1
            if pid not in self._inflight:
                return pid
        raise FlowControlError("no free packet identifier")

    def _encode_publish(self, p: Publish, alias: bool = True) -> bytes:
        if alias and self.client_topic_alias_maximum and self.version >= MQTT_5:
            known = self._alias_out.get(p.topic)
            if known is not None:
                p = attrs.evolve(p, topic="", properties=attrs.evolve(p.properties, topic_alias=known))
            elif len(self._alias_out) < self.client_topic_alias_maximum:
                # [MQTT-3.1.2-26]: aliases up to the client's Topic Alias Maximum only
                new = len(self._alias_out) + 1
                self._alias_out[p.topic] = new
                p = attrs.evolve(p, properties=attrs.evolve(p.properties, topic_alias=new))
        return encode_publish(p, self.version)

    def send_publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        properties: Properties = EMPTY,
        packet_id: int | None = None,
        dup: bool = False,
    ) -> OutgoingPublish | None:
        """Queue an application message for the client.

        QoS 1/2 take a free packet id and count against the client's Receive
        Maximum ([MQTT-3.3.4-9]; raises FlowControlError when ``window`` is 0).
        A resent message (``dup``) keeps the ``packet_id`` it was first sent with
        ([MQTT-4.4.0-1]) when that id is free, else it takes another.
        A message larger than the client's Maximum Packet Size is discarded and
        None returned ([MQTT-3.1.2-25]): the shell treats it as delivered.
        ``properties`` must already carry the remaining message expiry
        ([MQTT-3.3.2-6]) and the matching subscription identifiers.
        """
        if self.state is not State.CONNECTED:
            raise RuntimeError(f"send_publish() in state {self.state}")
        pid = None
        if qos:
            if self.window <= 0:
                raise FlowControlError("client receive maximum reached")
            pid = packet_id if packet_id and packet_id not in self._inflight else self._allocate_id()
        if properties.topic_alias is not None:
            properties = attrs.evolve(properties, topic_alias=None)
        publish = Publish(topic, payload, qos, retain, dup and qos > 0, pid, properties)
        data = self._encode_publish(publish)
        limit = self.client_max_packet_size
        if limit is not None and len(data) > limit:
            return None
        if pid is not None:
            self._inflight[pid] = InFlight(publish)
        self._out += data
        return OutgoingPublish(pid, len(data))
