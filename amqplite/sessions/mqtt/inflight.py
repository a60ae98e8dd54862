"""A session's QoS 2 packet ids in flight, both ways (MQTT 4.3.3, 4.4).

The listener keeps one :class:`PacketIds` per session, (vhost, client id), across
its connections;
a persistent session's ids are also rows (``PutMQTTPacketId``), so a restart,
a kill -9 included, resumes the flows where they were:

- inbound: ids acknowledged with PUBREC and not released. The row is written
  with the message (the PUBREC waits for that commit), and deleted before the
  PUBCOMP goes out: a retransmission is never routed twice, and an id reused
  after PUBCOMP is never taken for a retransmission.
- outbound: our QoS 2 PUBLISH of a message still unacked in the session's queue,
  by the message's key. The row is committed before the PUBLISH leaves, so a
  redelivery after a crash resends it with the same id and DUP. After the
  client's PUBREC it is ``released``: the message is never sent again (a
  redelivery of it is held, not sent) and PUBREL is resent on every resume
  until PUBCOMP, which acks the delivery and deletes the row.
"""

from __future__ import annotations

from collections.abc import Set

from amqplite.broker.core import Broker
from amqplite.storeops import DeleteMQTTPacketId, PutMQTTPacketId

#: the empty id set every session shares until its first QoS 2 flow (a set is 216 B,
#: three per connection)
NONE: frozenset[int] = frozenset()


def with_id(ids: Set[int], pid: int) -> set[int]:
    """``ids`` and ``pid``: a set of its own from the first id on."""
    out = ids if isinstance(ids, set) else set()
    out.add(pid)
    return out


def without_id(ids: Set[int], pid: int) -> Set[int]:
    if isinstance(ids, set):
        ids.discard(pid)
    return ids


class PacketIds:
    """The ids of one session; each change returns True when it wrote a store op
    (the caller then holds its answer until the commit)."""

    __slots__ = ("_keys", "_pids", "broker", "client_id", "completed", "inbound", "released",
                 "vhost")

    def __init__(self, vhost: str, client_id: str) -> None:
        self.vhost = vhost
        self.client_id = client_id
        #: the broker whose store ops a persistent session's rows join; None: not stored
        self.broker: Broker | None = None
        #: inbound ids acknowledged with PUBREC, awaiting PUBREL
        self.inbound: Set[int] = NONE
        #: outbound packet id -> message key, and back
        self._keys: dict[int, int] = {}
        self._pids: dict[int, int] = {}
        #: outbound ids whose PUBREC came (PUBREL owed until PUBCOMP)
        self.released: Set[int] = NONE
        #: released ids whose PUBCOMP came before the message's redelivery reached us
        self.completed: Set[int] = NONE

    def _write(self, op: PutMQTTPacketId | DeleteMQTTPacketId) -> bool:
        if self.broker is None:
            return False
        if isinstance(op, DeleteMQTTPacketId):
            self.broker.mqtt_packet_id_delete(op)
        else:
            self.broker.mqtt_packet_id_put(op)
        return True

    # ------------------------------------------------------------ inbound
    def received(self, pid: int) -> bool:
        """A QoS 2 PUBLISH was routed: its id is pending until PUBREL."""
        self.inbound = with_id(self.inbound, pid)
        return self._write(PutMQTTPacketId(self.vhost, self.client_id, pid, False))

    def forget_inbound(self, pid: int) -> bool:
        """PUBREL came (or the PUBLISH was refused): the id is free again."""
        self.inbound = without_id(self.inbound, pid)
        return self._write(DeleteMQTTPacketId(self.vhost, self.client_id, pid, False))

    def restore_inbound(self, pid: int) -> None:
        """An inbound id read back from an older database's session row."""
        self.inbound = with_id(self.inbound, pid)

    def completed_early(self, pid: int) -> None:
        """PUBCOMP of a released id came before the message's redelivery."""
        self.completed = with_id(self.completed, pid)

    # ------------------------------------------------------------ outbound
    def pid_of(self, key: int) -> int | None:
        """The id the message ``key`` was sent with, if its flow is not complete."""
        return self._pids.get(key)

    @property
    def outbound(self) -> bool:
        """Are any outbound flows not complete?"""
        return bool(self._keys)

    def known(self, pid: int) -> bool:
        return pid in self._keys

    def sent(self, pid: int, key: int) -> bool:
        old = self._keys.pop(pid, None)
        if old is not None:
            self._pids.pop(old, None)
        self._keys[pid] = key
        self._pids[key] = pid
        return self._write(PutMQTTPacketId(self.vhost, self.client_id, pid, True, key))

    def release(self, pid: int) -> bool:
        """PUBREC: the client has the message; PUBREL is owed until PUBCOMP."""
        key = self._keys.get(pid)
        if key is None:
            return False
        self.released = with_id(self.released, pid)
        return self._write(PutMQTTPacketId(self.vhost, self.client_id, pid, True, key, True))

    def complete(self, pid: int) -> bool:
        """PUBCOMP (or a PUBREC refusing the message): the flow of ``pid`` ended."""
        key = self._keys.pop(pid, None)
        if key is None:
            return False
        self._pids.pop(key, None)
        self.released = without_id(self.released, pid)
        self.completed = without_id(self.completed, pid)
        return self._write(DeleteMQTTPacketId(self.vhost, self.client_id, pid, True))

    def restore(self, op: PutMQTTPacketId) -> None:
        """A row read back at start-up."""
        if not op.outbound:
            self.inbound = with_id(self.inbound, op.packet_id)
            return
        self._keys[op.packet_id] = op.message_key
        self._pids[op.message_key] = op.packet_id
        if op.released:
            self.released = with_id(self.released, op.packet_id)
