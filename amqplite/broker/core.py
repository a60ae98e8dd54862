"""The pure broker: AMQP commands in, one Outcome of effects and store operations out.

``Broker`` is a thin façade: it builds the core's parts, hands each the
state and the parts it uses (constructor injection; a part that calls one
built after it gets it through its one ``wire`` call), and exposes their
commands under the names the shell, admin, links and recovery call. No part
inherits from another or from a shared base; see docs/internals.md for the
drawing. Who receives what:

- state holders (base.py, outbox.py): ``Outbox`` (store ops, effects,
  evictable entries), ``DeliveryLog`` (rows, batch time), ``Counters``
  (stats, size histogram, dead-letter counts); the vhost table, the direct
  reply-to table, the retained store, runtime parameters, topic permissions,
  the topology observer;
- ``Access`` (permissions.py): vhosts, outbox, topic permissions; wired:
  sessions' ``close_sessions``;
- ``Policies`` (policy_commands.py): vhosts, outbox, topology, expiring
  queues; wired: ``_dispatch``, ``_enforce_limits``;
- ``Expiry`` (expiry.py): clock, vhosts, stats, log; wired: ``dead_letter``,
  ``_delete_queue``;
- ``Confirms`` (confirms.py): effects;
- ``Streams`` (streams.py): clock, outbox, counters, log;
- ``Pager`` (paging.py): vhosts, outbox, retained, log, body window; wired:
  ``_dispatch``, ``_entry_done``, ``arm_ttl``, ``dead_letter``, ``drop_malformed``;
- ``DeadLetterer`` (deadletter.py): clock, vhosts, counters, log; wired:
  ``new_message_key``, ``_retain``, ``enqueue``, ``_dispatch``,
  ``_entry_done``, ``_request_page_in``;
- ``Publisher`` (publish.py): vhosts, outbox, counters, log, retained,
  reply-to table, access, confirms, streams, expiry, pager; wired:
  ``_dispatch``, ``_enforce_limits``, ``_dead_letter_message``;
- ``Dispatcher`` (dispatch.py): clock, vhosts, outbox, counters, log,
  reply-to table, streams, expiry, pager, dead-letterer; wired:
  ``_find_queue``, ``_delete_queue``;
- ``Queues`` (queue_commands.py): clock, vhosts, outbox, counters, log,
  reply-to table, expiring queues, access, policies, streams, dispatcher,
  dead-letterer; wired: the exchanges' binding methods;
- ``Exchanges`` (bindings.py): vhosts, outbox, retained, topology, log,
  access, queues, ``enqueue``, ``new_message_key``, ``_dispatch``;
- ``Sessions`` (sessions.py): vhosts, outbox, counters, streams,
  dispatcher, queues;
- ``VHosts`` (vhost_commands.py): vhosts, outbox, retained, policies,
  parameters, access, topic permissions, topology; wired: ``close_sessions``,
  ``_delete_queue``;
- ``Transactions`` (tx.py): vhosts, publisher, dispatcher;
- ``MQTTRows`` (mqtt_rows.py), ``KafkaRows`` (kafka_rows.py): outbox.

The façade binds the parts' bound methods to its own attributes once, so a
command costs what it did when the parts were mixins: no extra call per
message. The server shell calls one method per AMQP command, then takes the
batch's Outcome (``take_outcome``) and carries it out. No I/O, no clock of
its own (``now`` is injected), no event loop, so every rule is testable with
plain calls.

Operations for admin and recovery are public here (``delete_queue``,
``restore_binding``, ``move_entries``, ``would_reject``): nothing outside the
broker reaches into its parts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from amqplite import storeops as ops
from amqplite.broker import persist as P
from amqplite.broker.base import REPLY_TO, Counters, DeliveryLog
from amqplite.broker.bindings import Exchanges
from amqplite.broker.confirms import Confirms
from amqplite.broker.deadletter import DeadLetterer
from amqplite.broker.dispatch import Dispatcher
from amqplite.broker.effects import NEED_PAGE_IN, Outcome, PublishResult
from amqplite.broker.exchanges import Binding, Exchange
from amqplite.broker.expiry import Expiry, parse_expiration
from amqplite.broker.kafka_rows import KafkaRows
from amqplite.broker.model import ChannelState, Entry, Message
from amqplite.broker.mqtt_rows import MQTTRows
from amqplite.broker.outbox import Outbox, Transaction
from amqplite.broker.paging import Pager
from amqplite.broker.parameters import RuntimeParameters
from amqplite.broker.permissions import Access
from amqplite.broker.policy_commands import Policies
from amqplite.broker.publish import Publisher
from amqplite.broker.queue import Queue
from amqplite.broker.queue_commands import Queues
from amqplite.broker.retained import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT, RetainedStore
from amqplite.broker.sessions import Sessions
from amqplite.broker.streams import Streams
from amqplite.broker.topic_permissions import TopicPermissions
from amqplite.broker.topology import Topology
from amqplite.broker.tx import Transactions
from amqplite.broker.vhost import VHost
from amqplite.broker.vhost_commands import VHosts

log = logging.getLogger("amqplite.broker")

__all__ = ["NEED_PAGE_IN", "REPLY_TO", "Broker", "PublishResult", "VHost", "parse_expiration"]


class Broker:
    """The broker core: owns the parts, exposes their commands, hands out the Outcome."""

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
        outbox: Outbox | None = None,
    ) -> None:
        """``outbox``: one to emit into (a test's, watching each effect as it is
        emitted); a fresh one by default."""
        # ------------------------------------------------------- shared state
        self._dlog = dlog = DeliveryLog(now, log_level)
        self.now = now
        self.log_level = log_level
        self.body_window = body_window
        self.outbox = outbox = Outbox() if outbox is None else outbox
        self._counters = counters = Counters()
        self.stats = counters.stats
        self.message_sizes = counters.message_sizes
        self.dead_letters = counters.dead_letters
        self.vhosts: dict[str, VHost] = {"/": VHost("/")}
        vhosts = self.vhosts
        #: direct reply-to: private reply name -> the channel whose consumer gets replies
        self.reply_channels: dict[str, ChannelState] = {}
        #: retained publications (x-recent-history, x-lvc exchanges; MQTT): its
        #: store operations go to this outbox
        self.retained = RetainedStore(emit=lambda op: outbox.emit(op),
                                      default_max_bytes=retained_max_bytes,
                                      default_max_count=retained_max_length)
        #: runtime parameters (shovels, ...): their store operations go to this outbox
        self.parameters = RuntimeParameters(emit=lambda op: outbox.emit(op))
        self.topic_permissions = TopicPermissions(emit=lambda op: outbox.emit(op))
        #: who is told of binding and exchange changes (exchange federation) and of
        #: deleted vhosts (the Kafka listener's groups)
        self.topology = Topology()

        # ------------------------------------- the parts, callees before callers
        self._access = access = Access(
            vhosts=vhosts, outbox=outbox, topic_permissions=self.topic_permissions,
            loopback_users=loopback_users, access_control=access_control)
        self._expiry = expiry = Expiry(now=now, vhosts=vhosts, stats=self.stats, log=dlog)
        self._policies = policies = Policies(vhosts=vhosts, outbox=outbox,
                                             topology=self.topology,
                                             expiring_queues=expiry._expiring_queues,
                                             parameters=self.parameters)
        self._confirms = confirms = Confirms(outbox.effects)
        self._streams = streams = Streams(now=now, outbox=outbox, counters=counters, log=dlog)
        self._pager = pager = Pager(vhosts=vhosts, outbox=outbox, retained=self.retained,
                                    log=dlog, body_window=body_window, counters=counters)
        self._dead_letterer = dl = DeadLetterer(now=now, vhosts=vhosts, counters=counters,
                                                log=dlog)
        self.publisher = pub = Publisher(
            vhosts=vhosts, outbox=outbox, counters=counters, log=dlog, retained=self.retained,
            reply_channels=self.reply_channels, access=access, confirms=confirms,
            streams=streams, expiry=expiry, pager=pager, body_window=body_window)
        self._dispatcher = disp = Dispatcher(
            now=now, vhosts=vhosts, outbox=outbox, counters=counters, log=dlog,
            reply_channels=self.reply_channels, streams=streams, expiry=expiry, pager=pager,
            dead_letterer=dl)
        self._queues = queues = Queues(
            now=now, vhosts=vhosts, outbox=outbox, counters=counters, log=dlog,
            reply_channels=self.reply_channels, expiring_queues=expiry._expiring_queues,
            access=access, policies=policies, streams=streams, dispatcher=disp,
            dead_letterer=dl)
        self._exchanges = exs = Exchanges(
            vhosts=vhosts, outbox=outbox, retained=self.retained, topology=self.topology,
            log=dlog, access=access, queues=queues, enqueue=pub.enqueue,
            new_message_key=pub.new_message_key, dispatch=disp._dispatch,
            refresh_exchange=policies.refresh_exchange)
        self._sessions = sessions = Sessions(vhosts=vhosts, outbox=outbox, counters=counters,
                                             streams=streams, dispatcher=disp, queues=queues)
        self._vhosts = vhs = VHosts(vhosts=vhosts, outbox=outbox, retained=self.retained,
                                    policies=policies.policies, parameters=self.parameters,
                                    access=access, topic_permissions=self.topic_permissions,
                                    topology=self.topology)
        self._tx = tx = Transactions(vhosts=vhosts, publisher=pub, dispatcher=disp)
        self._mqtt = mqtt = MQTTRows(outbox)
        self._kafka = KafkaRows(outbox)

        # ------------------- the calls back into parts built later (one each)
        access.wire(close_sessions=sessions.close_sessions)
        expiry.wire(dead_letter=dl.dead_letter, delete_queue=queues._delete_queue)
        policies.wire(dispatch=disp._dispatch, enforce_limits=queues._enforce_limits)
        pager.wire(dispatch=disp._dispatch, entry_done=disp._entry_done, arm_ttl=expiry.arm_ttl,
                   dead_letter=dl.dead_letter, drop_malformed=dl.drop_malformed)
        dl.wire(new_message_key=pub.new_message_key, retain=pub._retain, enqueue=pub.enqueue,
                dispatch=disp._dispatch, entry_done=disp._entry_done,
                request_page_in=pager._request_page_in)
        pub.wire(dispatch=disp._dispatch, enforce_limits=queues._enforce_limits,
                 dead_letter_message=dl._dead_letter_message)
        disp.wire(find_queue=queues._find_queue, delete_queue=queues._delete_queue)
        queues.wire(add_binding=exs._add_binding, check_binding=exs._check_binding,
                    drop_binding=exs._drop_binding)
        vhs.wire(close_sessions=sessions.close_sessions, delete_queue=queues._delete_queue)

        # ------------------------------------- the state other layers read
        self.users = access.users
        self.permissions = access.permissions
        self.access_watchers = access.access_watchers
        self.access_control = access_control
        self.policies = policies.policies
        self.sessions = sessions.sessions
        self.effects = outbox.effects
        self.evictable = outbox.evictable

        # ---------------------------------------------------------- commands
        # bound once here: calling one costs what a method of this class would
        self.open_session = sessions.open_session
        self.close_session = sessions.close_session
        self.open_channel = sessions.open_channel
        self.close_channel = sessions.close_channel
        # exchanges and bindings
        self.exchange_declare = exs.exchange_declare
        self.add_exchange = exs.add_exchange
        self.exchange_delete = exs.exchange_delete
        self.exchange_bind = exs.exchange_bind
        self.route = exs.route
        self._delete_exchange = exs._delete_exchange  # admin: undo a half-done create
        self._add_binding = exs._add_binding  # admin: restore bindings of a failed delete
        self._binding_durable = exs._binding_durable
        # queues
        self.queue_declare = queues.queue_declare
        self.add_queue = queues.add_queue
        self.queue_bind = queues.queue_bind
        self.queue_purge = queues.queue_purge
        self.purge = queues.purge
        self.purge_entries = queues.purge_entries
        self.queue_delete = queues.queue_delete
        # policies
        self.exchange_policy = policies.exchange_policy
        self.vhost_limit = policies.vhost_limit
        self.set_policy = policies.set_policy
        self.clear_policy = policies.clear_policy
        self.effective_policy = policies.effective_policy
        self.apply_policies = policies.apply_policies
        # publishing
        self.basic_publish = pub.basic_publish
        self.publish = pub.publish
        self.stream_publish = pub.stream_publish
        self.stream_publish_batch = pub.stream_publish_batch
        self.enqueue = pub.enqueue
        self.new_message_key = pub.new_message_key
        # consumers, deliveries, acknowledgements
        self.basic_qos = disp.basic_qos
        self.basic_consume = disp.basic_consume
        self.start_consumer = disp.start_consumer
        self.basic_cancel = disp.basic_cancel
        self.basic_get = disp.basic_get
        self.basic_ack = disp.basic_ack
        self.basic_reject = disp.basic_reject
        self.basic_nack = disp.basic_nack
        self.basic_recover = disp.basic_recover
        self.channel_flow = disp.channel_flow
        self.set_writable = disp.set_writable
        # streams
        self.check_stream_declare = streams.check_stream_declare
        self.stream_loaded = streams.stream_loaded
        self.stream_load_failed = streams.stream_load_failed
        self.restore_stream = streams.restore_stream
        self.stream_info = streams.stream_info
        # paging and the store's answers
        self.paged_in = pager.paged_in
        self.commit_done = pager.commit_done
        self.spills = pager.spills
        self.set_memory_pressure = pager.set_memory_pressure
        self.load_batch = pager.load_batch
        self.load_failed = pager.load_failed
        self.entries_loaded = pager.entries_loaded
        self.restore_entries = pager.restore_entries
        self.commit_failed = pager.commit_failed
        # dead-lettering and expiry
        self.dead_letter = dl.dead_letter
        self.drop_malformed = dl.drop_malformed
        self.next_deadline = expiry.next_deadline
        self.tick = expiry.tick
        self.arm_ttl = expiry.arm_ttl
        # confirms and transactions
        self.confirm_select = confirms.confirm_select
        self.confirm_landed = confirms.confirm_landed
        self.tx_select = tx.tx_select
        self.tx_commit = tx.tx_commit
        self.tx_rollback = tx.tx_rollback
        # users and permissions
        self.may = access.may
        self.check_vhost_access = access.check_vhost_access
        self.permission = access.permission
        self.put_user = access.put_user
        self.delete_user = access.delete_user
        self.set_permissions = access.set_permissions
        self.clear_permissions = access.clear_permissions
        self.set_topic_permission = access.set_topic_permission
        self.clear_topic_permissions = access.clear_topic_permissions
        # vhosts
        self.add_vhost = vhs.add_vhost
        self.delete_vhost = vhs.delete_vhost
        # the MQTT shell's rows
        self.mqtt_session_put = mqtt.mqtt_session_put
        self.mqtt_session_delete = mqtt.mqtt_session_delete
        self.mqtt_will_put = mqtt.mqtt_will_put
        self.mqtt_will_delete = mqtt.mqtt_will_delete
        self.mqtt_packet_id_put = mqtt.mqtt_packet_id_put
        self.mqtt_packet_id_delete = mqtt.mqtt_packet_id_delete
        self.confirm_after_commit = mqtt.confirm_after_commit
        # the Kafka shell's rows (committed offsets)
        self.kafka_offsets_write = self._kafka.kafka_offsets_write
        self.kafka_offsets_delete = self._kafka.kafka_offsets_delete
        self.log_event = dlog.log_event

    # ------------------------------------------------- the parts' own state
    @property
    def log(self) -> list[tuple[Any, ...]]:
        """The delivery-log rows of this batch so far (``take_outcome`` hands them over)."""
        return self._dlog.rows

    @property
    def message_bytes(self) -> int:
        return self._counters.message_bytes

    @property
    def timer_wake_at(self) -> float:
        """When the shell's sleeping timer wakes (the shell sets it; 0.0: none asleep)."""
        return self._expiry.timer_wake_at

    @timer_wake_at.setter
    def timer_wake_at(self, at: float) -> None:
        self._expiry.timer_wake_at = at

    @property
    def wake_timer(self) -> Callable[[float], None] | None:
        """The shell's callback for a TTL sooner than its timer's wake-up."""
        return self._expiry.wake_timer

    @wake_timer.setter
    def wake_timer(self, wake: Callable[[float], None] | None) -> None:
        self._expiry.wake_timer = wake

    # ------------------------------------------------------------------ ids
    def seed_ids(self, max_queue_id: int, max_message_key: int) -> None:
        self._queues.seed_queue_ids(max_queue_id)
        self.publisher.seed_message_keys(max_message_key)

    @property
    def message_key_mark(self) -> int:
        """The highest message key handed out so far (every log row's key is at most this)."""
        return self.publisher.message_key_mark

    # -------------------------------------------------------------- outbox
    def take_outcome(self) -> Outcome:
        """Everything the commands since the last call asked of the shell, in order.

        Publisher confirms owed for the publishes so far close the wire effects,
        so a publish's basic.return always precedes its confirm.
        """
        confirms = self._confirms
        if confirms.confirm_dirty:
            confirms._emit_confirms()
        if confirms.due:
            confirms.release_due()
        counters = self._counters
        if counters.new_sizes:
            counters.fold_sizes()
        effects, evictable = self.effects, self.evictable
        out = Outcome(effects[:], self.outbox.take(), evictable[:], self._dlog.take())
        effects.clear()
        evictable.clear()
        return out

    def take_effects(self) -> list[Any]:
        """Take the wire effects queued so far and leave the store work in the outbox.

        For the shell to send them after the reply of the command that caused
        them: RabbitMQ sends queue.delete-ok before the deleted queue's
        consumers get basic.cancel, even when the deletion waits for a commit.
        """
        effects = self.effects[:]
        self.effects.clear()
        return effects

    def fold_sizes(self) -> None:
        """Count the sizes published since the last fold into the histogram."""
        self._counters.fold_sizes()

    def put_meta(self, key: str, value: str) -> None:
        """Store one meta row (a marker such as "seeded") with the next outcome."""
        self.outbox.emit(ops.PutMeta(key, value))

    def transaction(self, rollback: bool = True) -> AbstractContextManager[Transaction]:
        """All-or-nothing: the store ops emitted inside are dropped if it raises
        (``rollback``); its ``ops`` show what it emitted so far."""
        return self.outbox.transaction(rollback)

    def vhost(self, name: str) -> VHost:
        return self.vhosts[name]

    # ------------------------------------------- admin and recovery operations
    def delete_queue(self, vh: VHost, q: Queue) -> int:
        """Delete ``q`` as queue.delete would (consumers cancelled); returns its depth."""
        return self._queues._delete_queue(vh, q)

    def drop_binding(self, vh: VHost, b: Binding) -> None:
        """Remove ``b`` as queue.unbind would, with no channel (MQTT session cleanup)."""
        self._exchanges._drop_binding(vh, b)

    def commit_abandoned(self, ops: Iterable[Any]) -> None:
        """Store ops that could not be written, however often tried: undo them in memory.

        The creates are undone as a delete would (consumers of a queue get
        basic.cancel); the delete this writes is harmless for a row that is not
        there. Anything else (a delete, a policy, a user...) cannot be undone
        here: it stays in memory only, and is logged.
        """
        for op in ops:
            t = type(op)
            vh = self.vhosts.get(getattr(op, "vhost", ""))
            if t is P.ops.PutQueue:
                q = vh.queues.get(op.name) if vh is not None else None
                if vh is not None and q is not None and q.id == op.queue_id:
                    self._queues._delete_queue(vh, q)
            elif t is P.ops.PutExchange:
                ex = vh.exchanges.get(op.name) if vh is not None else None
                if vh is not None and ex is not None and ex.name:
                    self._exchanges._delete_exchange(vh, ex)
            elif t is P.ops.PutBinding:
                dest = (op.destination_kind, op.destination)
                for b in list(vh.bindings_to.get(dest, ())) if vh is not None else ():
                    if (vh is not None and b.source == op.source
                            and b.routing_key == op.routing_key
                            and P.plain_args(b.args_dict) == op.arguments):
                        self._exchanges._drop_binding(vh, b)
            else:
                # by kind and name: its value may be too deep to repr
                log.error("store: %s %r in vhost %r is in memory only: it could not be "
                          "written", t.__name__, str(getattr(op, "name", ""))[:100],
                          str(getattr(op, "vhost", ""))[:100])

    def restore_binding(self, vh: VHost, src: Exchange, b: Binding) -> None:
        """Recovery: a durable binding read from the store (not written again)."""
        self._exchanges._add_binding(vh, src, b, durable=True, persist=False)

    def would_reject(self, q: Queue, msg: Message) -> bool:
        """True when ``q`` refuses ``msg`` (x-overflow reject-publish at its limit)."""
        return Publisher._refuses(q, msg.body_size)

    def move_entries(self, vh: VHost, src: Queue,
                     moves: list[tuple[Entry, list[Queue], str, str, bytes]]) -> None:
        """Admin move/replay: copy each entry to its targets and take it out of ``src``.

        Each copy is a new message (fresh key, the given exchange and routing
        key); its inserts and the original's delete land in the same store
        batch, so a crash never loses a message or leaves it in both places.
        """
        touched: dict[int, Queue] = {}
        for e, targets, exchange, routing_key, body in moves:
            msg = e.message
            new = Message(self.new_message_key(), exchange, routing_key, msg.properties_raw,
                          body, body_size=msg.body_size, persistent=msg.persistent)
            new._mid = msg.message_id  # the same message to the delivery log
            self.log_event("replayed", vh.name, msg, src.name)
            for q in targets:
                self.enqueue(q, new)
                touched[id(q)] = q
        if moves:
            ids = {id(m[0]) for m in moves}
            src.ready.remove_where(lambda x: id(x) in ids)
            for e, *_ in moves:
                self._dispatcher._entry_done(src, e)
            for q in touched.values():
                if q is not src:
                    self._dispatcher._dispatch(q)

