"""The clocks of the MQTT session rules: one trio timer per session key, which
calls back when it runs out (a will's delay, a disconnected session's expiry).
The rules (sessions/mqtt/) say when; this only waits."""

from __future__ import annotations

from collections.abc import Callable

import trio

from amqplite.sessions.mqtt.common import Key


class KeyTimers:
    """Timers by session key in a nursery; starting one replaces the key's last."""

    def __init__(self, nursery: trio.Nursery, fired: Callable[[Key], None]) -> None:
        self._nursery = nursery
        self._fired = fired
        self._scopes: dict[Key, trio.CancelScope] = {}

    def start(self, key: Key, delay: float) -> None:
        self.stop(key)
        scope = self._scopes[key] = trio.CancelScope()
        self._nursery.start_soon(self._run, key, max(0.0, delay), scope)

    def stop(self, key: Key) -> None:
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()

    async def _run(self, key: Key, delay: float, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(delay)  # a timer: the rule's delay
            if self._scopes.get(key) is scope:  # not replaced meanwhile
                del self._scopes[key]
                self._fired(key)
