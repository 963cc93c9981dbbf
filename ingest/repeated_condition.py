"""A warning that holds for a while, logged when it starts and when it ends.

An agent that polls every second meets the same trouble every second while it lasts: a
partition without a leader during an election, a broker whose metrics endpoint is down,
a sink that cannot flush. Logging each occurrence buries everything else (one line per
partition per second in the unclean-election fault); logging none hides it. So a
`RepeatedCondition` logs a condition (any hashable key: a partition, an endpoint) the
first time it occurs, counts it while it repeats, and logs once more when it is over,
with how many times it occurred and for how long. A condition that lasts longer than
`remind_after_s` (10 minutes by default) is logged again, with its count so far, every
that many seconds. The end is logged at the start's level, so a log filtered by level
never shows one without the other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

REMIND_AFTER_S = 600.0


@dataclass
class _Holding:
    message: str              # the start's message, formatted
    since: float              # clock time of the first occurrence
    reminded: float           # clock time it was last logged
    count: int = 1
    last_detail: str = ""     # the latest occurrence's message, if it differs


class RepeatedCondition:
    """Conditions (by key) logged at their start and end, counted in between."""

    def __init__(self, logger: logging.Logger, *, level: int = logging.WARNING,
                 remind_after_s: float = REMIND_AFTER_S,
                 clock: Callable[[], float] = time.monotonic):
        self.log, self.level, self.remind_after_s, self.clock = logger, level, remind_after_s, clock
        self._holding: dict[Hashable, _Holding] = {}
        self._lock = threading.Lock()

    def occurred(self, key: Hashable, message: str, *args) -> bool:
        """The condition `key` holds now (`message % args` says what it is). Logged if it
        just started, or as a reminder; returns True when it just started."""
        text = message % args if args else message
        now = self.clock()
        with self._lock:
            held = self._holding.get(key)
            if held is None:
                self._holding[key] = _Holding(text, now, now)
                self.log.log(self.level, "%s (logged once until it ends)", text)
                return True
            held.count += 1
            held.last_detail = "" if text == held.message else text
            if now - held.reminded < self.remind_after_s:
                return False
            held.reminded = now
            self.log.log(self.level, "%s: still so, %d times in %.0f s%s", held.message,
                         held.count, now - held.since, _latest(held))
            return False

    def ended(self, key: Hashable) -> bool:
        """The condition `key` does not hold (any more). Logged if it held; returns True
        then."""
        with self._lock:
            held = self._holding.pop(key, None)
        if held is None:
            return False
        self.log.log(self.level, "%s: over after %d time%s in %.0f s%s", held.message,
                     held.count, "" if held.count == 1 else "s", self.clock() - held.since,
                     _latest(held))
        return True

    def holding(self) -> set:
        """The keys of the conditions that hold now."""
        with self._lock:
            return set(self._holding)


def _latest(held: _Holding) -> str:
    return f" (latest: {held.last_detail})" if held.last_detail else ""
