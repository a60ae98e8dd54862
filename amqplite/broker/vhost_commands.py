"""Virtual hosts: creating and deleting them, with their store rows.

Each vhost is its own namespace with its own ``amq.*`` exchanges; deleting
one deletes everything in it and closes its connections with 320, as
RabbitMQ does ("vhost '<name>' is deleted").
"""

from __future__ import annotations

from amqplite import storeops as ops
from amqplite.broker.base import BrokerBase
from amqplite.broker.vhost import VHost


class VHostOps(BrokerBase):
    """The vhost table and its lifecycle."""

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
        return True
