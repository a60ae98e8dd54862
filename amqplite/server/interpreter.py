"""The one interpreter of broker Outcomes: wire effects and store work in one step.

Every path into the broker (a connection's batch of frames, a timer, a
page-in, an admin request) ends by handing the broker's Outcome to
:meth:`Interpreter.apply`; ``Server.interpret`` and ``Server.execute`` are the
only callers. In one synchronous step it writes the wire effects to their
connections, in order, and hands the store operations and the waiters that
depend on them (confirms after commit, body eviction) to the store bridge,
so a confirm can never be attached to the wrong submission.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from amqplite.broker.core import Broker
from amqplite.broker.effects import (
    CancelNotify,
    CloseConnection,
    Confirm,
    Deliver,
    LoadEntries,
    Outcome,
    PageIn,
    ReadStream,
    Return,
    StreamDeliver,
)
from amqplite.server.counters import Counters
from amqplite.server.persistence import Persistence


class Interpreter:
    def __init__(self, broker: Broker, persistence: Persistence,
                 read: Callable[[PageIn | LoadEntries | ReadStream], None],
                 counters: Counters | None = None) -> None:
        self.broker = broker
        self.persistence = persistence
        self.counters = counters or Counters()
        #: starts a store read (a page-in or a load of spilled entries) in the background
        self._read = read
        #: connections holding confirms released by commits, flushed once the
        #: acknowledgements read together have all run (``flush_confirmed``)
        self._confirmed: dict[Any, None] = {}
        persistence.on_commits = self.flush_confirmed
        persistence.on_rollback = self._rolled_back

    def apply(self, outcome: Outcome, *, flush: bool = True) -> None:
        """Carry out ``outcome``; ``flush=False`` leaves the store batch open so the
        caller can attach a waiter to it (tx.commit-ok, a held declare-ok)."""
        persistence = self.persistence
        # the ops first: a Confirm waiting for them joins the same submission
        persistence.submit(outcome.store_ops, outcome.log)
        if outcome.evictable:
            persistence.add_waiter(functools.partial(self._evict, outcome.evictable))
        # connections written to, flushed once each after the whole outcome (in
        # the order first written): a batch of deliveries becomes one write
        written: dict[Any, None] = {}
        last: Any = None
        # consecutive deliveries to one connection go as one run (an AMQP connection
        # writes a run in one native call); the run is out before any other effect
        run: list[Deliver] = []
        for e in outcome.effects:
            t = type(e)
            if t is Deliver:
                tr = e.channel.session.transport
                if tr is not None:
                    if tr is not last:
                        if run:
                            _deliver_run(last, run)
                            run = []
                        written[tr] = last = tr
                    run.append(e)
                continue
            if run:
                _deliver_run(last, run)
                run = []
            if t is StreamDeliver:
                tr = e.channel.session.transport
                if tr is not None:
                    tr.deliver_stream(e.channel, e.consumer_tag, e.first_tag, e.entries)
                    if tr is not last:
                        written[tr] = last = tr
            elif t is Confirm:
                if e.after_commit:
                    persistence.add_waiter(functools.partial(self._committed, e))
                else:
                    tr = self._send_confirm(e, e.nack)
                    if tr is not None and tr is not last:
                        written[tr] = last = tr
                    if not e.nack:
                        self.counters.confirmed += e.covered
                        e.channel.n_confirm += e.covered
            elif t is Return:
                tr = e.channel.session.transport
                if tr is not None:
                    tr.send_return(e.channel, e.reply_code, e.reply_text, e.message)
                    if tr is not last:
                        written[tr] = last = tr
            elif t is CancelNotify:
                tr = e.channel.session.transport
                if tr is not None:
                    tr.send_cancel(e.channel, e.consumer_tag)
                    if tr is not last:
                        written[tr] = last = tr
            elif t is PageIn or t is LoadEntries or t is ReadStream:
                self._read(e)
            elif t is CloseConnection:
                tr = e.session.transport
                if tr is not None:
                    tr.force_close(e.reply_code, e.reply_text)
        if run:
            _deliver_run(last, run)
        for tr in written:
            tr.flush()
        if flush:
            persistence.flush()

    def _evict(self, entries: list[Any], err: BaseException | None) -> None:
        """After a commit, entries behind their queue's head may spill, and bodies deep
        in it leave RAM; spilling may write more rows: a command like any other."""
        if err is None:
            self.broker.commit_done(entries)
            self.apply(self.broker.take_outcome())

    def _rolled_back(self) -> None:
        """Ops the store could never take were undone in memory: carry out what that
        did (basic.cancel to the consumers of a queue that is gone, the deletes)."""
        self.apply(self.broker.take_outcome())

    def _committed(self, c: Confirm, err: BaseException | None) -> None:
        """The submission a Confirm waited for has ended: a failed commit turns it to
        nack. The broker says which held Confirms go now, in order: ``c`` as a rule,
        none if its consumers' acks let it go already, more if later ones were
        released by acks while ``c`` held them back."""
        for r in self.broker.confirm_landed(c, err is not None):
            tr = self._send_confirm(r, r.nack)
            if tr is not None:
                self._confirmed[tr] = None
            if not r.nack:
                self.counters.confirmed += r.covered
                r.channel.n_confirm += r.covered

    def flush_confirmed(self) -> None:
        """Write the confirms the commits just acknowledged, one write per connection.

        From the task that read the acknowledgements, at once: waking each
        connection's writer task instead cost the publisher a scheduling round of
        latency (the reader may run a whole batch of frames first), and with a
        window of unconfirmed publishes, latency is throughput."""
        confirmed = self._confirmed
        if confirmed:
            self._confirmed = {}
            for tr in confirmed:
                tr.flush()

    @staticmethod
    def _send_confirm(c: Confirm, nack: bool) -> Any:
        """Queue the confirm; returns the connection to flush, or None."""
        ch = c.channel
        tr: Any = ch.session.transport
        # a closed channel's confirms die with it, even when its number is reused
        if tr is not None and ch.open:
            tr.send_confirm(ch, c.upto, c.multiple, nack)
            return tr
        return None


def _deliver_run(tr: Any, run: list[Deliver]) -> None:
    """Hand a run of deliveries to their connection: at once where it takes a run
    (``deliver_run``: AMQP), else one ``deliver`` each (MQTT, STOMP, Kafka)."""
    many = getattr(tr, "deliver_run", None)
    if many is not None:
        many(run)
        return
    for e in run:
        tr.deliver(e.channel, e.consumer_tag, e.delivery_tag, e.redelivered, e.message,
                   e.properties)
