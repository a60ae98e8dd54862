"""Virtual hosts: creating and deleting them, with their store rows.

Each vhost is its own namespace with its own ``amq.*`` exchanges; deleting
one deletes everything in it and closes its connections with 320, as
RabbitMQ does ("vhost '<name>' is deleted").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqplite import storeops as ops
from amqplite.broker.vhost import VHost

if TYPE_CHECKING:
    from amqplite.broker.model import Session
    from amqplite.broker.outbox import Outbox
    from amqplite.broker.parameters import RuntimeParameters
    from amqplite.broker.permissions import Access
    from amqplite.broker.policy import Policy
    from amqplite.broker.queue import Queue
    from amqplite.broker.retained import RetainedStore
    from amqplite.broker.topic_permissions import TopicPermissions
    from amqplite.broker.topology import Topology


class VHosts:
    """The vhost table and its lifecycle.

    Receives the tables a vhost's deletion empties (policies, parameters,
    retained, the access part's permissions) and the topology, whose vhost
    watchers it tells of a deletion; ``wire`` hands it the sessions
    part's ``close_sessions`` and the queues part's ``delete_queue``, built after it.
    """

    def __init__(self, *, vhosts: dict[str, VHost], outbox: Outbox, retained: RetainedStore,
                 policies: dict[str, dict[str, Policy]], parameters: RuntimeParameters,
                 access: Access, topic_permissions: TopicPermissions,
                 topology: Topology) -> None:
        self.vhosts = vhosts
        self.outbox = outbox
        self.retained = retained
        self.policies = policies
        self.parameters = parameters
        self.permissions = access.permissions
        self._access_changed = access._access_changed
        self.topic_permissions = topic_permissions
        self.topology = topology

    def wire(self, *, close_sessions: Callable[[Callable[[Session], bool], str], None],
             delete_queue: Callable[[VHost, Queue], Any]) -> None:
        """The parts built after this one: sessions and queues."""
        self._close_sessions = close_sessions
        self._delete_queue = delete_queue

    def add_vhost(self, name: str, description: str = "", *, persist: bool = True) -> VHost:
        """Create ``name`` (or update its description); ValueError for an empty name."""
        if not name:
            raise ValueError("a vhost needs a name")
        vh = self.vhosts.get(name)
        if vh is None:
            vh = self.vhosts[name] = VHost(name)
        vh.description = description
        if persist:
            self.outbox.emit(ops.PutVHost(name, description))
        return vh

    def delete_vhost(self, name: str) -> bool:
        """Delete a vhost with its connections, queues, exchanges, policies, permissions."""
        vh = self.vhosts.get(name)
        if vh is None:
            return False
        self._close_sessions(lambda s: s.vhost == name, f"vhost '{name}' is deleted")
        for q in list(vh.queues.values()):
            self._delete_queue(vh, q)
        del self.vhosts[name]
        for rs in self.retained.owners(name):  # their rows go with DeleteVHost's
            self.retained.close(rs.owner, persist=False)
        self.policies.pop(name, None)
        self.parameters.drop_vhost(name)
        for key in [k for k in self.permissions if k[1] == name]:
            del self.permissions[key]
        self.topic_permissions.forget(vhost=name)  # rows: DeleteVHost's
        self._access_changed()
        self.outbox.emit(ops.DeleteVHost(name))
        self.topology.vhost_deleted(name)
        return True
