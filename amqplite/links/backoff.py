"""When a failing link tries again, and what it logs: pure, no I/O, no clock.

A link that fails at once on every attempt (a refused login, a message its
destination will never take) must cost bounded CPU and log space. So the wait
starts at the link's ``reconnect-delay`` and doubles with each failure in a
row, up to :data:`MAX_DELAY` (or the reconnect-delay itself when that is
longer); a link that ran for :data:`HEALTHY_AFTER` seconds before it failed
starts again from the reconnect-delay. A failure is logged once per change
of reason, and the recovery from it once, not once per attempt.
"""

from __future__ import annotations

import attrs

#: the longest wait between attempts (unless the reconnect-delay asks for more)
MAX_DELAY = 60.0
#: the shortest: a reconnect-delay of a few milliseconds still doubles from here
MIN_DELAY = 0.1
#: a link that ran this long before failing was healthy: its backoff starts afresh
HEALTHY_AFTER = 30.0


@attrs.define
class Backoff:
    """A link's consecutive failures and the wait each one earns."""

    #: the link's reconnect-delay (seconds)
    base: float
    #: failures in a row since the link was last healthy
    failures: int = 0
    #: the reason logged last in this run of failures (None: none yet)
    logged: str | None = None
    #: the link's recovery from ``logged`` was logged
    announced: bool = False

    def failed(self, ran_for: float) -> float:
        """A failure after ``ran_for`` seconds of running (0: it never ran): the wait
        before the next attempt."""
        if ran_for >= HEALTHY_AFTER:  # a new run of failures: logged afresh
            self.failures, self.logged = 0, None
        start = max(self.base, MIN_DELAY)
        wait = min(start * 2.0 ** min(self.failures, 32), max(MAX_DELAY, start))
        self.failures += 1
        return wait

    def should_log(self, reason: str) -> bool:
        """True when ``reason`` differs from the failure logged last (log it then)."""
        if reason == self.logged:
            return False
        self.logged, self.announced = reason, False
        return True

    def recovered(self) -> bool:
        """The link runs again: True once per logged failure (log the recovery then),
        so a link that connects and fails again at once logs two lines, not two per
        attempt."""
        if self.logged is None or self.announced:
            return False
        self.announced = True
        return True
