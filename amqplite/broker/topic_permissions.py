"""Topic permissions: who may publish and bind which routing keys on a topic exchange.

RabbitMQ's topic authorisation (3.7+): a topic permission is a write and a read
regular expression for one user, vhost and exchange. A basic.publish to a
*topic* exchange needs the routing key to match the write expression; a
queue.bind/unbind or exchange.bind/unbind whose source is a topic exchange
needs the binding key to match the read expression. MQTT rides on the same
checks: a PUBLISH is a basic.publish to ``mqtt_exchange`` and a SUBSCRIBE a
queue.bind, both with the AMQP-translated key (``a/b/+`` is checked as
``a.b.*``), as RabbitMQ's plugin checks them. A user with no topic permission
for an exchange may use every key on it.

As in RabbitMQ, the match is a search (``re:run``), ``{username}``, ``{vhost}``
and (MQTT) ``{client_id}`` in an expression are replaced by the session's
values before it runs, and an empty expression is ``^$``: only the empty key
passes (3.10.8, measured; as for the other permissions). Unlike RabbitMQ, a
value is inserted in the form of the key it is matched against, escaped (a
user named ``a.b`` must not match ``axb``): an MQTT session's key is the
translated topic, where an MQTT ``.`` is ``/``, so its values are translated
the same way (client id ``a.secret`` becomes ``a/secret``, the key of its own
level ``devices/a.secret/``, never ``a.secret``, which is ``devices/a/secret``).
A value that cannot be one word of such a key (empty; for MQTT holding ``/``,
``+``, ``#`` or ``*``; for AMQP holding ``*`` or ``#``, the binding keys'
wildcards) matches nothing. An AMQP value keeps its dots (a user ``a.b`` owns
the words ``a.b``, as in RabbitMQ). The expressions run on RE2 (``patterns``),
as the other permissions do.

This module keeps the table and answers "may this key pass"; ``Access``
turns a refusal into RabbitMQ's channel error. Pure: no trio, no SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs
import re2
from mypy_extensions import mypyc_attr

from amqplite import storeops as ops
from amqplite.broker import patterns

#: (user, vhost) -> exchange -> TopicPermission
Table = dict[tuple[str, str], "dict[str, TopicPermission]"]

@mypyc_attr(native_class=False)
@attrs.frozen
class TopicPermission:
    exchange: str
    write: str = ""
    read: str = ""


def validate(pattern: str) -> str | None:
    """Why ``pattern`` is refused, or None. Variables are checked as the value
    they become (escaped text), so ``^{username}-`` is a valid expression."""
    return patterns.check(expand(pattern, "u", "v", "c"))


#: what a value that cannot be one word of the key becomes: an atom nothing matches
NO_MATCH = r"[^\s\S]"
#: characters that keep a value from being one word: MQTT (``.`` is translated to
#: ``/``, so ``/`` would be a level separator; ``+ # *`` are wildcards), AMQP
_UNSAFE_MQTT = frozenset("/+#*")
_UNSAFE_AMQP = frozenset("*#")


def key_form(value: str, mqtt: bool) -> str | None:
    """``value`` as it appears in the key it is matched against, or None when it
    cannot be one word of it (then it matches nothing). MQTT keys are translated
    topics (``protocol/mqtt/topics.py``): a ``.`` in a level is a ``/`` there."""
    unsafe = _UNSAFE_MQTT if mqtt else _UNSAFE_AMQP
    if not value or not unsafe.isdisjoint(value):
        return None
    return value.replace(".", "/") if mqtt else value


def _insert(value: str, mqtt: bool) -> str:
    form = key_form(value, mqtt)
    return f"(?:{NO_MATCH if form is None else re2.escape(form)})"


@functools.lru_cache(maxsize=1024)
def expand(pattern: str, username: str, vhost: str, client_id: str | None) -> str:
    """``pattern`` with its variables replaced by the values in key form, escaped
    (``key_form``); an MQTT session is one with a client id. A session without a
    client id (AMQP) leaves ``{client_id}`` as written, as RabbitMQ does."""
    if "{" not in pattern:
        return pattern
    mqtt = client_id is not None
    out = pattern.replace("{username}", _insert(username, mqtt))
    out = out.replace("{vhost}", _insert(vhost, mqtt))
    if client_id is not None:
        out = out.replace("{client_id}", _insert(client_id, mqtt))
    return out


def permits(pattern: str, key: str, username: str, vhost: str,
            client_id: str | None) -> bool:
    """RabbitMQ's topic match: a search of the expanded expression in ``key``."""
    return patterns.search(expand(pattern or "^$", username, vhost, client_id), key)


def refused_text(key: str, exchange: str, vhost: str, user: str) -> str:
    """RabbitMQ 3.10.8's text, the same for write and read (seen on the wire)."""
    return (f"access to topic '{key}' in exchange '{exchange}' in vhost '{vhost}' "
            f"refused for user '{user}'")


class TopicPermissions:
    """Every user's topic permissions; changes go to ``emit`` (the broker's outbox).

    ``table`` is read on the publish path: while it is empty (nobody has a topic
    permission) a publish pays one truth test, and a user without one a dict miss.
    """

    def __init__(self, emit: Callable[[Any], None]) -> None:
        self._emit = emit
        self.table: Table = {}

    def of(self, user: str, vhost: str) -> dict[str, TopicPermission] | None:
        return self.table.get((user, vhost))

    def items(self, *, user: str | None = None,
              vhost: str | None = None) -> list[tuple[str, str, TopicPermission]]:
        """(user, vhost, permission) sorted by user, vhost, exchange."""
        return [(u, v, tp) for (u, v), per in sorted(self.table.items())
                if (user is None or u == user) and (vhost is None or v == vhost)
                for _, tp in sorted(per.items())]

    def put(self, user: str, vhost: str, exchange: str, write: str, read: str, *,
            persist: bool = True) -> TopicPermission:
        """Create or replace the permission of (user, vhost, exchange)."""
        tp = TopicPermission(exchange, write, read)
        self.table.setdefault((user, vhost), {})[exchange] = tp
        if persist:
            self._emit(ops.PutTopicPermission(user, vhost, exchange, write, read))
        return tp

    def delete(self, user: str, vhost: str, exchange: str | None = None) -> int:
        """Remove one exchange's permission, or (None) all of the user's in the vhost;
        how many went."""
        per = self.table.get((user, vhost))
        if not per or (exchange is not None and exchange not in per):
            return 0
        if exchange is None:
            n = len(per)
            del self.table[(user, vhost)]
        else:
            n = 1
            del per[exchange]
            if not per:
                del self.table[(user, vhost)]
        self._emit(ops.DeleteTopicPermission(user, vhost, exchange))
        return n

    def forget(self, *, user: str | None = None, vhost: str | None = None) -> None:
        """Drop a deleted user's or vhost's permissions from memory (the store op
        deleting the user or vhost removes their rows)."""
        for key in [k for k in self.table
                    if (user is not None and k[0] == user)
                    or (vhost is not None and k[1] == vhost)]:
            del self.table[key]
