"""The ``$SYS/broker/...`` clock: every ``mqtt_sys_interval`` seconds the counters are
sampled, the load averages move, and the values that changed go as QoS 0 PUBLISH
straight to the connected sessions with a ``$SYS`` subscription. The tree's
content is sessions/mqtt/systree.py's (pure); this samples and sends.

Nothing here touches the store or the broker's queues: the values live in memory
only (a new subscription gets them from :meth:`SysTicker.values`, retained), so
a tick writes no row, no delivery-log line, and fills no offline session's
queue. A tick with no ``$SYS`` subscriber only folds the counters into the loads.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from amqplite import __version__
from amqplite.broker import mqtt_retained
from amqplite.protocol.mqtt.connection import State
from amqplite.protocol.mqtt.subscriptions import SESSION_PREFIX, SHARED_PREFIX
from amqplite.sessions.mqtt.systree import (
    Figures,
    Loads,
    changed,
    counters,
    matching,
    totals,
    tree,
)

if TYPE_CHECKING:
    from amqplite.server.mqtt.listener import MQTTListener

_MQTT_QUEUES = (SESSION_PREFIX, SHARED_PREFIX)


class SysTicker:
    """The listener's ``$SYS`` tree: samples, loads, the last values sent."""

    def __init__(self, listener: MQTTListener, started_at: float) -> None:
        self.listener = listener
        self.started_at = started_at
        self.loads = Loads()
        #: what the last tick sent (empty after a tick nobody watched: all go next)
        self.last: dict[str, str] = {}
        self.maximum = 0

    def _totals(self) -> tuple[int, int, int, int]:
        """PUBLISH received and sent, bytes received and sent: the ended connections'
        and the live ones' (one sum over the MQTT connections)."""
        stats = self.listener.stats
        b_in, b_out = stats.bytes_received, stats.bytes_sent
        for c in self.listener.connections:
            b_in += c.bytes_in
            b_out += c.bytes_out
        return sum(stats.received.values()), sum(stats.delivered.values()), b_in, b_out

    def figures(self, now: float) -> Figures:
        """A full sample: the counts walk every vhost's queues and bindings."""
        lst = self.listener
        reg = lst.registry
        received, sent, b_in, b_out = self._totals()
        connected = len(reg.clients)
        self.maximum = max(self.maximum, connected)
        broker = lst.broker
        subs = stored = retained = 0
        for name, vh in broker.vhosts.items():
            rs = broker.retained.find(mqtt_retained.owner(name))
            if rs is not None:
                retained += len(rs)
            for (kind, dest), bindings in vh.bindings_to.items():
                if kind == "queue" and dest.startswith(_MQTT_QUEUES):
                    subs += sum(1 for b in bindings if b.source == reg.exchange)
                    q = vh.queues.get(dest)
                    if q is not None:
                        stored += q.message_count
        return Figures(
            version=f"amqplite version {__version__}", uptime=int(now - self.started_at),
            connected=connected,
            disconnected=sum(1 for k in reg.stored if k not in reg.clients),
            maximum=self.maximum, received=received, sent=sent, bytes_received=b_in,
            bytes_sent=b_out, connections=lst.stats.opened, subscriptions=subs,
            retained=retained, stored=stored + retained)

    def values(self) -> dict[str, str]:
        """The whole tree now (a new ``$SYS`` subscription's retained messages)."""
        return tree(self.figures(time.time()), self.loads)

    def tick(self, now: float) -> int:
        """One interval: fold the counters into the loads; when sessions watch, send
        them what changed. Returns the PUBLISH packets sent."""
        reg = self.listener.registry
        watchers = [c for c in reg.clients.values()
                    if c.subs is not None and c.subs.table.dollar]
        if not watchers:
            self.maximum = max(self.maximum, len(reg.clients))
            self.loads.update(totals(*self._totals(), self.listener.stats.opened), now)
            self.last = {}
            return 0
        f = self.figures(now)
        self.loads.update(counters(f), now)
        new = tree(f, self.loads)
        moved, self.last = changed(self.last, new), new
        n = 0
        for c in watchers:
            subs = c.subs
            if subs is None or not c.alive or c.proto.state is not State.CONNECTED:
                continue
            for topic, value in matching(moved, {f for _, f in subs.table.dollar}):
                c.proto.send_publish(topic, value.encode(), 0, False)
                n += 1
            c.flush()
        return n

    async def run(self, interval: float) -> None:
        """Tick every ``interval`` seconds until cancelled."""
        while True:
            await trio.sleep(interval)  # the timer: sys_interval
            self.tick(time.time())
