"""The links supervisor: one task per shovel parameter, started, replaced and
stopped as the ``shovel`` runtime parameters change; and exchange federation's
links (``federation_links.Federation``), one task per federated exchange and
upstream.

A service in the broker's root nursery (the composition root, ``main.py``,
starts it); it receives what it uses explicitly: the broker's runtime
parameters, where the broker's own listener is (for ``amqp://`` without a
host), how to delete a parameter through the store (``src-delete-after``)
and the access checks (``links.access``): each link acts as the user who
defined it, and the broker core tells :meth:`Links.access_changed` when users
or permissions change, so a link whose user lost what it needs stops. A
deleted vhost's shovels stop as its parameters go (``drop_vhost`` tells the
parameter watchers, synchronously).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from amqplite.broker.parameters import ParamKey, RuntimeParameters
from amqplite.links import config
from amqplite.links.access import Access
from amqplite.links.audit import HopSink
from amqplite.links.federation_links import Federation
from amqplite.links.shovel import LocalAddress, Shovel, describe

if TYPE_CHECKING:
    from amqplite.server.app import Server

log = logging.getLogger("amqplite.links")


class Links:
    """Every shovel of the broker and its task."""

    def __init__(self, params: RuntimeParameters, local: LocalAddress,
                 delete: Callable[[str, str, str], None],
                 federation: Federation | None = None, hops: HopSink | None = None, *,
                 access: Access, node: str = "amqplite") -> None:
        self._params = params
        #: who each shovel acts as and whether that user may run it
        self._access = access
        self._node = node
        self._local = local
        self._delete = delete
        #: exchange federation's links (None: not run, as in some tests)
        self.federation = federation
        self._hops = hops
        self._nursery: trio.Nursery | None = None
        self._running: dict[tuple[str, str], tuple[Shovel, trio.CancelScope]] = {}

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as n:
            self._nursery = n
            for (component, vhost, name), value in self._params.items("shovel"):
                self._changed((component, vhost, name), value)
            self._params.watch(self._changed)
            if self.federation is not None:
                await n.start(self.federation.run)
            task_status.started(self)
            await trio.sleep_forever()

    def shovels(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """``/api/shovels`` rows, sorted by vhost and name."""
        return [describe(s) for (vh, _), (s, _) in sorted(self._running.items())
                if vhost is None or vh == vhost]

    def restart(self, vhost: str, name: str) -> bool:
        """Stop the shovel and start it afresh; False when there is none."""
        value = self._params.get("shovel", vhost, name)
        if value is None:
            return False
        self._changed(("shovel", vhost, name), value, restart=True)
        return True

    def access_changed(self) -> None:
        """Users or permissions changed (the broker core tells us, synchronously): a
        shovel whose user may no longer run it stops, saying why, and one that may
        again starts; federation links likewise."""
        for (vhost, name), (shovel, _) in list(self._running.items()):
            identity = self._access.identity(self._params.defined_by("shovel", vhost, name))
            refused = self._access.shovel_refusal(shovel.spec, identity.user)
            if (identity, refused) != (shovel.identity, shovel.refused):
                value = self._params.get("shovel", vhost, name)
                if value is not None:
                    self._changed(("shovel", vhost, name), value)
        if self.federation is not None:
            self.federation.access_changed()

    def _changed(self, key: ParamKey, value: dict[str, Any] | None, *,
                 restart: bool = False) -> None:
        """A shovel parameter was put or deleted: its shovel starts, restarts or stops.
        A put that changes nothing (definitions imported again, an identical PUT)
        leaves a running shovel alone: same connections, its counters kept; one
        that has ended (reconnect-delay 0) starts again, as ``restart`` does."""
        component, vhost, name = key
        if component != "shovel" or self._nursery is None:
            return
        spec = None
        if value is not None:
            try:
                spec = config.parse(value)
            except ValueError as exc:  # stored by an older version that checked less
                log.warning("shovel '%s' in vhost '%s' not started: %s", name, vhost, exc)
        old = self._running.pop((vhost, name), None)
        if spec is None:
            if old is not None:
                old[1].cancel()
            return
        identity = self._access.identity(self._params.defined_by(component, vhost, name))
        refused = self._access.shovel_refusal(spec, identity.user)
        if old is not None:
            shovel = old[0]
            if not restart and not shovel.ended and \
                    (spec, identity, refused) == (shovel.spec, shovel.identity, shovel.refused):
                self._running[(vhost, name)] = old
                return
            old[1].cancel()
        if refused is not None:
            log.warning("shovel '%s' in vhost '%s' stopped: %s", name, vhost, refused)
        shovel = Shovel(name, vhost, spec, self._local,
                        on_done=lambda: self._delete("shovel", vhost, name),
                        hops=self._hops, identity=identity, refused=refused,
                        node=self._node)
        scope = trio.CancelScope()
        self._running[(vhost, name)] = (shovel, scope)

        async def task() -> None:
            with scope:
                await shovel.run()
            shovel.ended = True

        try:
            self._nursery.start_soon(task)
        except RuntimeError:  # the broker is shutting down: nothing starts any more
            del self._running[(vhost, name)]


async def run_links(server: Server, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """The service: a :class:`Links` over ``server``'s broker, kept in
    ``server.links`` for the admin API."""
    s = server.settings

    def local() -> tuple[str, int]:
        hosts = [h for h in s.host if h not in ("", "0.0.0.0", "::")]
        host = hosts[0] if hosts else "127.0.0.1"
        if not server.listen_ports:
            raise OSError("amqp:// names this broker, which has no plain AMQP listener")
        return str(host), server.listen_ports[0]

    def delete(component: str, vhost: str, name: str) -> None:
        server.execute(server.broker.parameters.delete, component, vhost, name)

    def log_hops(rows: list[tuple[Any, ...]]) -> None:
        """Hop rows join the broker's delivery log, as its own rows do."""
        server.execute(server.broker.log.extend, rows)

    # with the log off (fixed at start) links build no rows at all
    hops = None if server.broker.log_level == "off" else log_hops
    access = Access(server.broker, server.link_secret, s.default_user)
    federation = Federation(server.broker, server.broker.parameters, local,
                            node=s.cluster_name, access=access, record=hops,
                            max_links=s.max_links_per_vhost)
    links = Links(server.broker.parameters, local, delete, federation, hops, access=access,
                  node=s.cluster_name)
    server.links = links
    server.broker.access_watchers.append(links.access_changed)
    try:
        await links.run(task_status=task_status)
    finally:
        server.broker.access_watchers.remove(links.access_changed)
