"""Publisher confirms as a hypothesis state machine, with no event loop.

The machine drives the pure broker (publish, take an Outcome, commit or fail
a store submission, close and reopen a channel) and plays the shell's part
exactly as ``server.interpreter`` does: Confirms without ``after_commit`` are
sent at once, the others ride on the submission of their batch and turn to
nacks if it fails; nothing is sent on a closed channel. Invariants checked
on the frames a client would see:

- every seq is confirmed exactly once, in order, with no gap;
- a stored (persistent, durable) message is confirmed only after its commit,
  acked when it committed and nacked when it failed, or (channels selected
  with ``settle_early``, as AMQP's) once a consumer has acked it;
- a message refused by a full ``reject-publish`` queue is nacked;
- a publish's basic.return precedes the Confirm covering it;
- a closed channel gets no frame, and a reopened channel number starts at 1.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqplite.broker.core import Broker
from amqplite.broker.effects import Confirm, Deliver, Return
from amqplite.broker.model import ChannelState
from tests.broker.conftest import PERSISTENT, TRANSIENT, FakeClock

KINDS = ("durable", "transient", "unroutable", "full")


class ConfirmMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.early = False
        self.b = Broker(now=FakeClock())
        self.session = self.b.open_session("guest", "/")
        setup = self.b.open_channel(self.session, 9)
        self.b.queue_declare(setup, "durable", durable=True)
        self.b.queue_declare(setup, "transient")
        self.b.queue_declare(setup, "full", arguments={"x-max-length": 0,
                                                       "x-overflow": "reject-publish"})
        #: a consumer of "durable" that acks when told (``ack``): delivery tag -> body
        self.sub = self.b.open_channel(self.session, 8)
        self.b.basic_qos(self.sub, 0, 5, False)
        self.b.basic_consume(self.sub, "durable", "c")
        self.delivered: dict[int, bytes] = {}
        #: bodies (channel id, seq) a consumer has acked
        self.acked: set[tuple[int, int]] = set()
        self.b.take_outcome()
        #: per channel object: seq -> kind, and the frames a client saw
        self.kinds: dict[int, dict[int, str]] = {}
        self.frames: dict[int, list[tuple[int, bool, bool, str]]] = {}
        #: store submissions not yet committed, oldest first: their waiting Confirms
        self.submissions: list[list[Confirm]] = []
        self.closed: list[ChannelState] = []
        self.acked_at: dict[tuple[int, int], set[tuple[int, int]]] = {}
        #: id of each Confirm whose submission ended -> whether it committed; ``kept``
        #: holds those Confirms, since an id is unique only while its object lives (a
        #: freed one's id, reused by a later Confirm, made that one look landed)
        self.landed: dict[int, bool] = {}
        self.kept: list[Confirm] = []
        self.ch = self._open()

    def _open(self) -> ChannelState:
        ch = self.b.open_channel(self.session, 1)
        self.b.confirm_select(ch, settle_early=self.early)
        self.kinds[id(ch)] = {}
        self.frames[id(ch)] = []
        return ch

    def _send(self, c: Confirm, nack: bool, when: str) -> None:
        if c.channel.open:  # the interpreter's rule
            self.frames[id(c.channel)].append((c.upto, c.multiple, nack, when))
            if when == "now":  # what was acked when it left
                self.acked_at[(id(c.channel), c.upto)] = set(self.acked)

    # ------------------------------------------------------------ rules
    @rule(kind=st.sampled_from(KINDS))
    def publish(self, kind: str) -> None:
        seq = len(self.kinds[id(self.ch)]) + 1
        props = PERSISTENT if kind == "durable" else TRANSIENT
        rk = "nowhere" if kind == "unroutable" else kind
        self.b.basic_publish(self.ch, "", rk, props, f"{id(self.ch)} {seq}".encode(),
                             mandatory=True)
        self.kinds[id(self.ch)][seq] = kind

    @rule()
    def end_batch(self) -> None:
        out = self.b.take_outcome()
        returned = [(e.channel, int(e.message.body.split()[1])) for e in out.effects
                    if isinstance(e, Return)]
        for e in out.effects:
            if isinstance(e, Deliver):
                self.delivered[e.delivery_tag] = e.message.body
        confirms = [e for e in out.effects if isinstance(e, Confirm)]
        for c in confirms:
            assert c.channel.open, "no Confirm is emitted for a closed channel"
        # returns before the confirms that cover them
        first_confirm = next((i for i, e in enumerate(out.effects) if isinstance(e, Confirm)),
                             len(out.effects))
        last_return = max((i for i, e in enumerate(out.effects) if isinstance(e, Return)),
                          default=-1)
        assert last_return < first_confirm
        for ch, seq in returned:
            assert self.kinds[id(ch)][seq] == "unroutable"
        waiting = [c for c in confirms if c.after_commit]
        for c in confirms:
            if not c.after_commit:
                self._send(c, c.nack, "now")
        if out.store_ops or waiting:
            self.submissions.append(waiting)

    @precondition(lambda self: bool(self.submissions))
    @rule(ok=st.booleans())
    def commit(self, ok: bool) -> None:
        for c in self.submissions.pop(0):
            self.landed[id(c)] = ok
            self.kept.append(c)
            for r in self.b.confirm_landed(c, not ok):  # the interpreter's way
                # r: c, or a later one c held back: landed already, or let go by acks
                landed = self.landed.get(id(r))
                when = "now" if landed is None else "ok" if landed else "failed"
                self._send(r, r.nack, when)

    @precondition(lambda self: bool(self.delivered))
    @rule(data=st.data(), multiple=st.booleans())
    def ack(self, data: st.DataObject, multiple: bool) -> None:
        """The consumer acks a delivery (or all up to it); acks can release Confirms."""
        tag = data.draw(st.sampled_from(sorted(self.delivered)))
        tags = [t for t in self.delivered if t <= tag] if multiple else [tag]
        self.b.basic_ack(self.sub, tag, multiple=multiple)
        for t in tags:
            ch_id, seq = self.delivered.pop(t).split()
            self.acked.add((int(ch_id), int(seq)))

    @precondition(lambda self: not self.early and not self.kinds[id(self.ch)])
    @rule()
    def settle_early(self) -> None:
        """From now on, channels opened are AMQP's: acks may release their Confirms."""
        self.early = True
        self.b.close_channel(self.ch)
        self.closed.append(self.ch)
        self.ch = self._open()

    @rule()
    def close_and_reopen(self) -> None:
        self.b.close_channel(self.ch)
        self.closed.append(self.ch)
        self.ch = self._open()

    @rule()
    def drain(self) -> None:
        """Everything published on the open channel is confirmed once the store catches up."""
        self.end_batch()
        while self.submissions:
            self.commit(True)
        covered = self._covered(self.ch)
        assert sorted(covered) == list(range(1, len(self.kinds[id(self.ch)]) + 1))

    # -------------------------------------------------------- invariants
    def _covered(self, ch: ChannelState) -> dict[int, tuple[bool, str]]:
        """seq -> (nacked, when) from the frames, checking order and coverage."""
        out: dict[int, tuple[bool, str]] = {}
        prev = 0
        for upto, multiple, nack, when in self.frames[id(ch)]:
            assert upto > prev, "confirms go up"
            if not multiple:
                assert upto == prev + 1, "a single confirm leaves no gap behind"
            for seq in range(prev + 1, upto + 1):
                assert seq not in out
                out[seq] = (nack, when)
            prev = upto
        return out

    @invariant()
    def frames_are_right(self) -> None:
        for ch in [*self.closed, self.ch]:
            kinds = self.kinds[id(ch)]
            for seq, (nack, when) in self._covered(ch).items():
                kind = kinds[seq]
                if kind == "full":
                    assert nack, f"seq {seq} refused by a full queue must be nacked"
                elif when == "failed":
                    assert nack, f"seq {seq}: its commit failed"
                else:
                    assert not nack, f"seq {seq} ({kind}) was nacked for nothing"
                if kind == "durable" and when == "now":
                    upto = next(u for u, *_ in self.frames[id(ch)] if u >= seq)
                    assert (id(ch), seq) in self.acked_at[(id(ch), upto)], (
                        f"seq {seq} confirmed before its commit and before its ack")

    @invariant()
    def reopened_channel_starts_at_one(self) -> None:
        frames = self.frames[id(self.ch)]
        if frames:
            first_upto, multiple, _, _ = frames[0]
            assert first_upto == 1 or multiple


TestConfirms: Any = ConfirmMachine.TestCase
TestConfirms.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
