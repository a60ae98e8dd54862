"""Commands for the MQTT shell's stored state: session, will and packet-id rows.

The MQTT shell keeps these records (they are protocol state, not AMQP model),
but they reach the store with the broker's outcome like every other change, so
the shell asks for them here instead of touching the outbox. The confirm mark
lets a publish's acknowledgement wait for a row the shell wrote.
"""

from __future__ import annotations

from amqplite import storeops as ops
from amqplite.broker.model import ChannelState
from amqplite.broker.outbox import Outbox


class MQTTRows:
    """Store commands of the MQTT shell (its sessions, wills and packet ids); receives
    the outbox only."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def mqtt_session_put(self, vhost: str, client_id: str, expiry: int,
                         disconnected_at: float | None = None, user: str = "") -> None:
        """A persistent session's row (``disconnected_at`` None: connected now)."""
        self.outbox.emit(ops.PutMQTTSession(vhost, client_id, expiry, disconnected_at,
                                            user=user))

    def mqtt_session_delete(self, vhost: str, client_id: str) -> None:
        """The session's row goes, with its packet ids."""
        self.outbox.emit(ops.DeleteMQTTSession(vhost, client_id))

    def mqtt_will_put(self, will: ops.PutMQTTWill) -> None:
        """A will not published yet (stored again when its delay or due time changes)."""
        self.outbox.emit(will)

    def mqtt_will_delete(self, vhost: str, client_id: str) -> None:
        """The session's will is cancelled or published."""
        self.outbox.emit(ops.DeleteMQTTWill(vhost, client_id))

    def mqtt_packet_id_put(self, op: ops.PutMQTTPacketId) -> None:
        """A QoS 2 packet id in flight (inbound awaiting PUBREL, outbound awaiting PUBCOMP)."""
        self.outbox.emit(op)

    def mqtt_packet_id_delete(self, op: ops.DeleteMQTTPacketId) -> None:
        """A QoS 2 packet id is free again."""
        self.outbox.emit(op)

    def confirm_after_commit(self, ch: ChannelState) -> None:
        """The channel's next Confirm waits for the commit of this batch's store ops:
        the shell wrote a row (a retained message, a packet id) the acknowledgement
        must not precede. Call it after the publish it covers."""
        st = ch.confirms
        assert st is not None
        st.stored = True
