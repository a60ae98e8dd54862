"""Driving the MQTT session rules with plain calls: a pure broker, the session
registry, and the few lines of shell a test needs (carry out the Outcome, run
the timers by hand, feed the sans-I/O connection packets)."""

from __future__ import annotations

from typing import Any

from amqplite.broker.core import Broker
from amqplite.broker.effects import Confirm, Deliver
from amqplite.protocol.mqtt import events as ev
from amqplite.protocol.mqtt import packets as pk
from amqplite.protocol.mqtt.connection import MQTTConnection
from amqplite.protocol.mqtt.decoder import decode_all
from amqplite.protocol.mqtt.properties import Properties
from amqplite.sessions.mqtt.common import LIMITS, Key, Login
from amqplite.sessions.mqtt.registry import SessionRegistry
from amqplite.sessions.mqtt.session import MQTTSession
from tests.broker.conftest import FakeClock


class HandTimers:
    """The shell's timers, run by hand: ``due`` holds each key's deadline."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.due: dict[Key, float] = {}

    def start(self, key: Key, delay: float) -> None:
        self.due[key] = self.clock.t + max(0.0, delay)

    def stop(self, key: Key) -> None:
        self.due.pop(key, None)

    def take_due(self) -> list[Key]:
        keys = sorted(k for k, t in self.due.items() if t <= self.clock.t)
        for k in keys:
            del self.due[k]
        return keys


class Client:
    """One connection: its sans-I/O protocol object and its session rules."""

    def __init__(self, node: Node, proto: MQTTConnection, rules: MQTTSession,
                 version: int) -> None:
        self.node = node
        self.proto = proto
        self.rules = rules
        self.version = version
        #: packets that came with the CONNACK
        self.backlog: list[pk.Packet] = []

    def send(self, *packets: pk.Packet) -> None:
        """Packets from the client, handled as the shell's reader handles them."""
        data = b"".join(pk.encode(p, self.version) for p in packets)
        self.proto.receive_data(data, 0.0)
        r = self.rules
        while (e := r.handle_events()) is not None:  # PUBLISH and acks: the rules'
            if isinstance(e, ev.SubscribeReceived):
                assert r.subs is not None
                codes, owed = r.subs.subscribe(e)
                self.node.carry()  # the commit a SUBACK waits for
                r.subs.acknowledge(e, codes, owed, self.node.clock.t)
            elif isinstance(e, ev.UnsubscribeReceived):
                assert r.subs is not None
                self.proto.send_unsuback(e.packet_id, r.subs.unsubscribe(e))
            elif isinstance(e, ev.DisconnectReceived):
                if not e.publish_will:
                    r.will = None
                self.close()
        self.node.carry()

    def received(self) -> list[pk.Packet]:
        """What the session has queued for the client since the last call."""
        self.node.carry()
        self.rules.take_auto_acks()
        return decode_all(self.proto.data_to_send(), self.version)

    def close(self) -> None:
        """The connection ends (the shell's ``run`` finishing)."""
        self.rules.alive = False
        self.rules.end(self.node.clock.t)
        self.node.carry()


class Node:
    """A pure broker with the MQTT front's registry; the store is a list of ops."""

    def __init__(self, takeover: str = "vhost", retained_max_messages: int | None = None,
                 retained_max_bytes: int | None = None) -> None:
        self.clock = FakeClock()
        self.broker = Broker(now=self.clock)
        self.registry = SessionRegistry(self.broker, "amq.topic", takeover,
                                        retained_max_messages, retained_max_bytes)
        self.expiry = HandTimers(self.clock)
        self.will_timers = HandTimers(self.clock)
        self.registry.timers = self.expiry
        self.registry.wills.restore(self.will_timers, [], self.clock.t)
        #: every store op the commands asked for, in order
        self.ops: list[Any] = []

    def carry(self) -> None:
        """The interpreter's part: deliveries and confirms to the sessions' transports
        (the store commits at once: confirms waiting for it go too)."""
        while out := self.broker.take_outcome():
            self.ops.extend(out.store_ops)
            for e in out.effects:
                if isinstance(e, Deliver):
                    e.channel.session.transport.deliver(e.channel, e.consumer_tag,
                                                        e.delivery_tag, e.redelivered,
                                                        e.message, e.properties)
                elif isinstance(e, Confirm):
                    e.channel.session.transport.send_confirm(e.channel, e.upto, e.multiple,
                                                             e.nack)

    def advance(self, seconds: float) -> None:
        """Time passes: due timers do what the listener's do."""
        self.clock.t += seconds
        reg = self.registry
        for key in self.expiry.take_due():
            if reg.expired(key):
                reg.drop_session(*key, self.clock.t)
        for key in self.will_timers.take_due():
            reg.wills.fire(key, self.clock.t)
        self.carry()

    def connect(self, client_id: str, version: int = pk.MQTT_5, clean: bool = True,
                user: str = "guest", vhost: str = "/", will: pk.Will | None = None,
                **props: Any) -> tuple[Client, pk.ConnAck]:
        proto = MQTTConnection(LIMITS)
        c = pk.Connect(client_id, version, clean, will=will, properties=Properties(**props))
        proto.receive_data(pk.encode(c, version), 0.0)
        (e,) = list(proto.events())
        assert isinstance(e, ev.ConnectReceived)
        rules = MQTTSession(self.registry, proto, f"test:{client_id}", clock=self.clock)
        client = Client(self, proto, rules, version)
        opened = rules.connect(e, Login(user, vhost), self.clock.t)
        self.carry()
        if opened is not None:
            rules.accept(*opened, self.clock.t)
        packets = client.received()
        ack = packets.pop(0)
        assert isinstance(ack, pk.ConnAck)
        client.backlog = packets
        return client, ack

    def rows(self, kind: type) -> list[Any]:
        return [op for op in self.ops if isinstance(op, kind)]
