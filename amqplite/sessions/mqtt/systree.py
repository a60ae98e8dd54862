"""Mosquitto's ``$SYS/broker/...`` tree: the figures' topics and values, and the load
averages, as plain functions of plain values (the shell samples the counters and
runs the clock: server/mqtt/systree.py).

The names and formats are mosquitto(8)'s "BROKER STATUS": counts as decimal
integers, ``uptime`` as "N seconds", the loads as "%.2f" per-minute rates,
exponentially decayed over 1, 5 and 15 minutes as Mosquitto computes them. What
each figure counts here is in docs/mqtt.md ("$SYS"): the node's MQTT front,
all vhosts together, as a Mosquitto broker counts its own clients.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

from amqplite.protocol.mqtt.topics import matches

PREFIX = "$SYS/broker/"
#: the load windows: topic suffix and the decay's time constant in seconds
WINDOWS = (("1min", 60.0), ("5min", 300.0), ("15min", 900.0))
#: the counters that have load averages, by their ``load/...`` topic
LOADS = ("messages/received", "messages/sent", "publish/received", "publish/sent",
         "bytes/received", "bytes/sent", "connections")


@attrs.frozen
class Figures:
    """One sample of the counters (totals since start, and current counts)."""

    version: str
    uptime: int
    #: MQTT sessions connected now
    connected: int
    #: persistent sessions stored but not connected
    disconnected: int
    #: the most connected at once, as seen at the samples
    maximum: int
    #: PUBLISH packets received from and sent to MQTT clients
    received: int
    sent: int
    bytes_received: int
    bytes_sent: int
    #: CONNECTs accepted
    connections: int
    subscriptions: int
    retained: int
    #: messages held for MQTT sessions (their queues) plus retained ones
    stored: int


def totals(received: int, sent: int, bytes_received: int, bytes_sent: int,
           connections: int) -> dict[str, int]:
    """The totals that have load averages, by :data:`LOADS` name (the messages are
    the PUBLISH packets: both ``messages`` and ``publish`` loads count them)."""
    return {"messages/received": received, "messages/sent": sent,
            "publish/received": received, "publish/sent": sent,
            "bytes/received": bytes_received, "bytes/sent": bytes_sent,
            "connections": connections}


def counters(f: Figures) -> dict[str, int]:
    """:func:`totals` of a full sample."""
    return totals(f.received, f.sent, f.bytes_received, f.bytes_sent, f.connections)


class Loads:
    """Mosquitto's load averages: each tick's per-minute rate folded into a moving
    average per window, ``avg = rate + exp(-dt/T) * (avg - rate)``."""

    def __init__(self) -> None:
        self.rates: dict[str, list[float]] = {name: [0.0] * len(WINDOWS) for name in LOADS}
        self._last: tuple[dict[str, int], float] | None = None

    def update(self, totals: dict[str, int], now: float) -> None:
        """Fold in the counters' ``totals`` sampled at ``now`` (seconds)."""
        last = self._last
        if last is not None and now > last[1]:
            dt = now - last[1]
            for name, avgs in self.rates.items():
                rate = (totals[name] - last[0][name]) * 60.0 / dt
                for i, (_, span) in enumerate(WINDOWS):
                    avgs[i] = rate + math.exp(-dt / span) * (avgs[i] - rate)
        if last is None or now > last[1]:
            self._last = (dict(totals), now)


def tree(f: Figures, loads: Loads) -> dict[str, str]:
    """Every topic of the tree and its payload."""
    out = {
        "version": f.version,
        "uptime": f"{f.uptime} seconds",
        "clients/connected": str(f.connected),
        "clients/disconnected": str(f.disconnected),
        "clients/total": str(f.connected + f.disconnected),
        "clients/maximum": str(f.maximum),
        "messages/received": str(f.received),
        "messages/sent": str(f.sent),
        "publish/messages/received": str(f.received),
        "publish/messages/sent": str(f.sent),
        "bytes/received": str(f.bytes_received),
        "bytes/sent": str(f.bytes_sent),
        "subscriptions/count": str(f.subscriptions),
        "retained messages/count": str(f.retained),
        "store/messages/count": str(f.stored),
    }
    for name, avgs in loads.rates.items():
        for (suffix, _), avg in zip(WINDOWS, avgs, strict=True):
            out[f"load/{name}/{suffix}"] = f"{avg:.2f}"
    return {PREFIX + k: v for k, v in out.items()}


def changed(old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """What a tick sends: the values that differ from the last tick's (Mosquitto
    sends a figure again only when it moved)."""
    return {k: v for k, v in new.items() if old.get(k) != v}


def matching(values: dict[str, str], filters: Iterable[str]) -> list[tuple[str, str]]:
    """The (topic, payload) pairs of ``values`` some filter matches (``matches`` keeps
    ``$`` topics from leading wildcards, [MQTT-4.7.2-1])."""
    fs = [f for f in filters if f.startswith("$")]
    return [(t, v) for t, v in values.items() if any(matches(f, t) for f in fs)]


def is_sys(topic: str) -> bool:
    """Is ``topic`` in the broker's ``$SYS`` tree (clients may not publish there)?"""
    return topic == "$SYS" or topic.startswith("$SYS/")
