"""Runtime parameters: RabbitMQ's ``/api/parameters/{component}/{vhost}/{name}``.

A parameter is a JSON object under a component name (``shovel``,
``federation-upstream``, ``federation-upstream-set``) and the user who defined
it (``defined_by``: a link acts with that user's permissions, as RabbitMQ's
shovels check the defining user). The broker only keeps them and hands their
store operations to ``emit`` (its outbox); what a component does with its
parameters (start a shovel, ...) belongs to whoever ``watch``\\ es changes
(``links/``), so this module stays pure: no trio, no SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amqplite import storeops as ops

#: (component, vhost, name)
ParamKey = tuple[str, str, str]
#: told of every change: the key and the new value (None: deleted)
Watcher = Callable[[ParamKey, Any], None]


def _copy(value: Any) -> Any:
    """A shallow copy of a value: a JSON object, or a list (an upstream set)."""
    return list(value) if isinstance(value, list) else dict(value)


class RuntimeParameters:
    """The parameters of every component and vhost; changes go to ``emit`` and to
    the watchers."""

    def __init__(self, emit: Callable[[Any], None]) -> None:
        self._emit = emit
        self._values: dict[ParamKey, Any] = {}
        self._owners: dict[ParamKey, str | None] = {}
        self._watchers: list[Watcher] = []

    def watch(self, watcher: Watcher) -> None:
        """Call ``watcher`` on every later put and delete."""
        self._watchers.append(watcher)

    def get(self, component: str, vhost: str, name: str) -> Any:
        return self._values.get((component, vhost, name))

    def defined_by(self, component: str, vhost: str, name: str) -> str | None:
        """Who defined the parameter (None: unknown, stored before this was kept)."""
        return self._owners.get((component, vhost, name))

    def items(self, component: str | None = None,
              vhost: str | None = None) -> list[tuple[ParamKey, Any]]:
        """Matching parameters, sorted by (component, vhost, name)."""
        return sorted(((k, v) for k, v in self._values.items()
                       if (component is None or k[0] == component)
                       and (vhost is None or k[1] == vhost)), key=lambda kv: kv[0])

    def owners(self) -> list[tuple[ParamKey, str | None]]:
        """Every parameter's key and who defined it."""
        return [(k, self._owners.get(k)) for k in self._values]

    def put(self, component: str, vhost: str, name: str, value: Any, *,
            persist: bool = True, defined_by: str | None = None) -> bool:
        """Create or replace (``defined_by`` becomes its owner); True when it existed."""
        key = (component, vhost, name)
        existed = key in self._values
        self._values[key] = _copy(value)
        self._owners[key] = defined_by
        if persist:
            self._emit(ops.PutParameter(component, vhost, name, _copy(value), defined_by))
        self._tell(key, _copy(value))
        return existed

    def delete(self, component: str, vhost: str, name: str) -> bool:
        """Remove; False when there was nothing."""
        key = (component, vhost, name)
        if self._values.pop(key, None) is None:
            return False
        self._owners.pop(key, None)
        self._emit(ops.DeleteParameter(component, vhost, name))
        self._tell(key, None)
        return True

    def drop_vhost(self, vhost: str) -> None:
        """A deleted vhost's parameters (its DeleteVHost removes their rows)."""
        for key in [k for k in self._values if k[1] == vhost]:
            del self._values[key]
            self._owners.pop(key, None)
            self._tell(key, None)

    def _tell(self, key: ParamKey, value: Any) -> None:
        for w in list(self._watchers):
            w(key, value)
