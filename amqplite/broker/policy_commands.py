"""Policies: matched to queues (and exchanges) by pattern and priority, applied when
they change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqplite.broker import persist as P
from amqplite.broker.exchanges import Exchange
from amqplite.broker.outbox import Outbox
from amqplite.broker.parameters import RuntimeParameters
from amqplite.broker.policy import VHOST_LIMITS_COMPONENT, VHOST_LIMITS_NAME, Policy, make_policy
from amqplite.broker.queue import Queue
from amqplite.broker.topology import Topology
from amqplite.broker.vhost import VHost


class Policies:
    """The policy table of each vhost and its effect on existing queues.

    Receives the vhost table, the outbox, the topology (federation policies
    apply to exchanges) and the expiry part's table of expiring queues;
    ``wire`` hands it ``dispatch`` and ``enforce_limits`` of the parts built
    after it (a changed policy may free or trim a queue).
    """

    def __init__(self, *, vhosts: dict[str, VHost], outbox: Outbox, topology: Topology,
                 expiring_queues: dict[Queue, None], parameters: RuntimeParameters) -> None:
        self.vhosts = vhosts
        self.parameters = parameters
        self.outbox = outbox
        self.topology = topology
        self._expiring_queues = expiring_queues
        #: vhost -> policy name -> Policy
        self.policies: dict[str, dict[str, Policy]] = {}

    def wire(self, *, dispatch: Callable[[Queue], None],
             enforce_limits: Callable[[Queue], None]) -> None:
        """The dispatcher's ``_dispatch`` and the queues part's ``_enforce_limits``."""
        self._dispatch = dispatch
        self._enforce_limits = enforce_limits

    def _match_policy(self, vhost: str, queue_name: str) -> Policy | None:
        return self._best_policy(vhost, lambda p: p.matches_queue(queue_name))

    def exchange_policy(self, vhost: str, exchange_name: str) -> Policy | None:
        """The policy that applies to an exchange (apply-to exchanges or all)."""
        return self._best_policy(vhost, lambda p: p.matches_exchange(exchange_name))

    def _best_policy(self, vhost: str, matches: Callable[[Policy], bool]) -> Policy | None:
        """The highest-priority policy of ``vhost`` that ``matches``."""
        best: Policy | None = None
        for p in self.policies.get(vhost, {}).values():
            if matches(p) and (best is None or p.priority > best.priority):
                best = p
        return best

    def vhost_limit(self, vhost: str, key: str) -> int | None:
        """A vhost's ``max-queues`` or ``max-connections`` (RabbitMQ's vhost-limits
        parameter), None when it has none or a negative one."""
        limits = self.parameters.get(VHOST_LIMITS_COMPONENT, vhost, VHOST_LIMITS_NAME)
        limit = limits.get(key) if isinstance(limits, dict) else None
        return limit if isinstance(limit, int) and limit >= 0 else None

    def refresh_exchange(self, vhost: str, ex: Exchange) -> None:
        """Take the ``alternate-exchange`` of the policy that now applies to ``ex``."""
        pol = self.exchange_policy(vhost, ex.name)
        ae = pol.definition.get("alternate-exchange") if pol is not None else None
        ex.policy_ae = ae if isinstance(ae, str) and ae else None

    def set_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   priority: int = 0, apply_to: str = "queues", *, persist: bool = True,
                   stored: bool = False) -> Policy:
        """Create or replace a policy and apply it to existing queues (ValueError if bad);
        a ``stored`` one (recovery) keeps a pattern RE2 refuses, matching nothing."""
        if vhost not in self.vhosts:
            raise ValueError(f"no vhost '{vhost}'")
        pol = make_policy(vhost, name, pattern, definition, priority, apply_to, stored=stored)
        self.policies.setdefault(vhost, {})[name] = pol
        if persist:
            self.outbox.emit(P.put_policy(pol))
        self.apply_policies(vhost)
        return pol

    def clear_policy(self, vhost: str, name: str) -> bool:
        pol = self.policies.get(vhost, {}).pop(name, None)
        if pol is None:
            return False
        self.outbox.emit(P.delete_policy(vhost, name))
        self.apply_policies(vhost)
        return True

    def effective_policy(self, q: Queue) -> Policy | None:
        return q.policy  # type: ignore[no-any-return]

    def apply_policies(self, vhost: str) -> None:
        vh = self.vhosts.get(vhost)
        if vh is None:
            return
        for ex in vh.exchanges.values():
            self.refresh_exchange(vhost, ex)
        for q in list(vh.queues.values()):
            q.policy = self._match_policy(vhost, q.name)
            q.refresh_settings()
            if q.expires is not None:
                self._expiring_queues[q] = None
            else:
                self._expiring_queues.pop(q, None)
            self._enforce_limits(q)
            self._dispatch(q)
        if self.topology.observers:  # federation policies apply to exchanges
            self.topology.exchanges(vhost)
