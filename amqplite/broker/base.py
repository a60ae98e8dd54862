"""The broker's shared state and outbox, which every part of the core builds on.

``Broker`` (core.py) is composed of parts, one module each: vhost (exchanges,
bindings, routing), queues, policies, publish, dispatch (deliver, ack,
requeue, prefetch), paging, expiry, deadletter, streams, tx and confirms. Each part is
a class over this base, so they share one state without importing each
other; the methods a part calls on another are declared here, and the
composed class supplies them.

Commands append to the outbox (``effects``, ``outbox`` (store ops), ``evictable``,
delivery-log rows in ``log``); the shell takes it as one :class:`~amqplite.broker.effects.Outcome` per batch
with :meth:`BrokerBase.take_outcome`.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from amqplite import storeops as ops
from amqplite.broker.auth import UserDB
from amqplite.broker.commands import BASIC_NACK
from amqplite.broker.effects import CloseConnection, Outcome
from amqplite.broker.model import ChannelState, Entry, Message, Session
from amqplite.broker.outbox import Outbox, Transaction
from amqplite.broker.parameters import RuntimeParameters
from amqplite.broker.retained import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT, RetainedStore
from amqplite.broker.topic_permissions import TopicPermissions
from amqplite.broker.topology import Topology
from amqplite.broker.vhost import VHost
from amqplite.config import LOG_LEVELS

#: upper bounds of RabbitMQ's ``rabbitmq_message_size_bytes`` histogram (+Inf implied)
MESSAGE_SIZE_BUCKETS = (100, 1000, 10_000, 100_000, 1_000_000, 10_000_000, 50_000_000,
                        100_000_000)



if TYPE_CHECKING:
    from amqplite.broker.exchanges import Binding, Exchange
    from amqplite.broker.permissions import Permission
    from amqplite.broker.policy import Policy
    from amqplite.broker.queue import Queue

log = logging.getLogger("amqplite.broker")


#: Direct reply-to: the pseudo-queue RPC clients consume from and name as reply_to.
REPLY_TO = "amq.rabbitmq.reply-to"
REPLY_PREFIX = REPLY_TO + "."

#: enqueue() outcomes
NOT_STORED, STORED, REJECTED = 0, 1, 2


class BrokerBase:
    """State shared by the broker's parts, ids, delivery-log rows and the outbox."""

    def __init__(
        self,
        *,
        now: Callable[[], float] = time.time,
        log_level: str = "lifecycle",
        body_window: int = 2000,
        retained_max_bytes: int = DEFAULT_MAX_BYTES,
        retained_max_length: int = DEFAULT_MAX_COUNT,
        access_control: bool = False,
        loopback_users: tuple[str, ...] = (),
    ) -> None:
        if log_level not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {LOG_LEVELS}, not {log_level!r}")
        self.now = now
        self.log_level = log_level
        self._log_on = log_level != "off"
        self._log_full = log_level == "full"
        self.body_window = body_window
        self.vhosts: dict[str, VHost] = {"/": VHost("/")}
        #: off for the core used alone (unit tests of other parts); the server
        #: always turns it on, so every command checks the user's permissions
        self.access_control = access_control
        self.users = UserDB(loopback_users)
        #: (user, vhost) -> Permission
        self.permissions: dict[tuple[str, str], Permission] = {}
        #: bumped by every permission change: channels' cached checks go stale
        self.permissions_epoch = 0
        #: told (synchronously, no I/O) after users or permissions changed: the
        #: links supervisor checks its links' users again
        self.access_watchers: list[Callable[[], None]] = []
        #: the outbox: wire effects, store operations, and (queue, entry) pairs
        #: whose bodies may leave RAM once committed
        self.effects: list[Any] = []
        #: store operations: parts emit through ``outbox.emit``; only take_outcome reads it
        self.outbox = Outbox()
        self.evictable: list[tuple[Queue, Entry]] = []
        #: delivery-log rows (plain tuples in LOG_FIELDS order), apart from the
        #: store ops: the shell holds them back and encodes them by the thousand
        self.log: list[tuple[Any, ...]] = []
        #: the time of this batch's log rows (µs), read at its first row: a clock
        #: read per row was a tenth of the log's cost on the hot path
        self._log_ts = 0
        #: channels with publishes not yet covered by a Confirm effect
        self.confirm_dirty: list[ChannelState] = []
        self.sessions: dict[int, Session] = {}
        self._next_session = 1
        self._next_queue_id = 1
        self._next_message_key = 1
        #: totals since start (the admin API and /metrics read them): RabbitMQ's
        #: global counters, counted where they happen, at a dict increment each
        self.stats = {"published": 0, "delivered": 0, "acked": 0, "redelivered": 0,
                      "dead_lettered": 0, "expired": 0, "routed": 0, "unroutable_returned": 0,
                      "unroutable_dropped": 0, "received_confirm": 0,
                      # RabbitMQ's split of deliveries; "redelivered" above counts
                      # requeues, "delivered_redelivered" deliveries flagged redelivered
                      "delivered_consume_auto_ack": 0, "delivered_consume_manual_ack": 0,
                      "delivered_get_auto_ack": 0, "delivered_get_manual_ack": 0,
                      "get_empty": 0, "delivered_redelivered": 0,
                      "queues_declared": 0, "queues_created": 0, "queues_deleted": 0,
                      "channels_opened": 0, "channels_closed": 0}
        #: published body sizes: counts per MESSAGE_SIZE_BUCKETS bucket (+Inf last), sum;
        #: a publish only appends its size to ``new_sizes``, folded in once a batch
        self.message_sizes = [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)
        self.message_bytes = 0
        self.new_sizes: list[int] = []
        #: (reason, strategy) -> messages dead-lettered; strategy as RabbitMQ labels it:
        #: "at_most_once" (to a dead-letter exchange) or "disabled" (dropped)
        self.dead_letters: dict[tuple[str, str], int] = {}
        #: (expires_at, seq, queue, entry) for every entry with a TTL
        self._expiry: list[tuple[float, int, Queue, Entry]] = []
        self._expiry_seq = 0
        #: when the shell's sleeping timer wakes (broker clock; 0.0: no timer asleep);
        #: arm_ttl calls ``wake_timer`` with a sooner deadline, so TTLs fire on time
        self.timer_wake_at = 0.0
        self.wake_timer: Callable[[float], None] | None = None
        #: queues with x-expires, checked by tick() (a dict: the same order every run)
        self._expiring_queues: dict[Queue, None] = {}
        #: vhost -> policy name -> Policy
        self.policies: dict[str, dict[str, Policy]] = {}
        #: direct reply-to: private reply name -> the channel whose consumer gets replies
        self.reply_channels: dict[str, ChannelState] = {}
        #: above the memory monitor's paging threshold: transient entries spill too
        self.memory_pressure = False
        self._transient_written = False
        #: retained publications (x-recent-history, x-lvc exchanges; MQTT later):
        #: its store operations go to this outbox
        self.retained = RetainedStore(emit=lambda op: self.outbox.emit(op),
                                      default_max_bytes=retained_max_bytes,
                                      default_max_count=retained_max_length)
        #: runtime parameters (shovels, ...): their store operations go to this outbox
        self.parameters = RuntimeParameters(emit=lambda op: self.outbox.emit(op))
        self.topic_permissions = TopicPermissions(emit=lambda op: self.outbox.emit(op))
        #: who is told of binding and exchange changes (exchange federation)
        self.topology = Topology()

    # ------------------------------------------------------------------ ids
    def seed_ids(self, max_queue_id: int, max_message_key: int) -> None:
        self._next_queue_id = max(self._next_queue_id, max_queue_id + 1)
        self._next_message_key = max(self._next_message_key, max_message_key + 1)

    def _queue_id(self) -> int:
        i = self._next_queue_id
        self._next_queue_id = i + 1
        return i

    @property
    def message_key_mark(self) -> int:
        """The highest message key handed out so far (every log row's key is at most this)."""
        return self._next_message_key - 1

    def new_message_key(self) -> int:
        """A fresh message id, never reused (recovery seeds past the stored ones)."""
        k = self._next_message_key
        self._next_message_key = k + 1
        return k

    # -------------------------------------------------------------- outbox
    def take_outcome(self) -> Outcome:
        """Everything the commands since the last call asked of the shell, in order.

        Publisher confirms owed for the publishes so far close the wire effects,
        so a publish's basic.return always precedes its confirm.
        """
        if self.confirm_dirty:
            self._emit_confirms()
        if self.new_sizes:
            self.fold_sizes()
        out = Outcome(self.effects, self.outbox.take(), self.evictable, self.log)
        self.effects, self.evictable, self.log = [], [], []
        self._log_ts = 0
        return out

    def _emit_op(self, op: Any) -> None:
        """For components holding an ``emit`` callback: the outbox's current list."""
        self.outbox.emit(op)

    def put_meta(self, key: str, value: str) -> None:
        """Store one meta row (a marker such as "seeded") with the next outcome."""
        self.outbox.emit(ops.PutMeta(key, value))

    def transaction(self, rollback: bool = True) -> AbstractContextManager[Transaction]:
        """All-or-nothing: the store ops emitted inside are dropped if it raises
        (``rollback``); its ``ops`` show what it emitted so far."""
        return self.outbox.transaction(rollback)

    def fold_sizes(self) -> None:
        """Count the sizes published since the last fold into the histogram."""
        sizes, self.new_sizes = self.new_sizes, []
        counts = self.message_sizes
        for size in sizes:
            counts[bisect_left(MESSAGE_SIZE_BUCKETS, size)] += 1  # le="bound": size <= bound
        self.message_bytes += sum(sizes)

    def take_effects(self) -> list[Any]:
        """Take the wire effects queued so far and leave the store work in the outbox.

        For the shell to send them after the reply of the command that caused
        them: RabbitMQ sends queue.delete-ok before the deleted queue's
        consumers get basic.cancel, even when the deletion waits for a commit.
        """
        effects, self.effects = self.effects, []
        return effects

    def log_time(self) -> int:
        """Now in µs, read once per batch of commands (``take_outcome`` starts the
        next): the rows of one batch share it, as a stream chunk's entries do."""
        ts = self._log_ts = int(self.now() * 1_000_000)
        return ts

    def log_event(
        self,
        event: str,
        vhost: str,
        msg: Message | None,
        queue: str | None = None,
        *,
        consumer_tag: str | None = None,
        attempt: int | None = None,
        reason: str | None = None,
        protocol: str | None = None,
    ) -> None:
        """Append a delivery_log row (a plain tuple: this runs several times per message)."""
        if not self._log_on or (event == "delivered" and not self._log_full):
            return
        ts = self._log_ts or self.log_time()
        if msg is None:
            self.log.append((ts, event, vhost, "", "", queue, None, None, consumer_tag,
                             attempt, None, reason, protocol))
            return
        self.log.append((ts, event, vhost, msg.exchange, msg.routing_key, queue,
                         msg.log_id, msg.key, consumer_tag, attempt, msg.body_size, reason,
                         protocol))

    def _log_msg(self, event: str, vhost: str, msg: Message, queue: str | None,
                 consumer_tag: str | None, attempt: int | None,
                 protocol: str | None = None) -> None:
        """log_event's row for a message event without a reason, positional only: the
        hot path's three rows per message; the caller checks ``_log_on`` first.
        ``protocol``: the client's, for a publish, a delivery or an ack."""
        self.log.append((self._log_ts or self.log_time(), event, vhost, msg.exchange,
                         msg.routing_key, queue,
                         msg._mid if msg._mid is not None else msg.log_id, msg.key,
                         consumer_tag, attempt, msg.body_size, None, protocol))

    def vhost(self, name: str) -> VHost:
        return self.vhosts[name]

    def _close_sessions(self, which: Callable[[Session], bool], reason: str) -> None:
        """Close matching connections with 320 CONNECTION_FORCED and RabbitMQ's reason
        (a vhost or a user deleted); the session is gone before the close goes out."""
        for s in [s for s in self.sessions.values() if which(s)]:
            self.effects.append(CloseConnection(s, 320, f"CONNECTION_FORCED - {reason}"))
            self.close_session(s)

    def _access_changed(self) -> None:
        """A user or permission changed: stale cached checks, watchers told."""
        self.permissions_epoch += 1
        for w in list(self.access_watchers):
            w()

    # ---------------------------------------- provided by the other parts
    if TYPE_CHECKING:
        def _emit_confirms(self) -> None: ...
        def close_session(self, session: Session) -> None: ...
        def _authorize(self, ch: ChannelState, perm: str, kind: str, name: str,
                       cm: tuple[int, int]) -> None: ...
        def _authorize_topic(self, ch: ChannelState, ex: Exchange, key: str, perm: str,
                             cm: tuple[int, int]) -> None: ...
        def _authorize_binding_key(self, ch: ChannelState, vh: VHost, source: str, key: str,
                                   cm: tuple[int, int]) -> None: ...
        def _confirm_published(self, ch: ChannelState, res: Any) -> None: ...
        def _dispatch(self, q: Queue) -> None: ...
        def _entry_done(self, q: Queue, e: Entry) -> None: ...
        def _deliver(self, q: Queue, entry: Entry, c: Any) -> None: ...
        def _stream_dispatch(self, q: Queue) -> None: ...
        def stream_append(self, q: Queue, msg: Message) -> int: ...
        def stream_attach(self, ch: ChannelState, q: Queue, no_ack: bool,
                          arguments: dict[str, Any] | None) -> tuple[int, int | None]: ...
        def stream_add_cursor(self, q: Queue, c: Any, start: tuple[int, int | None]) -> None: ...
        def stream_detach(self, q: Queue, c: Any) -> bool: ...
        @staticmethod
        def check_stream_declare(name: str, vhost: str, *, durable: bool, exclusive: bool,
                                 auto_delete: bool, arguments: dict[str, Any]) -> None: ...
        def _request_page_in(self, q: Queue) -> None: ...
        def _request_load(self, q: Queue) -> None: ...
        @staticmethod
        def load_batch(r: Any) -> int: ...
        def _store_entry(self, q: Queue, e: Entry) -> None: ...
        def spills(self, q: Queue) -> bool: ...
        def drop_malformed(self, q: Queue, e: Entry, detail: str) -> None: ...
        def _delete_queue(self, vh: VHost, q: Queue) -> int: ...
        def _drop_binding(self, vh: VHost, b: Binding, *,
                          persist_durable: bool | None = None) -> None: ...
        def _queue_persisted(self, q: Queue) -> bool: ...
        def _add_binding(self, vh: VHost, src: Exchange, b: Binding, *, durable: bool,
                         persist: bool = True) -> None: ...
        @staticmethod
        def _check_binding(ex: Exchange, arguments: dict[str, Any] | None,
                           cm: tuple[int, int]) -> None: ...
        def _match_policy(self, vhost: str, queue_name: str) -> Policy | None: ...
        def _enforce_limits(self, q: Queue) -> None: ...
        def _requeue_deliveries(self, ch: ChannelState, ds: list[Any]) -> dict[Queue, None]: ...
        def _remove_consumer(self, c: Any) -> bool: ...
        def _drop_reply_consumer(self, ch: ChannelState) -> None: ...
        def _find_queue(self, ch: ChannelState, name: str, cm: tuple[int, int]) -> Queue: ...
        def _expire(self, q: Queue, e: Entry) -> None: ...
        def _expire_head(self, q: Queue) -> None: ...
        def _dead_letter_message(self, q: Queue, msg: Message, reason: str) -> None: ...
        def dead_letter(self, q: Queue, e: Entry, reason: str) -> None: ...
        def arm_ttl(self, q: Queue, e: Entry) -> None: ...
        def enqueue(self, q: Queue, msg: Message) -> int: ...
        def _retain(self, vh: VHost, retainers: tuple[Exchange, ...], msg: Message) -> bool: ...
        def route(self, vh: VHost, ex: Exchange, routing_key: str,
                  msg: Message) -> Sequence[Queue]: ...
        def publish(self, vh: VHost, ex: Exchange, routing_key: str, properties_raw: bytes,
                    body: bytes, mandatory: bool = False,
                    ch: ChannelState | None = None) -> Any: ...
        def basic_ack(self, ch: ChannelState, delivery_tag: int,
                      multiple: bool = False) -> None: ...
        def basic_nack(self, ch: ChannelState, delivery_tag: int, multiple: bool,
                       requeue: bool, *, cm: tuple[int, int] = BASIC_NACK) -> None: ...
        def apply_policies(self, vhost: str) -> None: ...

