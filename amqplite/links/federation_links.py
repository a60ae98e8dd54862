"""Which federation links run: one per exchange a federation policy matches and per
upstream the policy names, kept in step with policies, upstream parameters and
exchanges as they change, and told of binding changes on federated exchanges.

It observes the broker core (``broker.topology``) and the runtime parameters;
both call it synchronously, so it only notes what changed and a task of its
own reconciles (starting, replacing or stopping link tasks) right after.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Protocol

import trio

from amqplite.broker.exchanges import Binding
from amqplite.broker.parameters import ParamKey, RuntimeParameters
from amqplite.broker.policy import FEDERATION_KEYS, Policy
from amqplite.broker.topology import Topology
from amqplite.broker.vhost import VHost
from amqplite.links.access import Access, Identity, Need, vhost_needs
from amqplite.links.audit import HopSink
from amqplite.links.federation import ExchangeInfo, FederationLink, describe, queue_name
from amqplite.links.federation_config import UpstreamSpec, upstreams_for
from amqplite.links.shovel import LocalAddress

log = logging.getLogger("amqplite.links")

COMPONENTS = ("federation-upstream", "federation-upstream-set")
LinkKey = tuple[str, str, str]  # vhost, exchange, upstream


class BrokerView(Protocol):
    """What federation reads of the broker core."""

    vhosts: dict[str, VHost]
    policies: dict[str, dict[str, Policy]]
    topology: Topology

    def exchange_policy(self, vhost: str, exchange_name: str) -> Policy | None: ...


class Federation:
    """The federation links of a broker and their tasks."""

    def __init__(self, broker: BrokerView, params: RuntimeParameters, local: LocalAddress,
                 *, node: str, access: Access, record: HopSink | None = None,
                 max_links: int = 0) -> None:
        self._broker, self._params, self._local = broker, params, local
        self._node, self._access, self._record = node, access, record
        #: links a vhost runs at most (0: no limit): a policy matching many exchanges
        #: must not open two connections each without bound
        self._max_links = max_links
        #: vhost -> links it wanted beyond the limit, as last logged
        self._capped: dict[str, int] = {}
        self._nursery: trio.Nursery | None = None
        self._running: dict[LinkKey, tuple[FederationLink, trio.CancelScope]] = {}
        self._dirty: set[str] = set()
        self._wake = trio.Event()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as n:
            self._nursery = n
            self._dirty.update(self._broker.vhosts)
            self._broker.topology.watch(self)
            self._broker.topology.watch_vhosts(self.vhost_deleted)
            self._params.watch(self._param_changed)
            try:
                self._reconcile_dirty()
                task_status.started()
                while True:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    self._reconcile_dirty()
            finally:
                self._broker.topology.unwatch(self)
                self._broker.topology.unwatch_vhosts(self.vhost_deleted)

    # ------------------------------------------------------------ observers
    def binding_changed(self, vhost: str, binding: Binding, added: bool) -> None:
        for (vh, x, _), (link, _) in self._running.items():
            if vh == vhost and x == binding.source:
                link.binding_changed(binding, added)

    def exchanges_changed(self, vhost: str) -> None:
        # every exchange declare calls this: a vhost with no federation policy and no
        # link (almost all of them) costs a scan of its few policies, no reconcile
        if any(k[0] == vhost for k in self._running) or any(
                key in p.definition for p in self._broker.policies.get(vhost, {}).values()
                for key in FEDERATION_KEYS):
            self._mark(vhost)

    def vhost_deleted(self, vhost: str) -> None:
        """The vhost went, with its upstreams and policies: its links stop now (and
        clean up upstream, as a removed link does), not at the next reconcile, so
        none retries into the deleted vhost or outlives it into a vhost created
        again with its name before the reconciler runs."""
        for key in [k for k in self._running if k[0] == vhost]:
            self._stop(key, cleanup=True)
        self._dirty.discard(vhost)
        self._capped.pop(vhost, None)

    def _param_changed(self, key: ParamKey, value: Any) -> None:
        if key[0] in COMPONENTS:
            self._mark(key[1])

    def access_changed(self) -> None:
        """Users or permissions changed: every link's user is checked again."""
        self._dirty.update(self._broker.vhosts)
        self._dirty.update(k[0] for k in self._running)
        self._wake.set()

    def _who(self, key: LinkKey, spec: UpstreamSpec) -> tuple[Identity, str | None]:
        """Whom a link acts as (who defined its upstream) and why that user may not
        run it: access to both vhosts, and on the upstream what the link declares,
        binds and consumes there (names as :mod:`links.federation` builds them);
        here, write on the federated exchange."""
        vhost, xname, _ = key
        identity = self._access.identity(
            self._params.defined_by("federation-upstream", vhost, spec.name))
        up_x = spec.exchange if spec.exchange is not None else xname
        needs: list[Need] = []
        for ep, need in vhost_needs("uri", spec.uris):
            uv = ep.vhost
            q = queue_name(up_x, uv, self._node, vhost, xname)
            needs.append(need)
            up = self._broker.vhosts.get(uv)
            if up is not None and up_x not in up.exchanges:
                needs.append(Need("uri", uv, "configure", "exchange", up_x))
            needs += [Need("uri", uv, p, "queue", q) for p in ("configure", "write", "read")]
            for suffix in ("A", "B"):
                needs += [Need("uri", uv, p, "exchange", f"{q} {suffix}")
                          for p in ("configure", "write", "read")]
            needs.append(Need("uri", uv, "read", "exchange", up_x))
        needs += [Need("exchange", vhost), Need("exchange", vhost, "write", "exchange", xname)]
        return identity, self._access.refusal(identity.user, needs)

    def _mark(self, vhost: str) -> None:
        self._dirty.add(vhost)
        self._wake.set()

    # ------------------------------------------------------------ the links
    def links(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """``/api/federation-links`` rows, sorted by vhost, exchange, upstream."""
        return [describe(link) for (vh, _, _), (link, _) in sorted(self._running.items())
                if vhost is None or vh == vhost]

    def restart(self, vhost: str, link_id: str) -> bool:
        """Stop a link and start it afresh; False when there is none with that id."""
        for key, (link, _) in list(self._running.items()):
            if key[0] == vhost and link.id == link_id:
                self._stop(key, cleanup=False)
                self._start(key, link.spec, link.policy)
                return True
        return False

    def _desired(self, vhost: str) -> dict[LinkKey, tuple[Any, str]]:
        vh = self._broker.vhosts.get(vhost)
        if vh is None:
            return {}
        params = {n: v for (_, _, n), v in self._params.items("federation-upstream", vhost)}
        sets = {n: v for (_, _, n), v in self._params.items("federation-upstream-set", vhost)}
        out: dict[LinkKey, tuple[Any, str]] = {}
        for name, ex in vh.exchanges.items():
            if not name or "x-internal-purpose" in ex.arguments:
                continue  # the default exchange; a link's own internal exchanges
            pol = self._broker.exchange_policy(vhost, name)
            if pol is None:
                continue
            for spec in upstreams_for(pol.definition, params, sets):
                out[(vhost, name, spec.name)] = (spec, pol.name)
        over = max(0, len(out) - self._max_links) if self._max_links else 0
        if over != self._capped.get(vhost, 0):
            self._capped[vhost] = over
            if over:
                log.warning("vhost '%s': %d federation links not started, over its limit "
                            "(max_links_per_vhost = %d)", vhost, over, self._max_links)
        if over:  # the first ones by exchange and upstream name run: a stable choice
            out = {k: out[k] for k in sorted(out)[:self._max_links]}
        return out

    def _reconcile_dirty(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for vhost in sorted(dirty):
            desired = self._desired(vhost)
            for key in [k for k in self._running if k[0] == vhost]:
                link = self._running[key][0]
                want = desired.get(key)
                if want is None:
                    self._stop(key, cleanup=True)
                elif want != (link.spec, link.policy) or \
                        self._who(key, link.spec) != (link.identity, link.refused):
                    self._stop(key, cleanup=False)
            for key, (spec, policy) in desired.items():
                if key not in self._running:
                    self._start(key, spec, policy)

    def _stop(self, key: LinkKey, *, cleanup: bool) -> None:
        link, scope = self._running.pop(key)
        scope.cancel()
        if cleanup and self._nursery is not None:
            with contextlib.suppress(RuntimeError):
                self._nursery.start_soon(link.cleanup)

    def _start(self, key: LinkKey, spec: Any, policy: str) -> None:
        if self._nursery is None:
            return
        vhost, xname, _ = key

        def current() -> Any:
            vh = self._broker.vhosts.get(vhost)
            return None if vh is None else vh.exchanges.get(xname)

        def info() -> ExchangeInfo | None:
            ex = current()
            if ex is None:
                return None
            return ExchangeInfo(ex.type_name, ex.durable, ex.auto_delete, ex.internal,
                                dict(ex.arguments))

        def bindings() -> list[Binding]:
            ex = current()
            return [] if ex is None else sorted(ex.bindings, key=repr)

        identity, refused = self._who(key, spec)
        if refused is not None:
            log.warning("federation link %s -> '%s' in vhost '%s' stopped: %s", spec.name,
                        xname, vhost, refused)
        link = FederationLink(vhost, xname, spec, policy, node=self._node,
                              local=self._local, identity=identity, info=info,
                              bindings=bindings, record=self._record, refused=refused)
        scope = trio.CancelScope()
        self._running[key] = (link, scope)

        async def task() -> None:
            with scope:
                await link.run()

        try:
            self._nursery.start_soon(task)
        except RuntimeError:  # shutting down
            del self._running[key]
