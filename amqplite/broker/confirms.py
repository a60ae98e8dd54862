"""Publisher confirms, as pure accounting: publishes in, Confirm effects out.

Each publish on a channel in confirm mode gets the next sequence number.
When the shell takes an Outcome, every channel with new publishes gets
Confirm effects covering them: single nacks for seqs a ``reject-publish``
queue refused, acks (``multiple`` where they span several seqs) for the
rest. Effects follow the batch's other effects, so a publish's basic.return
always precedes its confirm. A Confirm waits for the store (``after_commit``)
when the batch stored a message, or when an earlier Confirm of the channel
still waits: confirms leave in sequence order.

On a channel selected with ``settle_early`` (AMQP), a held Confirm also goes
once consumers have acked every stored entry of the publishes it covers
(its ``ConfirmGate``), as RabbitMQ confirms a message once it is persisted
or acked by all the queues it went to: a message no queue holds any more
has no durability left to owe, and its insert and ack then cancel in the
store (``storeops.settle_batch``). The order rule stands: a Confirm goes
only after every earlier one of its channel.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from amqplite.broker import errors as E
from amqplite.broker.commands import CONFIRM_SELECT
from amqplite.broker.effects import Confirm

if TYPE_CHECKING:
    from amqplite.broker.effects import PublishResult
    from amqplite.broker.model import ChannelState


#: a held Confirm's ``state``: waiting, its commit ended (not sent yet), sent
HELD, LANDED, SENT = 0, 1, 2


class ConfirmGate:
    """The stored entries of one emission's publishes that no consumer has acked yet.

    The publisher counts each durable entry of a gated publish in (``pending``)
    and ties it to the entry (``Entry.gate``); the entry's ack counts it out. A
    stored part no ack can settle (a stream append, a retained row) counts in
    with no entry, so such a gate never opens: its Confirm waits for the commit.
    """

    __slots__ = ("confirm", "due", "pending")

    def __init__(self, due: list[ConfirmGate]) -> None:
        self.pending = 0
        #: the held Confirm it may release; None until emitted (or not gated: nacks)
        self.confirm: Confirm | None = None
        #: ``Confirms.due``: where an ack that opens the gate puts it
        self.due = due


class ConfirmState:
    """Confirm bookkeeping of one channel in confirm mode."""

    __slots__ = ("dirty", "early", "emitted_upto", "gate", "held", "nacks", "next_seq",
                 "stored")

    def __init__(self, early: bool = False) -> None:
        self.next_seq = 1
        #: every seq up to here is covered by an emitted Confirm
        self.emitted_upto = 0
        #: seqs refused by a queue since the last emission
        self.nacks: list[int] = []
        #: publishes since the last emission...
        self.dirty = False
        #: ...one of which needs a commit
        self.stored = False
        #: emitted Confirms that wait for a commit (or their gate), oldest first
        self.held: deque[Confirm] = deque()
        #: held Confirms may go once consumers acked what they cover (``settle_early``)
        self.early = early
        #: the gate of the publishes since the last emission (early channels only)
        self.gate: ConfirmGate | None = None


class Confirms:
    """confirm.select, seq numbering and the Confirm effects; receives the effects list."""

    def __init__(self, effects: list[Any]) -> None:
        self.effects = effects
        #: channels with publishes not yet covered by a Confirm effect
        self.confirm_dirty: list[ChannelState] = []
        #: gates whose entries were all acked since the last outcome (``release_due``)
        self.due: list[ConfirmGate] = []

    def confirm_select(self, ch: ChannelState, settle_early: bool = False) -> None:
        """``settle_early``: a Confirm may go before its commit once consumers have
        acked everything it covers (RabbitMQ's rule; the fronts whose protocol
        promises an ack after the write leave it off)."""
        if ch.tx:
            raise E.precondition("cannot switch from tx to confirm mode", CONFIRM_SELECT)
        ch.confirm = True
        if ch.confirms is None:
            ch.confirms = ConfirmState(settle_early)

    def gate_of(self, ch: ChannelState) -> ConfirmGate | None:
        """The gate a publish on ``ch`` counts its stored entries in, or None."""
        st = ch.confirms
        if st is None or not st.early:
            return None
        g = st.gate
        if g is None:
            g = st.gate = ConfirmGate(self.due)
        return g

    def _confirm_published(self, ch: ChannelState, res: PublishResult) -> None:
        st = ch.confirms
        assert st is not None
        seq = st.next_seq
        st.next_seq = seq + 1
        if res.rejected:
            st.nacks.append(seq)
        if res.stored:
            st.stored = True
        if not st.dirty:
            st.dirty = True
            self.confirm_dirty.append(ch)

    def _emit_confirms(self) -> None:
        for ch in self.confirm_dirty:
            st = ch.confirms
            assert st is not None
            st.dirty = False
            gate, st.gate = st.gate, None
            if not ch.open:
                continue
            after = st.stored or len(st.held) > 0
            st.stored = False
            nacks, st.nacks = st.nacks, []
            for seq in nacks:
                self._confirm_upto(ch, st, seq - 1, after, None)
                self._emit(ch, st, Confirm(ch, seq, False, True, after), None)
            self._confirm_upto(ch, st, st.next_seq - 1, after, None if nacks else gate)
        self.confirm_dirty.clear()

    def _confirm_upto(self, ch: ChannelState, st: ConfirmState, upto: int, after: bool,
                      gate: ConfirmGate | None) -> None:
        if upto > st.emitted_upto:
            n = upto - st.emitted_upto
            self._emit(ch, st, Confirm(ch, upto, n > 1, False, after, n), gate)

    def _emit(self, ch: ChannelState, st: ConfirmState, c: Confirm,
              gate: ConfirmGate | None) -> None:
        st.emitted_upto = c.upto
        if c.after_commit:
            if gate is not None and gate.pending == 0 and not st.held:
                c.after_commit = False  # every stored entry it covers is acked already
            else:
                st.held.append(c)
                if gate is not None:
                    c.gate = gate
                    gate.confirm = c
        self.effects.append(c)

    def confirm_landed(self, c: Confirm, failed: bool = False) -> list[Confirm]:
        """The commit an ``after_commit`` Confirm waited for has ended (``failed``: a
        nack then, unless its gate sent it already). The held Confirms of its channel
        due now, in order, for the shell to send (``c`` itself, as a rule)."""
        if c.state == SENT:
            return []
        c.state = LANDED
        if failed:
            c.nack = True
        st = c.channel.confirms
        return [] if st is None else _due(st)

    def release_due(self) -> None:
        """Confirms that gates opened by acks let go: effects sent at once."""
        due = self.due[:]
        self.due.clear()  # the gates hold this list itself
        for gate in due:
            c = gate.confirm
            if c is None or c.state == SENT or not c.channel.open:
                continue  # a closed channel's confirms die with it
            st = c.channel.confirms
            if st is None:
                continue
            for r in _due(st):
                self.effects.append(Confirm(r.channel, r.upto, r.multiple, r.nack, False,
                                            r.covered))


def _due(st: ConfirmState) -> list[Confirm]:
    """Take the held Confirms from the front that may go: landed, or gated and opened."""
    held = st.held
    out: list[Confirm] = []
    while held:
        c = held[0]
        if c.state != LANDED:
            g = c.gate
            if g is None or g.pending:
                break
        held.popleft()
        c.state = SENT
        g = c.gate
        if g is not None:  # sent: later acks need not find it (nor keep its channel)
            g.confirm = None
            c.gate = None
        out.append(c)
    return out
