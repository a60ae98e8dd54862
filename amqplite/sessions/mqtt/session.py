"""One connected MQTT session's rules, as RabbitMQ's MQTT plugin maps them onto the
AMQP core: CONNECT (takeover, clean start, expiry, will), PUBLISH into the
broker (topic limit, retained quota, QoS 2 ids), the publisher confirm as
PUBACK/PUBREC, the broker's deliveries as PUBLISH (subscription options, QoS
1/2 flows, in-flight ids) and the session's end.

A client is a broker session with three channels: one in confirm mode for its
PUBLISH (QoS 1/2 are acknowledged when the confirm arrives, i.e. after the
store commit), and one consumer channel for each of its queues
``mqtt-subscription-{clientid}qos0`` (no-ack) and ``...qos1`` (acked by PUBACK,
prefetch = the client's Receive Maximum).

Plain Python on the sans-I/O ``MQTTConnection``: ``now`` comes in (the hot path,
a delivery or a publish, reads the ``clock`` it was given, and only for MQTT 5
expiry), and the shell hands in its callables: ``wake`` (its writer has acks to send), ``flush``
(bytes are queued: send them, and mind the write buffer), ``finish`` (the
connection ends) and ``execute`` (a broker command whose Outcome is carried out
at once).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Set
from typing import Any

from mypy_extensions import mypyc_attr

import amqplite.sessions.mqtt.options as options
import amqplite.sessions.mqtt.shared as shared
from amqplite.broker import mqtt_retained
from amqplite.broker.core import Broker
from amqplite.broker.model import ChannelState, Session
from amqplite.broker.mqtt_offline import drop_waiting_qos0
from amqplite.broker.retained import RetainedSet
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import FlowControlError, InFlight, MQTTConnection, State
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.events import (
    ConnectReceived,
    MQTTEvent,
    PubAckReceived,
    PubCompReceived,
    PublishReceived,
    PubRecReceived,
    PubRelReceived,
)
from amqplite.protocol.mqtt.mapping import amqp_properties, message_qos
from amqplite.protocol.mqtt.packets import MQTT_5, Publish, Will
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from amqplite.protocol.mqtt.topics import topic_to_routing_key
from amqplite.sessions.mqtt.accounting import label, log_protocol
from amqplite.sessions.mqtt.common import (
    PUBLISH_CH,
    QOS1_CH,
    Login,
    queue_name,
    refused,
)
from amqplite.sessions.mqtt.inflight import NONE, PacketIds, with_id, without_id
from amqplite.sessions.mqtt.registry import SessionRegistry
from amqplite.sessions.mqtt.subscriptions import Subscriptions
from amqplite.sessions.mqtt.systree import is_sys
from amqplite.storeops import NEVER_EXPIRES, PutMQTTWill

log = logging.getLogger("amqplite.mqtt")


def _nothing() -> None:
    """The default of a shell callback nobody needs."""


def _run(command: Callable[..., Any], *args: Any) -> Any:
    return command(*args)


@mypyc_attr(native_class=False)  # compiled, a native class cannot subclass dict
class Channels(dict[int, ChannelState]):
    """The session's channels by number, each opened when first asked for with
    ``[n]`` (``get`` does not open one): an idle client holds no ChannelState
    (three were ~2.5 KiB a connection). The publish channel is in confirm mode."""

    __slots__ = ("broker", "session")

    def __init__(self, broker: Broker, session: Session) -> None:
        super().__init__()
        self.broker = broker
        self.session = session

    def __missing__(self, n: int) -> ChannelState:
        ch = self[n] = self.broker.open_channel(self.session, n)
        if n == PUBLISH_CH:
            self.broker.confirm_select(ch)
        return ch


class MQTTSession:
    """One connection's session; the broker's deliveries reach it through the shell."""

    # slots: one per connection, idle ones included (an instance dict was ~1 KiB)
    __slots__ = ("alive", "auto_acks", "broker", "channels", "client_id", "clock",
                 "confirms", "connected_at_ms", "execute", "finish", "flush", "hold", "ids",
                 "key", "last", "max_topic_bytes", "name", "persistent", "present", "proto",
                 "registry", "session", "subs", "tags", "transport", "unmatched", "wake",
                 "will")

    def __init__(self, registry: SessionRegistry, proto: MQTTConnection, name: str,
                 transport: Any = None, max_topic_bytes: int = 65_535,
                 wake: Callable[[], None] = _nothing, flush: Callable[[], None] = _nothing,
                 finish: Callable[[], None] = _nothing,
                 execute: Callable[..., Any] = _run,
                 clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.broker: Broker = registry.broker
        self.proto = proto
        #: the connection's name, for the log and the broker session
        self.name = name
        #: what the broker delivers through (the shell's connection; self when None)
        self.transport = self if transport is None else transport
        #: a PUBLISH topic longer than this is refused (an AMQP routing key's bound)
        self.max_topic_bytes = max_topic_bytes
        self.wake = wake
        self.flush = flush
        self.finish = finish
        self.execute = execute
        #: wall-clock seconds, for MQTT 5 message expiry
        self.clock = clock
        #: the connection is open (the shell clears it at the end)
        self.alive = True
        self.session: Session | None = None
        self.channels: dict[int, ChannelState] = {}
        #: the session's queues and bindings, from CONNECT to the session's end
        self.subs: Subscriptions | None = None
        self.client_id = ""
        #: the session: (vhost, client id), set once the CONNECT is accepted
        self.key = ("", "")
        #: clean session 0 (3.1.1) or a session expiry (5.0): queues outlive us
        self.persistent = False
        #: the CONNECT resumed state kept for its client id (CONNACK's session present)
        self.present = False
        #: MQTT 5 resumed a stored session with expiry 0: it ends with this connection
        self.last = False
        self.will: Will | None = None
        #: when the CONNECT was accepted, ms (0: not yet)
        self.connected_at_ms = 0
        #: publisher-confirm seq -> inbound packet id (None: QoS 0)
        self.confirms: dict[int, int | None] = {}
        #: MQTT 5: confirm seqs of QoS 1/2 publishes that reached no queue (their
        #: PUBACK/PUBREC says 0x10 No matching subscribers, as Mosquitto's does)
        self.unmatched: Set[int] = NONE
        #: outbound packet id -> delivery tag on the qos1 channel
        self.tags: dict[int, int] = {}
        #: the session's QoS 2 packet ids (the registry keeps them across connections)
        self.ids = PacketIds("", "")
        #: store ops were written that must commit before the bytes queued now leave
        #: (QoS 2 packet ids: a PUBLISH, PUBREL or PUBCOMP waits for its row)
        self.hold = False
        #: delivery tags of QoS 0 messages sent from the qos1 queue: the shell acks them
        self.auto_acks: list[int] = []

    # ------------------------------------------------------------ CONNECT
    def connect(self, ev: ConnectReceived, login: Login, now: float,
                ) -> tuple[Session, list[int]] | None:
        """Open the session of an authenticated CONNECT: take the client id over,
        start clean or resume, store the will and the session's row. Returns the
        broker session and the QoS of the queues it kept (for :meth:`accept`, once
        the store has committed), or None when the CONNECT was refused."""
        c = ev.connect
        reg = self.registry
        key = (login.vhost, ev.client_id)
        if not reg.may_take_over(key, login.user):  # mqtt_takeover = "user"
            log.warning("MQTT %s: client id %r of vhost %r belongs to another user",
                        self.name, ev.client_id, login.vhost)
            self.proto.reject(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID)
            return None
        self.client_id = ev.client_id
        self.key = key
        old = reg.clients.get(key)
        if old is not None and old is not self:
            old.take_over(now)  # [MQTT-3.1.4-3]: the existing client is disconnected
        reg.clients[key] = self
        reg.keep(key)
        self.persistent = (self.proto.session_expiry_interval > 0 if c.protocol_level >= MQTT_5
                           else not c.clean_start)
        b = self.broker
        s = self.session = b.open_session(login.user, login.vhost, self.name)
        s.client_properties = {"client_id": ev.client_id}
        s.client_id = ev.client_id  # {client_id} in topic permissions
        s.protocol = log_protocol(c.protocol_level)  # the delivery log's name
        s.transport = self.transport
        # opened as first used (a publish, a subscription): an idle client has none
        self.channels = Channels(b, s)
        subs = self.subs = Subscriptions(b, self.proto, s, self.channels, ev.client_id,
                                         self.persistent, reg.exchange, self.name,
                                         self.flush, reg.groups, sys_values=reg.sys_values)
        cid = ev.client_id
        self.will = c.will
        will = None
        if c.will is not None:
            w = c.will
            will = PutMQTTWill(cid, login.vhost, login.user, w.topic, w.payload, w.qos,
                               w.retain, amqp_properties(w.qos, w.properties, cid, w.retain),
                               self.will_delay())
        reg.wills.connected(key, not c.clean_start, will, now)  # stored before the CONNACK
        if c.clean_start:  # a clean start forgets the previous session
            reg.packet_ids.pop(key, None)
        ids = self.ids = reg.ids(key)
        ids.completed = NONE
        ids.broker = b if self.persistent else None
        kept: list[int] = []
        for qos in (0, 1):
            if subs.queue_exists(qos):
                if c.clean_start:
                    subs.delete_queue(qos)
                else:
                    kept.append(qos)
                    options.load(subs, queue_name(cid, qos), qos)
        if c.clean_start:
            reg.groups.leave(login.vhost, cid)  # its shared subscriptions too
        if key in reg.stored and c.clean_start:  # its packet ids go with its row
            del reg.stored[key]
            b.mqtt_session_delete(login.vhost, cid)
        # session present (3.1.1 3.2.2.2, 5.0 3.2.2.1.1): the server has state for
        # this client id; a stored row is state, with or without subscriptions
        self.present = not c.clean_start and bool(
            kept or key in reg.stored or reg.groups.queues_of(login.vhost, cid))
        # MQTT 5 3.1.2.11.2: expiry 0 ends the session with the connection, even one
        # resumed (3.1.1 cannot get here: its clean session 0 is persistent)
        self.last = not self.persistent and self.present
        if self.persistent or (self.last and key in reg.stored):
            # its row says so across a restart (expiry 0: it expires at the start)
            reg.stored[key] = login.user
            b.mqtt_session_put(login.vhost, cid, self.expiry(), user=login.user)
        return s, kept

    def accept(self, s: Session, kept: list[int], now: float) -> bool:
        """The session's rows are stored: CONNACK, then the flows a resumed session
        left, then its consumers. False when it was taken over meanwhile."""
        if self.session is not s or self.proto.closed:
            return False
        reg = self.registry
        cid = self.client_id
        self.proto.accept(session_present=self.present)
        reg.stats.opened += 1
        self.connected_at_ms = int(now * 1000)
        # [MQTT-4.4.0-1]: PUBREL again for the released; the unacknowledged PUBLISH
        # come again (DUP, same id) as the queue redelivers them
        ids = self.ids
        released = [InFlight(Publish("", qos=2, packet_id=pid), released=True)
                    for pid in sorted(ids.released)]
        if released or ids.inbound:
            self.proto.resume(released, ids.inbound)
        subs = self.subs
        assert subs is not None
        b = self.broker
        for qos in kept:  # deliveries only after CONNACK
            q = b.vhosts[s.vhost].queues.get(queue_name(cid, qos))
            if q is not None:  # what would go at QoS 0 did not wait for it
                drop_waiting_qos0(b, q, everything=qos == 0)
            subs.consume(qos)
        shared.resume(subs)
        return True

    def will_delay(self) -> int:
        """MQTT 5 Will Delay Interval, capped by the session expiry: the session's
        end publishes the will too ([MQTT-3.1.3-9]); 0 before MQTT 5."""
        w = self.proto.connect.will if self.proto.connect is not None else None
        if w is None or self.proto.version < MQTT_5:
            return 0
        return min(w.properties.will_delay_interval or 0, self.proto.session_expiry_interval)

    def expiry(self) -> int:
        """The session's lifetime after a disconnect (3.1.1 persistent: forever)."""
        if self.proto.version >= MQTT_5:
            return min(self.proto.session_expiry_interval, NEVER_EXPIRES)
        return NEVER_EXPIRES

    # ------------------------------------------------------------ the end
    def take_over(self, now: float) -> None:
        """Another connection with our client id arrived: we go now, with our will
        (MQTT 5 clients hear 0x8E), and our deliveries return to the queues."""
        log.info("MQTT %s: client id %r taken over", self.name, self.client_id)
        self.proto.disconnect(ReasonCode.SESSION_TAKEN_OVER)
        self.end(now)
        self.finish()

    def end(self, now: float) -> None:
        """Publish the will unless a normal DISCONNECT cancelled it, then close the
        broker session (clean sessions' exclusive queues go with it)."""
        s = self.session
        if s is None:
            return
        reg = self.registry
        reg.stats.closed += self.connected_at_ms > 0
        key = self.key
        if reg.clients.get(key) is self:
            del reg.clients[key]
        if self.persistent and reg.clients.get(key) is None:
            reg.expire_later(s.vhost, self.client_id, self.expiry())
        if self.will is None:
            reg.wills.cancel(key)
        else:
            self.will = None
            reg.wills.gone(key, self.will_delay(), now)
        if self.subs is not None and not self.persistent:
            shared.end(self.subs)  # a clean session leaves its groups
        self.session = None
        self.channels = {}
        if self.subs is not None:
            self.subs.ended = True
            self.subs = None
        self.tags.clear()
        if not self.persistent and reg.packet_ids.get(key) is self.ids:
            del reg.packet_ids[key]
        self.execute(self._close, s, now)
        if self.last:  # the resumed session's queues and row go too
            self.execute(reg.drop_session, s.vhost, self.client_id, now)

    def _close(self, s: Session, now: float) -> None:
        """The broker session closes (its unacked deliveries requeued, flagged), then a
        persistent session's row says "disconnected": in one submission, after the
        flags, so recovery may trust them for this session's queues
        (server/recovery.py ``settled_queues``)."""
        self.broker.close_session(s)
        if self.persistent:
            self.broker.mqtt_session_put(s.vhost, self.client_id, self.expiry(), now,
                                         user=s.username)

    # ------------------------------------------------------------ client -> broker
    def handle_events(self) -> MQTTEvent | None:
        """Act on the client's PUBLISH and acknowledgements the bytes read produced,
        up to the first other event, returned for the shell (CONNECT, SUBSCRIBE and
        UNSUBSCRIBE await the store; DISCONNECT and a violation end the
        connection); None when none is left. Here, not in the shell: the per
        message dispatch runs compiled."""
        proto = self.proto
        while (ev := proto.next_event()) is not None:
            t = type(ev)
            if t is PublishReceived:
                assert isinstance(ev, PublishReceived)
                p = ev.publish
                self.publish(p.topic, p.payload, p.qos, p.packet_id, p.retain, p.properties)
            elif t is PubAckReceived:
                assert isinstance(ev, PubAckReceived)
                self.ack(ev.packet_id)
            elif t is PubRecReceived:
                assert isinstance(ev, PubRecReceived)
                self.pubrec(ev.packet_id, ev.reason_code)
            elif t is PubCompReceived:
                assert isinstance(ev, PubCompReceived)
                self.complete(ev.packet_id)
            elif t is PubRelReceived:
                assert isinstance(ev, PubRelReceived)
                self.pubrel(ev.packet_id)
            else:
                return ev
        return None

    def publish(self, topic: str, payload: bytes, qos: int, packet_id: int | None,
                retain: bool = False, mprops: Properties = EMPTY) -> None:
        """Into the broker's publish path; QoS 1/2 are acknowledged by the confirm. The
        MQTT 5 properties map to AMQP ones, with the publisher (mapping.py)."""
        ch = self.channels.get(PUBLISH_CH)
        if ch is None:
            if self.session is None:
                return
            ch = self.channels[PUBLISH_CH]  # the first publish opens it
        limit = self.max_topic_bytes
        if len(topic) * 4 > limit and len(topic.encode()) > limit:  # short ones: no encode
            # its routing key would not fit an AMQP consumer's basic.deliver
            log.info("MQTT %s: publish to a topic of over %d bytes refused", self.name, limit)
            self._refuse_publish(packet_id, ReasonCode.TOPIC_NAME_INVALID)
            return
        if topic.startswith("$SYS") and is_sys(topic):
            # the broker's own tree: MQTT 5 hears 0x87; 3.1.1 has no negative ack, so the
            # message is acknowledged and dropped ([MQTT-3.3.5-2]), as Mosquitto does
            log.info("MQTT %s: publish to %r dropped: $SYS is the broker's", self.name, topic)
            if packet_id is not None:
                self.proto.ack_publish(packet_id, ReasonCode.NOT_AUTHORIZED
                                       if self.proto.version >= MQTT_5 else 0)
            return
        st = ch.confirms
        assert st is not None
        seq = st.next_seq
        rs = None
        reg = self.registry
        expires = mprops.message_expiry_interval is not None  # no clock read otherwise
        props = amqp_properties(qos, mprops, self.client_id, retain,
                                self.clock() if expires else 0.0)
        if retain:
            rs = self._retained_index()
            if payload and mqtt_retained.over_quota(rs, topic, len(payload)):
                if self.proto.version >= MQTT_5:  # refused whole: nothing routed
                    log.info("MQTT %s: retained publish to %r over quota", self.name, topic)
                    if packet_id is not None:
                        self.proto.ack_publish(packet_id, ReasonCode.QUOTA_EXCEEDED)
                    return
                vhost = rs.owner[0]
                if vhost not in reg.quota_logged:
                    reg.quota_logged.add(vhost)
                    log.warning("MQTT retained messages of vhost %r over quota "
                                "(mqtt_retained_max_messages/_bytes): publishes are routed, "
                                "not retained", vhost)
                rs = None
        try:
            res = self.broker.basic_publish(ch, reg.exchange, topic_to_routing_key(topic),
                                            props, payload)
        except AMQPError as exc:
            log.info("MQTT %s: publish to %r refused: %s", self.name, topic, exc)
            self._refuse_publish(packet_id, ReasonCode.NOT_AUTHORIZED if refused(exc)
                                 else ReasonCode.UNSPECIFIED_ERROR)
            return
        reg.stats.received[label(self.proto.version)] += 1
        if rs is not None:
            kept = mqtt_retained.retain(self.broker.retained, rs, self.broker.new_message_key(),
                                        topic, reg.exchange, topic_to_routing_key(topic),
                                        props, payload)
            if kept:  # its row commits before the confirm (PUBACK), as a queue entry's
                self.broker.confirm_after_commit(ch)
        if qos == 2 and packet_id is not None and self.ids.received(packet_id):
            # the id's row commits with the message, before the PUBREC
            self.broker.confirm_after_commit(ch)
        if packet_id is not None:
            self.confirms[seq] = packet_id
            if not res.routed and self.proto.version >= MQTT_5:
                self.unmatched = with_id(self.unmatched, seq)

    def _refuse_publish(self, packet_id: int | None, code: int) -> None:
        """MQTT 5: PUBACK/PUBREC ``code`` (a QoS 0 publish is dropped); 3.1.1 has no
        negative ack: the connection closes at any QoS, as RabbitMQ 3.10 closes it."""
        if packet_id is not None and self.proto.version >= MQTT_5:
            self.proto.ack_publish(packet_id, code)
        elif self.proto.version < MQTT_5:
            self.proto.disconnect(code)

    def _retained_index(self) -> RetainedSet:
        assert self.session is not None
        return mqtt_retained.index(self.broker.retained, self.session.vhost,
                                   self.registry.retained_limits)

    def pubrec(self, pid: int, reason_code: int) -> None:
        """The client's PUBREC of our QoS 2 PUBLISH ``pid``."""
        if reason_code >= 0x80:  # refused: the flow ends, the message is done
            self.complete(pid)
        elif self.ids.release(pid):
            self.hold = True  # the PUBREL leaves once "released" is stored

    def pubrel(self, pid: int) -> None:
        """The client's PUBREL of its QoS 2 PUBLISH ``pid``."""
        if pid in self.ids.inbound and self.ids.forget_inbound(pid):
            self.hold = True  # the PUBCOMP leaves once the id is free in the store

    def ack(self, pid: int) -> None:
        """The delivery sent as ``pid`` is done (PUBACK): ack it in its queue."""
        tag = self.tags.pop(pid, None)
        ch = self.channels.get(QOS1_CH)
        if tag is not None and ch is not None:
            self.broker.basic_ack(ch, tag)

    def complete(self, pid: int) -> None:
        """PUBCOMP: the QoS 2 flow of ``pid`` ended. A released message whose
        redelivery has not reached us yet is acked when it does."""
        ids = self.ids
        if not ids.known(pid):
            return  # a retained message's, or a QoS 1 id
        if pid not in self.tags and pid in ids.released:
            ids.completed_early(pid)
            return
        self.ack(pid)
        ids.complete(pid)

    # ------------------------------------------------------------ broker -> client
    def send_confirm(self, ch: ChannelState, upto: int, multiple: bool, nack: bool) -> None:
        """The publisher confirm of PUBLISH ``upto`` (and before): PUBACK/PUBREC."""
        confirms = self.confirms
        seqs = [upto]
        if multiple:  # seqs are keys in ascending order: stop at the first above
            seqs = list(itertools.takewhile(lambda s: s <= upto, confirms))
        for seq in seqs:
            pid = confirms.pop(seq, None)
            if pid is None:
                continue
            if not nack:
                if self.unmatched and seq in self.unmatched:
                    self.unmatched = without_id(self.unmatched, seq)
                    self.proto.ack_publish(pid, ReasonCode.NO_MATCHING_SUBSCRIBERS)
                else:
                    self.proto.ack_publish(pid)
                continue
            self.unmatched = without_id(self.unmatched, seq)
            if pid in self.ids.inbound:  # refused: a retransmission is a new attempt
                self.ids.forget_inbound(pid)
            if self.proto.version >= MQTT_5:
                self.proto.ack_publish(pid, ReasonCode.UNSPECIFIED_ERROR)
            # a refused 3.1.1 message stays unacknowledged: the client sends it again

    def deliver(self, ch: ChannelState, consumer_tag: str, delivery_tag: int,
                redelivered: bool, message: Any, properties: bytes | None = None) -> None:
        """A message from one of the session's queues, as a PUBLISH at the QoS its
        queue, the message and the subscription allow."""
        proto = self.proto
        self.registry.stats.delivered[label(proto.version)] += 1  # as the core counted
        if (not self.alive or proto.state is not State.CONNECTED
                or self.channels.get(ch.number) is not ch):
            return  # unacked: back to the queue when the session closes
        props = bytes(properties or message.properties_raw)
        qos = 1 if ch.number == QOS1_CH and message.persistent else 0  # as published
        enc = self.registry.shared
        topic = enc.topic_of(message)
        subs = self.subs
        verdict = None if subs is None else options.admit(subs, ch, consumer_tag, props, topic)
        if verdict is None or not verdict.deliver:
            # no-local, or [MQTT-4.7.2-1] a $ topic through a leading wildcard: acked
            if ch.number == QOS1_CH:
                self._auto_ack(delivery_tag)
            return
        mprops, retain = (options.outbound(props, verdict, self.clock())
                          if proto.version >= MQTT_5 else (EMPTY, False))
        exactly_once = qos > 0 and verdict.qos == 2 and message_qos(props) == 2
        if qos and not exactly_once and self.ids.outbound:
            # a QoS 2 flow already begun ends as QoS 2, whatever the subscription says now
            exactly_once = self.ids.pid_of(message.key) is not None
        if exactly_once:
            self._deliver_qos2(delivery_tag, redelivered, message, topic, retain, mprops)
            return
        if not qos and not retain and not mprops and proto.shares_publish():
            # the same bytes as every other subscriber's: encoded once (SharedPublish)
            proto.send_encoded(enc.packet(message, topic, proto.version))
            if ch.number == QOS1_CH:
                self._auto_ack(delivery_tag)
            return
        out = None
        try:
            out = proto.send_publish(topic, bytes(message.body), qos, retain, mprops,
                                     dup=redelivered and qos > 0)
        except FlowControlError:  # prefetch keeps us inside the window; never expected
            log.warning("MQTT %s: receive maximum reached", self.name)
        if ch.number == QOS1_CH:
            if out is not None and out.packet_id is not None:
                self.tags[out.packet_id] = delivery_tag
            else:
                self._auto_ack(delivery_tag)

    def _auto_ack(self, delivery_tag: int) -> None:
        """A qos1-queue delivery that needs no PUBACK: the shell's writer acks it."""
        self.auto_acks.append(delivery_tag)
        self.wake()

    def take_auto_acks(self) -> None:
        """Ack the deliveries that needed no PUBACK (a broker command of the shell's)."""
        ch = self.channels.get(QOS1_CH)
        if self.auto_acks and ch is not None:
            tags, self.auto_acks = self.auto_acks, []
            self.execute(self._ack_all, ch, tags)

    def _ack_all(self, ch: ChannelState, tags: list[int]) -> None:
        for tag in tags:
            self.broker.basic_ack(ch, tag)

    def _deliver_qos2(self, delivery_tag: int, redelivered: bool, message: Any,
                      topic: str, retain: bool, mprops: Properties) -> None:
        """Exactly once: the delivery stays unacked until PUBCOMP. A message sent
        before goes again with its packet id and DUP; one the client has received
        (PUBREC came) is not sent again, only held until PUBCOMP."""
        ids = self.ids
        pid = ids.pid_of(message.key)
        if pid is not None and pid in ids.released:
            if pid in ids.completed:  # PUBCOMP came before this redelivery
                self._auto_ack(delivery_tag)
                ids.complete(pid)
            else:
                self.tags[pid] = delivery_tag
            return
        try:
            out = self.proto.send_publish(topic, bytes(message.body), 2, retain, mprops,
                                          packet_id=pid, dup=pid is not None or redelivered)
        except FlowControlError:
            log.warning("MQTT %s: receive maximum reached", self.name)
            out = None
        if out is None or out.packet_id is None:  # too large for the client: dropped
            self._auto_ack(delivery_tag)
            return
        self.tags[out.packet_id] = delivery_tag
        if ids.sent(out.packet_id, message.key):
            self.hold = True  # the PUBLISH leaves once its packet id is stored
