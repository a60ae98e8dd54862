"""Publisher confirms, as pure accounting: publishes in, Confirm effects out.

Each publish on a channel in confirm mode gets the next sequence number.
When the shell takes an Outcome, every channel with new publishes gets
Confirm effects covering them: single nacks for seqs a ``reject-publish``
queue refused, acks (``multiple`` where they span several seqs) for the
rest. Effects follow the batch's other effects, so a publish's basic.return
always precedes its confirm. A Confirm waits for the store (``after_commit``)
when the batch stored a message, or when an earlier Confirm of the channel
still waits: confirms leave in sequence order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqplite.broker import errors as E
from amqplite.broker.commands import CONFIRM_SELECT
from amqplite.broker.effects import Confirm

if TYPE_CHECKING:
    from amqplite.broker.effects import PublishResult
    from amqplite.broker.model import ChannelState


class ConfirmState:
    """Confirm bookkeeping of one channel in confirm mode."""

    __slots__ = ("dirty", "emitted_upto", "nacks", "next_seq", "stored", "waiting")

    def __init__(self) -> None:
        self.next_seq = 1
        #: every seq up to here is covered by an emitted Confirm
        self.emitted_upto = 0
        #: seqs refused by a queue since the last emission
        self.nacks: list[int] = []
        #: publishes since the last emission...
        self.dirty = False
        #: ...one of which needs a commit
        self.stored = False
        #: emitted Confirms that wait for a commit
        self.waiting = 0


class Confirms:
    """confirm.select, seq numbering and the Confirm effects; receives the effects list."""

    def __init__(self, effects: list[Any]) -> None:
        self.effects = effects
        #: channels with publishes not yet covered by a Confirm effect
        self.confirm_dirty: list[ChannelState] = []

    def confirm_select(self, ch: ChannelState) -> None:
        if ch.tx:
            raise E.precondition("cannot switch from tx to confirm mode", CONFIRM_SELECT)
        ch.confirm = True
        if ch.confirms is None:
            ch.confirms = ConfirmState()

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
            if not ch.open:
                continue
            after = st.stored or st.waiting > 0
            st.stored = False
            nacks, st.nacks = st.nacks, []
            for seq in nacks:
                self._confirm_upto(ch, st, seq - 1, after)
                self._emit(ch, st, Confirm(ch, seq, False, True, after))
            self._confirm_upto(ch, st, st.next_seq - 1, after)
        self.confirm_dirty.clear()

    def _confirm_upto(self, ch: ChannelState, st: ConfirmState, upto: int, after: bool) -> None:
        if upto > st.emitted_upto:
            n = upto - st.emitted_upto
            self._emit(ch, st, Confirm(ch, upto, n > 1, False, after, n))

    def _emit(self, ch: ChannelState, st: ConfirmState, c: Confirm) -> None:
        self.effects.append(c)
        st.emitted_upto = c.upto
        if c.after_commit:
            st.waiting += 1

    def confirm_landed(self, c: Confirm) -> None:
        """The commit an ``after_commit`` Confirm waited for has ended (sent or not)."""
        st = c.channel.confirms
        if st is not None:
            st.waiting -= 1
