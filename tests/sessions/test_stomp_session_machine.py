"""One STOMP client on one queue under random SENDs, subscriptions in every ack
mode, ACK/NACK (cumulative and individual), UNSUBSCRIBE, transactions, commits
and reconnects (hypothesis state machine, plain calls): no ERROR for valid
frames, a message never delivered again once settled, never two subscriptions
holding it at once, and every message published is settled, ready or held by
exactly one delivery."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.sessions.stomp_node import Node

IDS = ("a", "b")
MODES = ("auto", "client", "client-individual")


class OneQueue(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.node = Node()
        self.client = self.node.connect()
        self.n = 0
        self.published: set[str] = set()
        self.settled: set[str] = set()
        #: subscription id -> its ack mode, while subscribed
        self.subs: dict[str, str] = {}
        #: unsettled deliveries: ack id -> (subscription id, body), in delivery order
        self.held: dict[str, tuple[str, str]] = {}
        self.tx: list[str] | None = None  # bodies sent in the open transaction
        #: the latest ack mode of each subscription id (its channel's)
        self.modes: dict[str, str] = {}

    def _take(self) -> None:
        for f in self.client.frames():
            assert f.command in ("MESSAGE", "RECEIPT"), (f.command, f.headers, f.body)
            if f.command != "MESSAGE":
                continue
            body = f.body.decode()
            assert body not in self.settled, f"{body} delivered after it was settled"
            assert all(b != body for _, b in self.held.values()), f"{body} held twice"
            sub = f.headers["subscription"]
            if self.subs.get(sub) == "auto" or "ack" not in f.headers:
                self.settled.add(body)
            else:
                self.held[f.headers["ack"]] = (sub, body)

    @rule()
    def send(self) -> None:
        self.n += 1
        body = f"m{self.n}"
        if self.tx is not None:
            self.client.send("SEND", body.encode(), destination="/queue/q", transaction="t")
            self.tx.append(body)
        else:
            self.client.send("SEND", body.encode(), destination="/queue/q",
                             persistent="true")
            self.published.add(body)
        self._take()

    @precondition(lambda self: self.tx is None)
    @rule()
    def begin(self) -> None:
        self.client.send("BEGIN", transaction="t")
        self.tx = []

    @precondition(lambda self: self.tx is not None)
    @rule(commit=st.booleans())
    def end(self, commit: bool) -> None:
        assert self.tx is not None
        self.client.send("COMMIT" if commit else "ABORT", transaction="t")
        if commit:
            self.published.update(self.tx)
        self.tx = None
        self._take()

    @rule(sub=st.sampled_from(IDS), mode=st.sampled_from(MODES),
          prefetch=st.sampled_from((None, "1", "2")))
    def subscribe(self, sub: str, mode: str, prefetch: str | None) -> None:
        if sub in self.subs:
            return
        extra = {} if prefetch is None else {"prefetch_count": prefetch}
        self.client.send("SUBSCRIBE", id=sub, destination="/queue/q", ack=mode, **extra)
        self.subs[sub] = self.modes[sub] = mode
        self._take()

    @rule(sub=st.sampled_from(IDS))
    def unsubscribe(self, sub: str) -> None:
        if sub not in self.subs:
            return
        self.client.send("UNSUBSCRIBE", id=sub)
        del self.subs[sub]
        self._take()

    @precondition(lambda self: self.held)
    @rule(data=st.data(), nack=st.booleans(), requeue=st.booleans())
    def settle(self, data: st.DataObject, nack: bool, requeue: bool) -> None:
        ack_id = data.draw(st.sampled_from(sorted(self.held)))
        sub, _ = self.held[ack_id]
        tag = int(ack_id.rsplit("@@", 1)[1])
        # client mode is cumulative within its subscription
        covered = [k for k, (s, _) in self.held.items()
                   if k == ack_id or (s == sub and self._mode_of(k) == "client"
                                      and int(k.rsplit("@@", 1)[1]) < tag)]
        if nack:
            self.client.send("NACK", id=ack_id, requeue="true" if requeue else "false")
        else:
            self.client.send("ACK", id=ack_id)
        for k in covered:
            _, body = self.held.pop(k)
            if not (nack and requeue):
                self.settled.add(body)
        self._take()

    def _mode_of(self, ack_id: str) -> str:
        return self.modes.get(ack_id.split("@@", 1)[0][2:], "")

    @rule()
    def commit_store(self) -> None:
        self.node.commit()
        self._take()

    @rule()
    def reconnect(self) -> None:
        self.client.close()
        self.node.run()
        self.held.clear()  # back to the queue
        self.subs.clear()
        self.modes.clear()
        self.tx = None
        self.client = self.node.connect()
        self._take()

    @invariant()
    def accounted(self) -> None:
        q = self.node.broker.vhosts["/"].queues.get("q")
        if q is None:
            return
        assert q.message_count + q.unacked == len(self.published - self.settled), (
            q.message_count, q.unacked, len(self.published), len(self.settled))
        assert q.unacked == len(self.held)
        assert not self.client.finished


OneQueue.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
test_one_queue = OneQueue.TestCase
