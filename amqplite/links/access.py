"""Whose permissions a link acts with, and whether it holds what the link needs.

A link's URI without a host names this broker; without credentials too, the
link logs in as the user who defined its parameter (``defined_by``), never as
``guest``: a tenant's shovel reaches no further than the tenant does. The
parameter's PUT is refused (403, naming the vhost) when that user lacks what
the link needs there, and the links supervisor asks again whenever
permissions or users change (a link whose user lost them stops, saying why).
A URI with credentials is an ordinary login with them (a host is the remote
broker's business; this broker's own listener judges its own logins).

The rules are RabbitMQ's AMQP ones (``broker/permissions.py``): consuming needs
read on the queue, declaring a missing queue configure on it, publishing
write on the exchange, binding write on the destination and read on the
source. Pure: the caller hands in a view of the broker.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import attrs

from amqplite.broker.auth import User, UserDB, is_loopback
from amqplite.broker.permissions import Permission
from amqplite.broker.vhost import VHost
from amqplite.links.config import ShovelSpec
from amqplite.links.uri import Endpoint, parse

#: the name a server-named queue (a shovel from an exchange) is checked as
SERVER_NAMED = "amq.gen-shovel"


class AccessView(Protocol):
    """What the checks read of the broker core."""

    def permission(self, user: str, vhost: str) -> Permission | None: ...

    def may(self, user: str, vhost: str, perm: str, kind: str, name: str) -> bool: ...


class BrokerView(AccessView, Protocol):
    """The broker core as :class:`Access` reads it."""

    @property
    def vhosts(self) -> Mapping[str, VHost]: ...

    @property
    def users(self) -> UserDB: ...


@attrs.frozen
class Identity:
    """Whom a link logs in to this broker as, and the password our own listener takes
    from our own links for that user (``Server.link_secret``)."""

    user: str
    secret: str
    #: loopback-only users the link may not log in as at a loopback address (all of
    #: them but the definer, unless it is an administrator)
    not_from_loopback: frozenset[str] = frozenset()

    def endpoint(self, ep: Endpoint) -> Endpoint:
        """``ep`` with this identity's login where it acts as the defining user."""
        return attrs.evolve(ep, user=self.user, password=self.secret) if as_owner(ep) else ep

    def peer_check(self, ep: Endpoint) -> Callable[[str], str | None]:
        """For ``client.connect``: refuses a loopback address when ``ep`` logs in as a
        loopback-only user the definer may not be (whatever name led there: the
        connection would come from loopback, where that user passes)."""
        def check(address: str) -> str | None:
            if ep.credentials and ep.user in self.not_from_loopback and is_loopback(address):
                return (f"user '{ep.user}' may log in from loopback only, and a link "
                        f"defined by '{self.user}' may not log in as it")
            return None
        return check


class Access:
    """The checks against a live broker: who a parameter's links act as (its
    ``defined_by``; one stored before that was kept acts as ``default_user``, as
    it did) and why they may not run."""

    def __init__(self, broker: BrokerView, secret: str, default_user: str) -> None:
        self._broker, self._secret, self.default_user = broker, secret, default_user

    def identity(self, defined_by: str | None) -> Identity:
        user = defined_by or self.default_user
        u = self._broker.users.get(user)
        barred = frozenset() if u is not None and u.is_admin else \
            frozenset(self._broker.users.loopback - {user})
        return Identity(user, self._secret, barred)

    def queue_exists(self, vhost: str, name: str) -> bool:
        vh = self._broker.vhosts.get(vhost)
        return vh is not None and name in vh.queues

    def refusal(self, user: str, needs: Iterable[Need]) -> str | None:
        b = self._broker
        return refusal(b, b.users.get, user, needs, lambda v: v in b.vhosts)

    def shovel_refusal(self, spec: ShovelSpec, user: str) -> str | None:
        return self.refusal(user, shovel_needs(spec, self.queue_exists))


@attrs.frozen
class Need:
    """``perm`` on a resource in ``vhost`` (an empty ``perm``: access to the vhost),
    for the link's ``field``."""

    field: str
    vhost: str
    perm: str = ""
    kind: str = ""
    name: str = ""


def as_owner(ep: Endpoint) -> bool:
    """Does the link log in to this broker as its defining user (no host, no user)?"""
    return ep.local and not ep.credentials


def vhost_needs(field: str, uris: Iterable[str]) -> list[tuple[Endpoint, Need]]:
    """The endpoints of ``uris`` that act as the defining user, each with its vhost
    access need."""
    out = []
    for u in uris:
        ep = parse(u, field)
        if as_owner(ep):
            out.append((ep, Need(field, ep.vhost)))
    return out


def shovel_needs(spec: ShovelSpec, queue_exists: Callable[[str, str], bool]) -> list[Need]:
    """What a shovel's local ends need of the defining user (``queue_exists(vhost,
    name)``: a missing queue the shovel declares needs configure too)."""
    out: list[Need] = []
    for ep, need in vhost_needs("src-uri", spec.src_uris):
        out.append(need)
        vh = ep.vhost
        if spec.src_queue is not None:
            q = spec.src_queue
            if not spec.src_predeclared and not queue_exists(vh, q):
                out.append(Need("src-uri", vh, "configure", "queue", q))
            out.append(Need("src-uri", vh, "read", "queue", q))
        else:  # a server-named queue bound to the source exchange
            out += [Need("src-uri", vh, "configure", "queue", SERVER_NAMED),
                    Need("src-uri", vh, "write", "queue", SERVER_NAMED),
                    Need("src-uri", vh, "read", "exchange", spec.src_exchange or ""),
                    Need("src-uri", vh, "read", "queue", SERVER_NAMED)]
    for ep, need in vhost_needs("dest-uri", spec.dest_uris):
        out.append(need)
        vh = ep.vhost
        if spec.dest_queue is not None:
            if not spec.dest_predeclared and not queue_exists(vh, spec.dest_queue):
                out.append(Need("dest-uri", vh, "configure", "queue", spec.dest_queue))
            out.append(Need("dest-uri", vh, "write", "exchange", ""))
        elif spec.dest_exchange is not None:
            out.append(Need("dest-uri", vh, "write", "exchange", spec.dest_exchange))
        # else each message's own exchange: checked by the broker at each publish
    return out


def upstream_needs(value: Mapping[str, object]) -> list[Need]:
    """What a ``federation-upstream`` value's local URIs need at PUT: access to the
    upstream vhost and read on a named upstream exchange (its links need more once
    the exchanges they federate are known: ``federation_links``)."""
    raw = value.get("uri")
    uris = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
    exchange = value.get("exchange")
    out: list[Need] = []
    for ep, need in vhost_needs("uri", uris):
        out.append(need)
        if isinstance(exchange, str):
            out.append(Need("uri", ep.vhost, "read", "exchange", exchange))
    return out


def refusal(view: AccessView, users: Callable[[str], User | None], user: str,
            needs: Iterable[Need], vhost_exists: Callable[[str], bool]) -> str | None:
    """Why ``user`` may not run a link with these needs (the first one it lacks,
    naming the field and the vhost), or None when it may."""
    for n in needs:
        if users(user) is None:
            return f"{n.field}: user '{user}' does not exist (links act as the user " \
                   "who defined them)"
        if not vhost_exists(n.vhost):
            return f"{n.field}: vhost '{n.vhost}' does not exist"
        if view.permission(user, n.vhost) is None:
            return f"{n.field}: user '{user}' has no access to vhost '{n.vhost}'"
        if n.perm and not view.may(user, n.vhost, n.perm, n.kind, n.name):
            shown = "amq.default" if n.kind == "exchange" and not n.name else n.name
            return (f"{n.field}: user '{user}' may not {n.perm} {n.kind} '{shown}' "
                    f"in vhost '{n.vhost}'")
    return None


def loopback_login(field: str, uris: Iterable[str], loopback_users: Iterable[str],
                   user: str) -> str | None:
    """Why a link defined by ``user`` (not an administrator) may not log in with the
    credentials of a loopback-only user (``guest``) at this host: the link's
    connection comes from loopback, so it would pass where ``user`` itself is
    refused. None when it may."""
    only_here = set(loopback_users)
    for u in uris:
        ep = parse(u, field)
        if ep.credentials and ep.user in only_here and ep.user != user and (
                ep.local or _loopback_host(ep.host)):
            return (f"{field}: user '{ep.user}' may log in from loopback only, and a link "
                    f"defined by '{user}' may not log in as it")
    return None


def _loopback_host(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain", "0.0.0.0", "::"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower().endswith(".localhost")


#: the components whose parameters are links (each holds connections)
LINK_COMPONENTS = ("shovel", "federation-upstream")


def limit_refusal(owners: Iterable[tuple[tuple[str, str, str], str | None]],
                  key: tuple[str, str, str], user: str, *, per_vhost: int,
                  per_user: int) -> str | None:
    """Why a new link ``key`` (component, vhost, name) defined by ``user`` is over a
    limit (0: none), given every link parameter's key and definer; None when it
    fits. Replacing an existing one never counts twice."""
    if key[0] not in LINK_COMPONENTS:
        return None
    in_vhost = by_user = 0
    for k, owner in owners:
        if k == key or k[0] not in LINK_COMPONENTS:
            continue
        in_vhost += k[1] == key[1]
        by_user += owner == user
    if per_vhost and in_vhost >= per_vhost:
        return (f"vhost '{key[1]}' has {in_vhost} links (shovels and federation "
                f"upstreams), its limit (max_links_per_vhost = {per_vhost})")
    if per_user and by_user >= per_user:
        return (f"user '{user}' has defined {by_user} links (shovels and federation "
                f"upstreams), its limit (max_links_per_user = {per_user})")
    return None
