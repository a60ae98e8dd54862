"""Credit flow: stop reading from a publisher while its queue's consumers catch up.

One event loop runs the readers of publishers and the readers and writers of
consumers. Left alone, a publisher that reads 128 KiB per wake-up is taken in
as fast as the loop can route, faster than the same loop hands messages on,
and the queue between them grows until the publisher's own window (confirms,
in-flight limit) stops it: every message then waits behind that backlog
(publish->deliver latency = in flight / throughput). RabbitMQ's credit flow
blocks the reader of a channel whose queue is behind; this is the same idea.

The broker marks a session ``congested`` when a publish leaves a queue with
consumers holding more than ``FLOW_READY`` ready messages. Before its next
read the connection waits here until the queue is back under half of that;
every command's outcome (``Server.interpret``: an ack, a consume) may have
drained it, so waiters are checked then. A queue is a buffer too: when its
consumers would take longer than ``MAX_DRAIN_S`` to drain the backlog (a slow
or stuck consumer), the publisher goes on and the queue is left alone for
``EXEMPT_S``: publishers are paced to fast consumers, never held for long by
slow ones (a stuck consumer costs its publishers one ``JUDGE_AFTER_S`` pause
per ``EXEMPT_S``).
"""

from __future__ import annotations

import time
from typing import Any

import trio

from amqplite.broker.publish import FLOW_READY

#: reading resumes once the queue holds at most this many ready messages
RESUME_READY = FLOW_READY // 2
#: the longest the consumers may take to drain the backlog at the rate they drain it
#: (with a backlog of FLOW_READY: consumers slower than ~500 msgs/s are "slow")
MAX_DRAIN_S = 0.5
#: how long a pause runs before that rate is judged (a consumer the machine did not
#: schedule for a while is not slow)
JUDGE_AFTER_S = 0.1
#: a queue whose consumers were too slow is not waited for again for this long
EXEMPT_S = 1.0
#: no pause lasts longer (others may keep the queue full: dead-lettering, MQTT)
MAX_PAUSE_S = 1.0


def backlogged(q: Any) -> bool:
    """``q`` has consumers and more ready messages than reading resumes at."""
    return bool(q.consumers) and not q.deleted and len(q.ready) > RESUME_READY


class Flow:
    """The queues that paused readers wait on, and the queues exempt for now."""

    def __init__(self) -> None:
        self.waiting: dict[Any, trio.Event] = {}
        self._exempt: dict[Any, float] = {}

    def check(self) -> None:
        """Wake the readers whose queue has drained (after every outcome)."""
        for q in [q for q in self.waiting if not backlogged(q)]:
            self.waiting.pop(q).set()

    async def wait(self, session: Any) -> None:
        """Hold a publisher's reader while its congested queue drains quickly."""
        q, session.congested = session.congested, None
        now = time.monotonic()
        if self._exempt:
            if self._exempt.get(q, 0.0) > now:
                return
            self._exempt = {k: t for k, t in self._exempt.items() if t > now}
        start, taken = now, q.deliver_get
        while backlogged(q):
            event = self.waiting.get(q)
            if event is None:
                event = self.waiting[q] = trio.Event()
            with trio.move_on_after(0.01):
                await event.wait()
            elapsed = time.monotonic() - start
            if elapsed > MAX_PAUSE_S:
                return
            done = q.deliver_get - taken
            if elapsed >= JUDGE_AFTER_S and (
                    (len(q.ready) - RESUME_READY) * elapsed > MAX_DRAIN_S * done):
                self._exempt[q] = time.monotonic() + EXEMPT_S
                self.waiting.pop(q, event).set()  # the others go on too
                return
