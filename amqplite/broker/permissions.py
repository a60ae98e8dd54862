"""Users' permissions per vhost, and the checks AMQP commands make, as in RabbitMQ.

A permission is three regular expressions (configure, write, read) for one
user in one vhost. RabbitMQ's internal backend runs the expression with
``re:run`` on the resource name: a search, so ``^app-.*`` is anchored by its
own ``^`` and ``app`` alone matches ``myapp1``. An empty expression becomes
``^$``, which no resource name matches (queue names are resolved first, and the
nameless exchange is checked as ``amq.default``). No permission at all in a
vhost refuses connection.open to it.

Which command needs what (rabbit_channel): exchange.declare/delete and
queue.declare/delete need configure on the resource; queue.bind/unbind need
write on the queue and read on the exchange; exchange.bind/unbind write on
the destination and read on the source; basic.publish write on the exchange;
basic.consume, basic.get and queue.purge read on the queue; a new queue with a
dead-letter exchange (and a new exchange with an alternate exchange) also
needs read on itself and write on the exchange it names.

Checks read the current table: a permission change holds for the next
operation of every open connection. Each channel remembers its last passed
check, tagged with ``permissions_epoch``, which every change bumps; so a
publisher to one exchange costs one comparison per message. Deleting a user
closes its connections, as RabbitMQ does.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from mypy_extensions import mypyc_attr

from amqplite import storeops as ops
from amqplite.broker import errors as E
from amqplite.broker import patterns
from amqplite.broker import topic_permissions as topics
from amqplite.broker.auth import User, UserDB, parse_tags
from amqplite.broker.exchanges import Exchange
from amqplite.broker.model import ChannelState, Session
from amqplite.broker.outbox import Outbox
from amqplite.broker.topic_permissions import TopicPermission, TopicPermissions
from amqplite.broker.vhost import VHost

PERMISSIONS = ("configure", "write", "read")
#: what RabbitMQ grants the default user and a vhost's creator
FULL = (".*", ".*", ".*")


def validate_pattern(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable expression, or None (RabbitMQ refuses bad ones)."""
    return patterns.check(pattern)


def permits(pattern: str, name: str) -> bool:
    """RabbitMQ's match: a search for ``pattern`` in ``name``; empty means ``^$``.
    RE2 runs it (a pattern set by an administrator meets names tenants choose)."""
    return patterns.search(pattern or "^$", name)


def resource_name(kind: str, name: str) -> str:
    """The nameless exchange is ``amq.default`` in permission checks."""
    return "amq.default" if kind == "exchange" and name == "" else name


@mypyc_attr(native_class=False)
@attrs.frozen
class Permission:
    configure: str = ""
    write: str = ""
    read: str = ""

    def allows(self, perm: str, kind: str, name: str) -> bool:
        return permits(getattr(self, perm), resource_name(kind, name))


def refused(kind: str, name: str, vhost: str, user: str,
            cm: tuple[int, int]) -> Exception:
    """RabbitMQ's text as 3.10 writes it (older releases named the permission first):
    "access to <kind> '<name>' in vhost '<vhost>' refused for user '<user>'"."""
    return E.access_refused(
        f"access to {kind} '{resource_name(kind, name)}' in vhost '{vhost}' "
        f"refused for user '{user}'", cm)


def vhost_refused(vhost: str, user: str) -> Exception:
    return E.not_allowed(f"access to vhost '{vhost}' refused for user '{user}'", (10, 40))


class Access:
    """Users, permissions and the checks commands make; the store rows they need.

    Receives the vhost table (names to check), the outbox (its rows) and the
    topic permissions; ``wire`` hands it the sessions part's ``close_sessions``
    (a deleted user's connections close), built after it.
    """

    def __init__(self, *, vhosts: dict[str, VHost], outbox: Outbox,
                 topic_permissions: TopicPermissions, loopback_users: tuple[str, ...] = (),
                 access_control: bool = False) -> None:
        self.vhosts = vhosts
        self.outbox = outbox
        self.topic_permissions = topic_permissions
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
        self._close_sessions: Callable[[Callable[[Session], bool], str], None] = (
            lambda which, reason: None)

    def wire(self, *, close_sessions: Callable[[Callable[[Session], bool], str], None]) -> None:
        """The sessions part's ``close_sessions``: it is built after this one."""
        self._close_sessions = close_sessions

    def _access_changed(self) -> None:
        """A user or permission changed: stale cached checks, watchers told."""
        self.permissions_epoch += 1
        for w in list(self.access_watchers):
            w()

    # ---------------------------------------------------------------- checks
    def _authorize(self, ch: ChannelState, perm: str, kind: str, name: str,
                   cm: tuple[int, int]) -> None:
        """Raise 403 unless the channel's user has ``perm`` on the resource (the text
        names the resource only, as RabbitMQ's does)."""
        a = ch.allowed
        epoch = self.permissions_epoch
        if a is not None and a[0] == epoch and a[3] == name and a[1] == perm and a[2] == kind:
            return
        s = ch.session
        if s.internal:
            return
        if not self.may(s.username, s.vhost, perm, kind, name):
            raise refused(kind, name, s.vhost, s.username, cm)
        ch.allowed = (epoch, perm, kind, name)

    def _authorize_topic(self, ch: ChannelState, ex: Exchange, key: str, perm: str,
                         cm: tuple[int, int]) -> None:
        """Raise 403 unless ``key`` passes the user's topic permission for ``ex`` (a
        topic exchange; none for it: every key passes). Callers test first that the
        table is not empty, so a broker without topic permissions pays nothing more."""
        s = ch.session
        if ex.type_name != "topic" or s.internal:
            return
        per = self.topic_permissions.of(s.username, s.vhost)
        tp = per.get(ex.name) if per is not None else None
        if tp is None:
            return
        pattern = tp.write if perm == "write" else tp.read
        if not topics.permits(pattern, key, s.username, s.vhost, s.client_id):
            raise E.access_refused(topics.refused_text(key, ex.name, s.vhost, s.username), cm)

    def _authorize_binding_key(self, ch: ChannelState, vh: VHost, source: str, key: str,
                               cm: tuple[int, int]) -> None:
        """A bind or unbind needs read on the key when its source is a topic exchange
        (RabbitMQ's binding_action: a missing source is left to the bind itself)."""
        if self.topic_permissions.table:
            ex = vh.exchanges.get(source)
            if ex is not None:
                self._authorize_topic(ch, ex, key, "read", cm)

    def may(self, user: str, vhost: str, perm: str, kind: str, name: str) -> bool:
        """Does ``user`` hold ``perm`` on the resource in ``vhost``? The one check AMQP
        commands and the admin API's reads of message bodies share."""
        if not self.access_control:
            return True
        p = self.permissions.get((user, vhost))
        return p is not None and p.allows(perm, kind, name)

    def check_vhost_access(self, user: str, vhost: str) -> None:
        """connection.open: 530 unless the vhost exists and the user has a permission in it."""
        if vhost not in self.vhosts:
            raise E.not_allowed(f"vhost {vhost} not found", (10, 40))
        if self.access_control and (user, vhost) not in self.permissions:
            raise vhost_refused(vhost, user)

    def permission(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))

    # ----------------------------------------------------------------- users
    def put_user(self, name: str, password_hash: str, tags: list[str] | str, *,
                 persist: bool = True) -> User:
        """Create or update a user; its sessions keep running with the new credentials."""
        tag_list = parse_tags(tags)
        u = self.users.put(name, password_hash, tag_list)
        if persist:
            self.outbox.emit(ops.PutUser(name, password_hash, ",".join(tag_list)))
        self._access_changed()
        return u

    def delete_user(self, name: str) -> bool:
        """Remove a user, its permissions and its connections (320, as RabbitMQ)."""
        if self.users.remove(name) is None:
            return False
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        self._access_changed()
        self.topic_permissions.forget(user=name)  # rows: DeleteUser's
        self._close_sessions(lambda s: s.username == name, f"user '{name}' is deleted")
        self.outbox.emit(ops.DeleteUser(name))
        return True

    # ----------------------------------------------------------- permissions
    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str,
                        *, persist: bool = True, stored: bool = False) -> Permission:
        """Grant (or replace) a user's permissions in a vhost; ValueError when refused.
        A ``stored`` one (recovery) keeps a pattern RE2 refuses, matching nothing."""
        if user not in self.users.users:
            raise ValueError(f"no user '{user}'")
        if vhost not in self.vhosts:
            raise ValueError(f"no vhost '{vhost}'")
        for pattern in () if stored else (configure, write, read):
            why = validate_pattern(pattern)
            if why is not None:
                raise ValueError(why)
        p = Permission(configure, write, read)
        self.permissions[(user, vhost)] = p
        self._access_changed()
        if persist:
            self.outbox.emit(ops.PutPermission(user, vhost, configure, write, read))
        return p

    def clear_permissions(self, user: str, vhost: str) -> bool:
        if self.permissions.pop((user, vhost), None) is None:
            return False
        self._access_changed()
        self.outbox.emit(ops.DeletePermission(user, vhost))
        return True

    # ----------------------------------------------------- topic permissions
    def set_topic_permission(self, user: str, vhost: str, exchange: str, write: str,
                             read: str, *, persist: bool = True,
                             stored: bool = False) -> TopicPermission:
        """Grant (or replace) a user's topic permission for one exchange; ValueError
        when refused. The exchange need not exist (RabbitMQ's neither). A ``stored``
        one (recovery) keeps a pattern RE2 refuses, matching nothing."""
        if user not in self.users.users:
            raise ValueError(f"no user '{user}'")
        if vhost not in self.vhosts:
            raise ValueError(f"no vhost '{vhost}'")
        for pattern in () if stored else (write, read):
            why = topics.validate(pattern)
            if why is not None:
                raise ValueError(why)
        return self.topic_permissions.put(user, vhost, exchange, write, read,
                                          persist=persist)

    def clear_topic_permissions(self, user: str, vhost: str,
                                exchange: str | None = None) -> int:
        """Remove one exchange's topic permission, or all of the user's in the vhost."""
        return self.topic_permissions.delete(user, vhost, exchange)
