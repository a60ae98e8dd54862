"""A session's subscriptions as the shell stores and consults them (sans-I/O).

Subscriptions are AMQP bindings of the session's queues to ``mqtt_exchange``
(docs/mqtt.md), so their options travel in the binding's arguments (as
RabbitMQ 3.13 keeps them in its bindings): durable with the binding, restored
with a persistent session. A subscription without options is a plain binding.
A shared subscription (``$share/{group}/{filter}``) is one queue per group and
filter; each member is one binding of it, named by ``x-mqtt-client-id``, which
is how membership survives a restart.

:class:`SubscriptionTable` answers the per-delivery questions (does a
subscription still want it, with which identifiers) from memory: one queue
copy per message reaches the client whatever number of bindings matched, so
the identifiers and no-local are worked out at delivery time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.mqtt.mapping import publisher_of
from amqplite.protocol.mqtt.topics import matches

#: binding arguments of a subscription: its QoS where the queue does not say it (2 on
#: the qos1 queue; always on a shared queue), retain as published, no local, the
#: subscription identifier, and the member of a shared subscription's queue
QOS_ARG = "x-mqtt-qos"
RAP_ARG = "x-mqtt-retain-as-published"
NO_LOCAL_ARG = "x-mqtt-no-local"
ID_ARG = "x-mqtt-subscription-id"
MEMBER_ARG = "x-mqtt-client-id"
SHARED_PREFIX = "mqtt-shared-"
#: AMQP names and keys are shortstrs (definitions export and import carry no more)
MAX_NAME_BYTES = 255
SESSION_PREFIX = "mqtt-subscription-"


def session_queue_name(client_id: str, qos: int) -> str:
    """RabbitMQ's name for a session's subscription queue."""
    return f"{SESSION_PREFIX}{client_id}qos{qos}"


#: the longest client id (UTF-8 bytes) whose queues' names fit: 255 less the
#: longest name the mapping builds around it (``mqtt-subscription-…qos1``): 233.
#: A longer one is refused at CONNECT (0x85, 3.1.1: 2); Mosquitto takes 65535
MAX_CLIENT_ID_BYTES = MAX_NAME_BYTES - len(session_queue_name("", 1).encode())
#: the longest topic filter (UTF-8 bytes): its binding key is as long (a share
#: name too long for a queue name is hashed, ``shared_queue_name``)
MAX_FILTER_BYTES = MAX_NAME_BYTES
#: the longest topic name (PUBLISH, will): its routing key is as long, and an AMQP
#: consumer's basic.deliver carries it as a shortstr
MAX_TOPIC_BYTES = MAX_NAME_BYTES


@mypyc_attr(native_class=False)
@attrs.frozen
class SubOptions:
    """One subscription's options as granted (``qos`` is the granted QoS)."""

    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    identifier: int | None = None

    @property
    def plain(self) -> bool:
        """Nothing to work out at delivery time: what its queue says."""
        return (self.identifier is None and not self.no_local and not self.retain_as_published
                and self.qos < 2)


def binding_args(opts: SubOptions, member: str | None = None) -> dict[str, Any] | None:
    """The binding arguments that store ``opts`` (None: a plain binding, byte for
    byte what the listener wrote before options were kept)."""
    args: dict[str, Any] = {}
    if member is not None:
        args[MEMBER_ARG] = member
    if member is not None or opts.qos == 2:
        args[QOS_ARG] = opts.qos
    if opts.retain_as_published:
        args[RAP_ARG] = True
    if opts.no_local:
        args[NO_LOCAL_ARG] = True
    if opts.identifier is not None:
        args[ID_ARG] = opts.identifier
    return args or None


def options_of(args: Mapping[str, Any] | None, qos: int = 0) -> SubOptions:
    """The options stored by :func:`binding_args` (``qos``, the queue's, when they do
    not say)."""
    if not args:
        return SubOptions(qos)
    ident = args.get(ID_ARG)
    sub_qos = args.get(QOS_ARG, qos)
    return SubOptions(
        sub_qos if isinstance(sub_qos, int) and 0 <= sub_qos <= 2 else qos,
        bool(args.get(NO_LOCAL_ARG, False)),
        bool(args.get(RAP_ARG, False)),
        ident if isinstance(ident, int) and not isinstance(ident, bool) and ident > 0 else None,
    )


def member_of(args: Mapping[str, Any] | None) -> str | None:
    """The client id a shared queue's binding belongs to, if it is a member binding."""
    member = (args or {}).get(MEMBER_ARG)
    return member if isinstance(member, str) else None


def shared_queue_name(group: str, topic_filter: str) -> str:
    """``mqtt-shared-{group}-{hash of the filter}``: one queue per shared subscription
    (the share name and the filter together name it, MQTT 5 4.8.2). The filter
    itself is in the queue's binding; a share name too long for a queue name is
    hashed as well."""
    digest = hashlib.sha256(topic_filter.encode()).hexdigest()[:16]
    name = f"{SHARED_PREFIX}{group}-{digest}"
    if len(name.encode()) > MAX_NAME_BYTES:
        name = f"{SHARED_PREFIX}{hashlib.sha256(group.encode()).hexdigest()[:32]}-{digest}"
    return name


def is_shared_queue(name: str) -> bool:
    return name.startswith(SHARED_PREFIX)


@mypyc_attr(native_class=False)
@attrs.define
class _Queue:
    """The subscriptions a session has on one queue."""

    filters: dict[str, SubOptions] = attrs.Factory(dict)
    #: some subscription has an identifier or no-local: work at delivery
    special: bool = False
    #: some subscription has no-local: a delivery needs its publisher (kept here so
    #: the common case costs one attribute read, not a look at every filter)
    no_local: bool = False

    def refresh(self) -> None:
        """Recompute the flags after a subscription was added, replaced or removed."""
        opts = self.filters.values()
        self.special = any(not o.plain for o in opts)
        self.no_local = self.special and any(o.no_local for o in opts)


@mypyc_attr(native_class=False)
@attrs.frozen
class Admission:
    """A delivery's verdict: ``deliver`` False drops it for this session (acked
    silently); ``identifiers`` go with the PUBLISH (MQTT 5)."""

    deliver: bool
    identifiers: tuple[int, ...] = ()
    #: a matching subscription asked for retain as published
    retain_as_published: bool = False
    #: the highest QoS of the matching subscriptions (None: the queue's)
    qos: int | None = None


ADMIT = Admission(True)
DROP = Admission(False)


#: every table's ``dollar`` until its first ``$`` filter (most never have one)
_NO_DOLLAR: frozenset[tuple[str, str]] = frozenset()


class SubscriptionTable:
    """A session's subscriptions by queue, then filter (the session's own queues
    and the shared queues it is a member of)."""

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}
        #: (queue, filter) of the filters that start with ``$`` (``$SYS/#``): the
        #: ``$SYS`` tick looks for sessions with some, without walking every filter
        self.dollar: frozenset[tuple[str, str]] | set[tuple[str, str]] = _NO_DOLLAR

    def set(self, queue: str, topic_filter: str, opts: SubOptions) -> SubOptions | None:
        """Add or replace; returns the options it replaced."""
        q = self._queues.setdefault(queue, _Queue())
        if topic_filter.startswith("$"):
            d = self.dollar
            if not isinstance(d, set):  # the shared empty one until the first
                d = self.dollar = set()
            d.add((queue, topic_filter))
        old = q.filters.get(topic_filter)
        q.filters[topic_filter] = opts
        q.refresh()
        return old

    def remove(self, queue: str, topic_filter: str) -> SubOptions | None:
        q = self._queues.get(queue)
        if q is None:
            return None
        old = q.filters.pop(topic_filter, None)
        if isinstance(self.dollar, set):
            self.dollar.discard((queue, topic_filter))
        if q.filters:
            q.refresh()
        else:
            del self._queues[queue]
        return old

    def drop_queue(self, queue: str) -> None:
        self._queues.pop(queue, None)
        if self.dollar:
            self.dollar = {d for d in self.dollar if d[0] != queue}

    def queues(self) -> list[str]:
        return list(self._queues)

    def load(self, queue: str, entries: Iterable[tuple[str, SubOptions]]) -> None:
        """The subscriptions of ``queue`` as read back from its bindings."""
        for topic_filter, opts in entries:
            self.set(queue, topic_filter, opts)

    def wants_publisher(self, queue: str) -> bool:
        """Does a delivery from ``queue`` need its publisher (a no-local subscription)?"""
        q = self._queues.get(queue)
        return q is not None and q.no_local

    def admit_delivery(self, queue: str, topic: str, props: bytes, client_id: str) -> Admission:
        """:meth:`admit` of a delivery from ``queue`` to the session ``client_id``,
        reading the publisher from the message's AMQP ``props`` only for a no-local
        subscription; the common case (plain options) returns at the first test."""
        q = self._queues.get(queue)
        if q is None or (not q.special and not topic.startswith("$")):
            return ADMIT
        return self.admit(queue, topic, q.no_local and publisher_of(props) == client_id)

    def admit(self, queue: str, topic: str, own: bool = False) -> Admission:
        """Does a message on ``topic`` from ``queue`` go to the client, and with which
        subscription identifiers? ``own``: this session published it (no-local).

        A queue copy stands for every subscription of the queue that matches
        (MQTT-3.3.4-3/-4: one PUBLISH carrying all their identifiers). A ``$``
        topic needs a subscription whose filter does not start with a wildcard
        (MQTT-4.7.2-1): the AMQP topic exchange routed it by ``#`` alone.
        """
        q = self._queues.get(queue)
        if q is None or (not q.special and not topic.startswith("$")):
            return ADMIT
        ids: list[int] = []
        qos = -1
        rap = False
        for topic_filter, o in q.filters.items():
            if (own and o.no_local) or not matches(topic_filter, topic):
                continue
            qos = max(qos, o.qos)
            rap = rap or o.retain_as_published
            if o.identifier is not None and o.identifier not in ids:
                ids.append(o.identifier)
        if qos < 0:
            return DROP
        return Admission(True, tuple(ids), rap, qos)
