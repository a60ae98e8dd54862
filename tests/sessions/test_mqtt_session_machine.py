"""The outbound QoS 1/2 flows of one persistent session under random acks and
reconnects (hypothesis state machine, plain calls): never two messages in
flight with one packet id, never more in flight than the client's Receive
Maximum, an id freed once and never resent after its flow ended, a released
(PUBREC'd) message never sent again, and nothing waits while the window has
room."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqplite.protocol.mqtt import packets as pk
from tests.sessions.mqtt_node import Client, Node

WINDOW = 3


class OutboundFlows(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.node = Node()
        self.pub, _ = self.node.connect("pub")
        self.sub = self._connect_sub(clean=True)
        self.sub.send(pk.Subscribe(1, (pk.Subscription("t", 2),)))
        #: the client's view: packet id -> [payload, qos, released, PUBREL seen]
        self.inflight: dict[int, list[object]] = {}
        self.published: list[bytes] = []
        self.done: set[bytes] = set()
        self.n = 0
        self._take()

    def _connect_sub(self, clean: bool) -> Client:
        c, _ = self.node.connect("sub", clean=clean, session_expiry_interval=3600,
                                 receive_maximum=WINDOW)
        self.backlog = c.backlog
        return c

    def _take(self) -> None:
        packets = self.backlog + self.sub.received()
        self.backlog = []
        for p in packets:
            if isinstance(p, pk.Publish):
                assert p.qos in (1, 2) and p.packet_id is not None
                assert p.payload not in self.done, "a finished message came again"
                known = self.inflight.get(p.packet_id)
                if known is not None:
                    assert p.dup and known[0] == p.payload, "two in flight with one id"
                    assert not known[2], "a released message was sent again"
                    continue
                self.inflight[p.packet_id] = [p.payload, p.qos, False, False]
            elif isinstance(p, pk.PubRel):
                entry = self.inflight.get(p.packet_id)
                assert entry is not None and entry[2], "PUBREL for an id not released"
                entry[3] = True
            elif not isinstance(p, pk.SubAck):
                raise AssertionError(f"unexpected {p}")

    def _pids(self, qos: int, released: bool | None = None, rel_seen: bool = False) -> list[int]:
        return sorted(pid for pid, (_, q, r, seen) in self.inflight.items()
                      if q == qos and (released is None or r == released)
                      and (not rel_seen or seen))

    @rule(qos=st.sampled_from([1, 2]))
    def publish(self, qos: int) -> None:
        self.n += 1
        payload = b"m%d" % self.n
        pid = self.n % 60_000 + 1
        self.published.append(payload)
        self.pub.send(pk.Publish("t", payload, qos=qos, packet_id=pid))
        if qos == 2:
            self.pub.send(pk.PubRel(pid))
        self.pub.received()
        self._take()

    @precondition(lambda self: self._pids(1))
    @rule(data=st.data())
    def puback(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(self._pids(1)))
        self.done.add(self.inflight.pop(pid)[0])  # type: ignore[arg-type]
        self.sub.send(pk.PubAck(pid))
        self._take()

    @precondition(lambda self: self._pids(2, released=False))
    @rule(data=st.data())
    def pubrec(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(self._pids(2, released=False)))
        self.inflight[pid][2] = True
        self.sub.send(pk.PubRec(pid))
        self._take()

    @precondition(lambda self: self._pids(2, released=True, rel_seen=True))
    @rule(data=st.data())
    def pubcomp(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(self._pids(2, released=True, rel_seen=True)))
        self.done.add(self.inflight.pop(pid)[0])  # type: ignore[arg-type]
        self.sub.send(pk.PubComp(pid))
        self._take()

    @rule()
    def reconnect(self) -> None:
        """The connection drops; the client resumes the session. What it had not
        acknowledged comes again; PUBREL comes again for what it had released."""
        self.sub.close()
        for pid, entry in list(self.inflight.items()):
            if entry[2]:
                entry[3] = False
            else:
                del self.inflight[pid]
        self.sub = self._connect_sub(clean=False)
        self._take()

    @invariant()
    def window_kept(self) -> None:
        assert len(self.inflight) <= WINDOW

    @invariant()
    def ids_match_the_session(self) -> None:
        rules = self.sub.rules
        assert set(rules.tags) == set(self.inflight)
        assert rules.ids.released == {pid for pid, e in self.inflight.items() if e[2]}

    @invariant()
    def nothing_waits_while_there_is_room(self) -> None:
        flying = {e[0] for e in self.inflight.values()}
        waiting = [m for m in self.published if m not in self.done and m not in flying]
        assert len(self.inflight) == WINDOW or not waiting, waiting


TestOutboundFlows = OutboundFlows.TestCase
TestOutboundFlows.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])


KEYS = [("/", "a"), ("/", "b"), ("v2", "a")]


class Registry(RuleBasedStateMachine):
    """Sessions by (vhost, client id) under random connects, takeovers, drops and
    time: one connection per session, a countdown only while disconnected, and a
    session's queue and row exactly while it is persistent and not expired (or
    resumed with expiry 0 and still connected)."""

    def __init__(self) -> None:
        super().__init__()
        self.node = Node()
        self.node.broker.add_vhost("v2")
        #: the model: key -> its current client, and when a disconnected one expires
        self.live: dict[tuple[str, str], Client] = {}
        self.expires: dict[tuple[str, str], float] = {}
        self.stored: set[tuple[str, str]] = set()
        #: resumed with expiry 0: the row stays (expiry 0) until the connection ends
        self.ending: set[tuple[str, str]] = set()

    @rule(key=st.sampled_from(KEYS), clean=st.booleans(), expiry=st.sampled_from([0, 10, 30]))
    def connect(self, key: tuple[str, str], clean: bool, expiry: int) -> None:
        old = self.live.get(key)
        c, ack = self.node.connect(key[1], vhost=key[0], clean=clean,
                                   session_expiry_interval=expiry)
        resumed = not clean and key in self.stored
        assert ack.session_present == resumed
        if old is not None:
            assert old.rules.session is None and old.proto.closed  # taken over
        c.send(pk.Subscribe(1, (pk.Subscription("x", 1),)))
        self.live[key] = c
        self.expires.pop(key, None)
        self.ending.discard(key)
        if resumed and not expiry:
            self.ending.add(key)
        if clean or not expiry:
            self.stored.discard(key)
        if expiry:
            self.stored.add(key)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), normal=st.booleans())
    def drop(self, data: st.DataObject, normal: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.live)))
        c = self.live.pop(key)
        self.ending.discard(key)
        if normal:
            c.send(pk.Disconnect())
        else:
            c.close()
        expiry = c.proto.session_expiry_interval
        if expiry:
            self.expires[key] = self.node.clock.t + expiry
        else:
            self.stored.discard(key)

    @rule(seconds=st.sampled_from([1, 10, 25]))
    def wait(self, seconds: int) -> None:
        self.node.advance(seconds)
        for key, at in list(self.expires.items()):
            if at <= self.node.clock.t:
                del self.expires[key]
                self.stored.discard(key)

    @invariant()
    def one_connection_per_session(self) -> None:
        reg = self.node.registry
        assert {k: c.rules for k, c in self.live.items()} == reg.clients
        assert all(c.rules.session is not None for c in self.live.values())

    @invariant()
    def countdowns_only_while_disconnected(self) -> None:
        due = self.node.expiry.due
        assert not set(due) & set(self.live)
        assert due == self.expires

    @invariant()
    def rows_and_queues_while_persistent(self) -> None:
        reg = self.node.registry
        assert set(reg.stored) == self.stored | self.ending
        for key in KEYS:
            queues = self.node.broker.vhosts[key[0]].queues
            exists = f"mqtt-subscription-{key[1]}qos1" in queues
            assert exists == (key in self.stored or key in self.live), key


TestRegistry = Registry.TestCase
TestRegistry.settings = settings(max_examples=150, stateful_step_count=30, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow])
