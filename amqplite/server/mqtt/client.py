"""One MQTT connection: a trio shell on the sans-I/O ``MQTTConnection`` and the
broker's transport for its session's deliveries."""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import trio

import amqplite.server.mqtt.options as options
import amqplite.server.mqtt.shared as shared
from amqplite.broker import mqtt_retained
from amqplite.broker.model import ChannelState, Session
from amqplite.broker.mqtt_offline import drop_waiting_qos0
from amqplite.broker.retained import RetainedSet
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import FlowControlError, InFlight, MQTTConnection, State
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.events import (
    ConnectReceived,
    DisconnectReceived,
    ProtocolViolation,
    PubAckReceived,
    PubCompReceived,
    PublishReceived,
    PubRecReceived,
    PubRelReceived,
    SubscribeReceived,
    UnsubscribeReceived,
)
from amqplite.protocol.mqtt.mapping import amqp_properties, message_qos
from amqplite.protocol.mqtt.packets import MQTT_5, Publish, Will
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from amqplite.protocol.mqtt.topics import routing_key_to_topic, topic_to_routing_key
from amqplite.protocol.properties import delivery_mode_of
from amqplite.server.mqtt.accounting import label, log_protocol
from amqplite.server.mqtt.common import (
    FINISH_TIMEOUT,
    PUBLISH_CH,
    QOS0_CH,
    QOS1_CH,
    RECV_SIZE,
    WRITE_HIGH_WATER,
    queue_name,
    refused,
)
from amqplite.server.mqtt.inflight import PacketIds
from amqplite.server.mqtt.subscriptions import Subscriptions
from amqplite.server.mqtt.transports import login as transport_login
from amqplite.storeops import NEVER_EXPIRES, PutMQTTWill

if TYPE_CHECKING:
    from amqplite.server.mqtt.listener import MQTTListener

log = logging.getLogger("amqplite.mqtt")


class MQTTClient:
    """One MQTT connection; the broker's transport for its session's deliveries."""

    def __init__(self, listener: MQTTListener, stream: trio.abc.Stream,
                 peer: tuple[str, int], cert_user: str | None = None) -> None:
        self.listener = listener
        self.broker = listener.broker
        self.stream = stream
        #: over TLS: the verified client certificate's user name (transports.login)
        self.cert_user = cert_user
        self.tls = isinstance(stream, trio.SSLStream)
        self.peer_host, self.peer_port = peer[0], peer[1]
        self.name = f"{self.peer_host}:{self.peer_port}"
        self.proto = MQTTConnection(listener.limits, trio.current_time())
        self.connected_at = time.time()
        #: when the CONNECT was accepted (0: not yet)
        self.connected_at_ms = 0
        self.bytes_in = 0
        self.bytes_out = 0
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
        self.will: Will | None = None
        #: publisher-confirm seq -> inbound packet id (None: QoS 0)
        self._confirms: dict[int, int | None] = {}
        #: outbound packet id -> delivery tag on the qos1 channel
        self._tags: dict[int, int] = {}
        #: the session's QoS 2 packet ids (the listener keeps them across connections)
        self.ids = PacketIds("", "")
        #: store ops were written that must commit before the bytes queued now leave
        #: (QoS 2 packet ids: a PUBLISH, PUBREL or PUBCOMP waits for its row)
        self._hold = False
        #: delivery tags of QoS 0 messages sent from the qos1 queue: acked by the writer
        self._auto_acks: list[int] = []
        self._wake = trio.Event()
        self._ka_wake = trio.Event()
        self._finishing = False
        self._reading_paused = False
        self._cancel: trio.CancelScope | None = None

    @property
    def protocol(self) -> str:
        return "MQTT 5.0" if self.proto.version >= MQTT_5 else (
            "MQTT 3.1" if self.proto.version == 3 else "MQTT 3.1.1")

    # ------------------------------------------------------------ tasks
    async def run(self) -> None:
        self.listener.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                nursery.start_soon(self._writer)
                nursery.start_soon(self._keepalive)
                nursery.start_soon(self._reader)
        except Exception:  # one bad connection never takes the broker down
            log.exception("MQTT connection %s crashed", self.name)
        finally:
            self.alive = False
            self.listener.connections.discard(self)
            self._end_session()
            with trio.move_on_after(1):
                await self.stream.aclose()

    def _finish(self) -> None:
        """Stop reading; the writer sends what is queued, then everything ends."""
        self._finishing = True
        self._wake.set()
        if self._cancel is not None:
            self._cancel.deadline = min(self._cancel.deadline,
                                        trio.current_time() + FINISH_TIMEOUT)

    async def _reader(self) -> None:
        proto = self.proto
        persistence = self.listener.persistence
        try:
            while not self._finishing:
                if not persistence.has_capacity and self.session is not None:
                    await self._paused(persistence.wait_capacity())
                try:
                    data = await self.stream.receive_some(RECV_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
                if not data:
                    return
                self.bytes_in += len(data)
                proto.receive_data(data, trio.current_time())
                await self._handle_events()
                self.listener.interpret()
                self.flush()
        finally:
            self._finish()

    async def _paused(self, wait: Awaitable[None]) -> None:
        """As RabbitMQ under an alarm: publishers are not read. The silence is ours,
        so the keep-alive clock restarts when reading does."""
        self._reading_paused = True
        try:
            await wait
        finally:
            self._reading_paused = False
            self.proto.receive_data(b"", trio.current_time())
            self._ka_wake.set()

    async def _writer(self) -> None:
        """Sends what the protocol queued; once finishing, the rest, then FIN, then ends
        the connection's nursery."""
        while True:
            if not self._finishing:
                await self._wake.wait()
            self._wake = trio.Event()
            while True:
                if self._auto_acks and QOS1_CH in self.channels:
                    tags, self._auto_acks = self._auto_acks, []
                    self.listener.execute(self._ack_all, self.channels[QOS1_CH], tags)
                while self._hold:  # nothing awaited between the commit and the take
                    self._hold = False
                    await self.listener.committed()
                data = self.proto.data_to_send()
                if not data:
                    break
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._finishing = True
                    break
                self.bytes_out += len(data)
            s = self.session
            if s is not None and not s.writable and not self._finishing:
                self.listener.execute(self.broker.set_writable, s, True)
            if self._finishing:  # nothing awaited since the last empty data_to_send()
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError,
                                         OSError):
                    if isinstance(self.stream, trio.abc.HalfCloseableStream):  # not TLS
                        await self.stream.send_eof()
                assert self._cancel is not None
                self._cancel.cancel()
                return

    def _ack_all(self, ch: ChannelState, tags: list[int]) -> None:
        for tag in tags:
            self.broker.basic_ack(ch, tag)

    async def _keepalive(self) -> None:
        """1.5 x keep alive after the last bytes (and the CONNECT timeout)."""
        proto = self.proto
        while not proto.closed:
            deadline = proto.deadline
            with trio.move_on_at(math.inf if deadline is None else deadline):
                await self._ka_wake.wait()
            self._ka_wake = trio.Event()
            if self._reading_paused:
                await self._ka_wake.wait()  # set when reading resumes
                continue
            if proto.check_deadline(trio.current_time()):
                log.info("MQTT %s (%s): keep alive expired", self.name, self.client_id)
                self._finish()
                return

    # ------------------------------------------------------------ events
    async def _handle_events(self) -> None:
        proto = self.proto
        while (ev := proto.next_event()) is not None:
            t = type(ev)
            if t is PublishReceived:
                assert isinstance(ev, PublishReceived)
                p = ev.publish
                self._publish(p.topic, p.payload, p.qos, p.packet_id, p.retain, p.properties)
            elif t is PubAckReceived:
                assert isinstance(ev, PubAckReceived)
                self._ack(ev.packet_id)
            elif t is PubRecReceived:
                assert isinstance(ev, PubRecReceived)
                if ev.reason_code >= 0x80:  # refused: the flow ends, the message is done
                    self._complete(ev.packet_id)
                elif self.ids.release(ev.packet_id):
                    self._hold = True  # the PUBREL leaves once "released" is stored
            elif t is PubCompReceived:
                assert isinstance(ev, PubCompReceived)
                self._complete(ev.packet_id)
            elif t is PubRelReceived:
                assert isinstance(ev, PubRelReceived)
                if ev.packet_id in self.ids.inbound and self.ids.forget_inbound(ev.packet_id):
                    self._hold = True  # the PUBCOMP leaves once the id is free in the store
            elif t is ConnectReceived:
                assert isinstance(ev, ConnectReceived)
                await self._connect(ev)
            elif t is SubscribeReceived:
                assert isinstance(ev, SubscribeReceived)
                assert self.subs is not None
                await self.subs.subscribe(ev)
            elif t is UnsubscribeReceived:
                assert isinstance(ev, UnsubscribeReceived)
                assert self.subs is not None
                await self.subs.unsubscribe(ev)
            elif t is DisconnectReceived:
                assert isinstance(ev, DisconnectReceived)
                if not ev.publish_will:
                    self.will = None  # [MQTT-3.14.4-3]: a normal DISCONNECT drops it
                self._finish()
            elif t is ProtocolViolation:
                assert isinstance(ev, ProtocolViolation)
                log.info("MQTT %s (%s): %s", self.name, self.client_id, ev.message)
                self._finish()
        if proto.closed:
            self._finish()

    async def _connect(self, ev: ConnectReceived) -> None:
        c = ev.connect
        listener = self.listener
        login = transport_login(listener, c, self.peer_host, self.cert_user)
        if login.refused:
            log.warning("MQTT %s: login refused for %r", self.name, c.username)
            self.proto.reject(login.refused)
            return
        if listener.at_connection_limit():  # as AMQP's 530: the node's limit is reached
            listener.stats.refused_at_limit += 1
            log.warning("MQTT %s refused: connection limit (%d) is reached", self.name,
                        listener.settings.max_connections)
            self.proto.reject(ReasonCode.QUOTA_EXCEEDED if c.protocol_level >= MQTT_5
                              else ReasonCode.SERVER_UNAVAILABLE)
            return
        key = (login.vhost, ev.client_id)
        if not listener.may_take_over(key, login.user):  # mqtt_takeover = "user"
            log.warning("MQTT %s: client id %r of vhost %r belongs to another user",
                        self.name, ev.client_id, login.vhost)
            self.proto.reject(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID)
            return
        self.client_id = ev.client_id
        self.key = key
        old = listener.clients.get(key)
        if old is not None and old is not self:
            old.take_over()  # [MQTT-3.1.4-3]: the existing client is disconnected
        listener.clients[key] = self
        listener.keep(key)
        self.persistent = (self.proto.session_expiry_interval > 0 if c.protocol_level >= MQTT_5
                           else not c.clean_start)
        b = self.broker
        s = self.session = b.open_session(login.user, login.vhost, self.name)
        s.client_properties = {"client_id": ev.client_id}
        s.client_id = ev.client_id  # {client_id} in topic permissions
        s.protocol = log_protocol(c.protocol_level)  # the delivery log's name
        s.transport = self
        for n in (PUBLISH_CH, QOS0_CH, QOS1_CH):
            self.channels[n] = b.open_channel(s, n)
        b.confirm_select(self.channels[PUBLISH_CH])
        subs = self.subs = Subscriptions(b, self.proto, s, self.channels, ev.client_id,
                                         self.persistent, listener.settings.mqtt_exchange,
                                         self.name, listener.committed, self.flush,
                                         listener.groups)
        cid = ev.client_id
        self.will = c.will
        will = None
        if c.will is not None:
            w = c.will
            will = PutMQTTWill(cid, login.vhost, login.user, w.topic, w.payload, w.qos, w.retain,
                               amqp_properties(w.qos, w.properties, cid, w.retain),
                               self._will_delay())
        listener.wills.connected(key, not c.clean_start, will)  # stored before the CONNACK
        if c.clean_start:  # a clean start forgets the previous session
            listener.packet_ids.pop(key, None)
        ids = self.ids = listener.ids(key)
        ids.completed.clear()
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
            listener.groups.leave(login.vhost, cid)  # its shared subscriptions too
        if key in listener.stored and c.clean_start:  # its packet ids go with its row
            del listener.stored[key]
            b.mqtt_session_delete(login.vhost, cid)
        if self.persistent:  # its row says so across a restart
            listener.stored[key] = login.user
            b.mqtt_session_put(login.vhost, cid, self._expiry(), user=login.user)
        await listener.committed()
        if self.session is not s or self.proto.closed:  # taken over meanwhile
            return
        self.proto.accept(session_present=bool(kept or listener.groups.queues_of(s.vhost, cid)))
        listener.stats.opened += 1
        self.connected_at_ms = int(time.time() * 1000)
        # [MQTT-4.4.0-1]: PUBREL again for the released; the unacknowledged PUBLISH
        # come again (DUP, same id) as the queue redelivers them
        released = [InFlight(Publish("", qos=2, packet_id=pid), released=True)
                    for pid in sorted(ids.released)]
        if released or ids.inbound:
            self.proto.resume(released, ids.inbound)
        self._ka_wake.set()  # the keep-alive deadline starts now
        for qos in kept:  # deliveries only after CONNACK
            q = b.vhosts[s.vhost].queues.get(queue_name(cid, qos))
            if q is not None:  # what would go at QoS 0 did not wait for it
                drop_waiting_qos0(b, q, everything=qos == 0)
            subs.consume(qos)
        shared.resume(subs)

    def _ack(self, pid: int) -> None:
        """The delivery sent as ``pid`` is done: ack it in its queue."""
        tag = self._tags.pop(pid, None)
        ch = self.channels.get(QOS1_CH)
        if tag is not None and ch is not None:
            self.broker.basic_ack(ch, tag)

    def _complete(self, pid: int) -> None:
        """PUBCOMP: the QoS 2 flow of ``pid`` ended. A released message whose
        redelivery has not reached us yet is acked when it does."""
        ids = self.ids
        if not ids.known(pid):
            return  # a retained message's, or a QoS 1 id
        if pid not in self._tags and pid in ids.released:
            ids.completed.add(pid)
            return
        self._ack(pid)
        ids.complete(pid)

    def take_over(self) -> None:
        """Another connection with our client id arrived: we go now, with our will
        (MQTT 5 clients hear 0x8E), and our deliveries return to the queues."""
        log.info("MQTT %s: client id %r taken over", self.name, self.client_id)
        self.proto.disconnect(ReasonCode.SESSION_TAKEN_OVER)
        self._end_session()
        self._finish()

    def _end_session(self) -> None:
        """Publish the will unless a normal DISCONNECT cancelled it, then close the
        broker session (clean sessions' exclusive queues go with it)."""
        s = self.session
        if s is None:
            return
        listener = self.listener
        listener.stats.closed += self.connected_at_ms > 0
        key = self.key
        if listener.clients.get(key) is self:
            del listener.clients[key]
        if self.persistent:
            expiry = self._expiry()
            self.broker.mqtt_session_put(s.vhost, self.client_id, expiry, time.time(),
                                         user=s.username)
            if listener.clients.get(key) is None:
                listener.expire_later(s.vhost, self.client_id, expiry)
        if self.will is None:
            listener.wills.cancel(key)
        else:
            self.will = None
            listener.wills.gone(key, self._will_delay())
        if self.subs is not None and not self.persistent:
            shared.end(self.subs)  # a clean session leaves its groups
        self.session = None
        self.channels = {}
        if self.subs is not None:
            self.subs.ended = True
            self.subs = None
        self._tags.clear()
        if not self.persistent and listener.packet_ids.get(key) is self.ids:
            del listener.packet_ids[key]
        listener.execute(self.broker.close_session, s)

    def _will_delay(self) -> int:
        """MQTT 5 Will Delay Interval, capped by the session expiry: the session's
        end publishes the will too ([MQTT-3.1.3-9]); 0 before MQTT 5."""
        w = self.proto.connect.will if self.proto.connect is not None else None
        if w is None or self.proto.version < MQTT_5:
            return 0
        return min(w.properties.will_delay_interval or 0, self.proto.session_expiry_interval)

    def _expiry(self) -> int:
        """The session's lifetime after a disconnect (3.1.1 persistent: forever)."""
        if self.proto.version >= MQTT_5:
            return min(self.proto.session_expiry_interval, NEVER_EXPIRES)
        return NEVER_EXPIRES

    # ------------------------------------------------------------ publish
    def _publish(self, topic: str, payload: bytes, qos: int, packet_id: int | None,
                 retain: bool = False, mprops: Properties = EMPTY) -> None:
        """Into the broker's publish path; QoS 1/2 are acknowledged by the confirm. The
        MQTT 5 properties map to AMQP ones, with the publisher (mapping.py)."""
        ch = self.channels.get(PUBLISH_CH)
        if ch is None:
            return
        limit = self.listener.limits.max_topic_bytes
        if len(topic) * 4 > limit and len(topic.encode()) > limit:  # short ones: no encode
            # its routing key would not fit an AMQP consumer's basic.deliver
            log.info("MQTT %s: publish to a topic of over %d bytes refused", self.name, limit)
            self._refuse_publish(packet_id, ReasonCode.TOPIC_NAME_INVALID)
            return
        st = ch.confirms
        assert st is not None
        seq = st.next_seq
        rs = None
        expires = mprops.message_expiry_interval is not None  # no clock read otherwise
        props = amqp_properties(qos, mprops, self.client_id, retain,
                                time.time() if expires else 0.0)
        if retain:
            rs = self._retained_index()
            if payload and mqtt_retained.over_quota(rs, topic, len(payload)):
                if self.proto.version >= MQTT_5:  # refused whole: nothing routed
                    log.info("MQTT %s: retained publish to %r over quota", self.name, topic)
                    if packet_id is not None:
                        self.proto.ack_publish(packet_id, ReasonCode.QUOTA_EXCEEDED)
                    return
                vhost = rs.owner[0]
                if vhost not in self.listener.quota_logged:
                    self.listener.quota_logged.add(vhost)
                    log.warning("MQTT retained messages of vhost %r over quota "
                                "(mqtt_retained_max_messages/_bytes): publishes are routed, "
                                "not retained", vhost)
                rs = None
        try:
            self.broker.basic_publish(ch, self.listener.settings.mqtt_exchange,
                                      topic_to_routing_key(topic), props, payload)
        except AMQPError as exc:
            log.info("MQTT %s: publish to %r refused: %s", self.name, topic, exc)
            self._refuse_publish(packet_id, ReasonCode.NOT_AUTHORIZED if refused(exc)
                                 else ReasonCode.UNSPECIFIED_ERROR)
            return
        self.listener.stats.received[label(self.proto.version)] += 1
        if rs is not None:
            kept = mqtt_retained.retain(self.broker.retained, rs, self.broker.new_message_key(),
                                        topic, self.listener.settings.mqtt_exchange,
                                        topic_to_routing_key(topic), props, payload)
            if kept:  # its row commits before the confirm (PUBACK), as a queue entry's
                self.broker.confirm_after_commit(ch)
        if qos == 2 and packet_id is not None and self.ids.received(packet_id):
            # the id's row commits with the message, before the PUBREC
            self.broker.confirm_after_commit(ch)
        if packet_id is not None:
            self._confirms[seq] = packet_id

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
                                   self.listener.retained_limits)

    # ------------------------------------------------------------ broker -> wire
    # The interpreter calls these for this session's effects, then flush().
    def send_confirm(self, ch: ChannelState, upto: int, multiple: bool, nack: bool) -> None:
        confirms = self._confirms
        seqs = [upto]
        if multiple:  # seqs are keys in ascending order: stop at the first above
            seqs = list(itertools.takewhile(lambda s: s <= upto, confirms))
        for seq in seqs:
            pid = confirms.pop(seq, None)
            if pid is None:
                continue
            if not nack:
                self.proto.ack_publish(pid)
                continue
            if pid in self.ids.inbound:  # refused: a retransmission is a new attempt
                self.ids.forget_inbound(pid)
            if self.proto.version >= MQTT_5:
                self.proto.ack_publish(pid, ReasonCode.UNSPECIFIED_ERROR)
            # a refused 3.1.1 message stays unacknowledged: the client sends it again

    def deliver(self, ch: ChannelState, consumer_tag: str, delivery_tag: int,
                redelivered: bool, message: Any, properties: bytes | None = None) -> None:
        self.listener.stats.delivered[label(self.proto.version)] += 1  # as the core counted
        if (not self.alive or self.proto.state is not State.CONNECTED
                or self.channels.get(ch.number) is not ch):
            return  # unacked: back to the queue when the session closes
        props = properties or message.properties_raw
        qos = 1 if ch.number == QOS1_CH and delivery_mode_of(props) == 2 else 0
        topic = routing_key_to_topic(message.routing_key)
        subs = self.subs
        props = bytes(props)
        verdict = None if subs is None else subs.admit(ch, consumer_tag, props, topic)
        if verdict is None or not verdict.deliver:
            # no-local, or [MQTT-4.7.2-1] a $ topic through a leading wildcard: acked
            if ch.number == QOS1_CH:
                self._auto_ack(delivery_tag)
            return
        mprops, retain = (options.outbound(props, verdict, time.time())
                          if self.proto.version >= MQTT_5 else (EMPTY, False))
        exactly_once = qos > 0 and verdict.qos == 2 and message_qos(props) == 2
        if qos and not exactly_once and self.ids.outbound:
            # a QoS 2 flow already begun ends as QoS 2, whatever the subscription says now
            exactly_once = self.ids.pid_of(message.key) is not None
        if exactly_once:
            self._deliver_qos2(delivery_tag, redelivered, message, topic, retain, mprops)
            return
        out = None
        try:
            out = self.proto.send_publish(topic, bytes(message.body), qos, retain, mprops,
                                          dup=redelivered and qos > 0)
        except FlowControlError:  # prefetch keeps us inside the window; never expected
            log.warning("MQTT %s: receive maximum reached", self.name)
        if ch.number == QOS1_CH:
            if out is not None and out.packet_id is not None:
                self._tags[out.packet_id] = delivery_tag
            else:
                self._auto_ack(delivery_tag)

    def _auto_ack(self, delivery_tag: int) -> None:
        """A qos1-queue delivery that needs no PUBACK: the writer acks it."""
        self._auto_acks.append(delivery_tag)
        self._wake.set()

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
                self._tags[pid] = delivery_tag
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
        self._tags[out.packet_id] = delivery_tag
        if ids.sent(out.packet_id, message.key):
            self._hold = True  # the PUBLISH leaves once its packet id is stored

    def deliver_stream(self, ch: ChannelState, consumer_tag: str, first_tag: int,
                       entries: list[Any]) -> None:
        """Stream queues are not MQTT subscription queues."""

    def send_return(self, ch: ChannelState, code: int, text: str, message: Any) -> None:
        """MQTT publishes are never mandatory."""

    def send_cancel(self, ch: ChannelState, consumer_tag: str) -> None:
        """A subscription queue deleted under us (admin): the client is told by a close
        (the session ends in ``run``, not inside the interpreter calling us)."""
        if self.alive:
            self.proto.disconnect(ReasonCode.ADMINISTRATIVE_ACTION, "subscription queue deleted")
            self._finish()

    def force_close(self, code: int, text: str) -> None:
        """Server-side close (shutdown, admin): MQTT 5 clients hear why; the session
        (and its will) ends now."""
        if self.alive:
            reason = (ReasonCode.SERVER_SHUTTING_DOWN if "shutdown" in text
                      else ReasonCode.ADMINISTRATIVE_ACTION)
            self.proto.disconnect(reason, text)
            self._end_session()
            self._finish()

    def flush(self) -> None:
        self._wake.set()
        s = self.session
        if s is not None and s.writable and self.proto.pending_bytes() > WRITE_HIGH_WATER:
            # a slow reader: its consumers wait until the writer drains (as for AMQP)
            self.broker.set_writable(s, False)

    wake = flush

