"""When the silver query last committed: the detector query starts its evaluations there.

The detectors read silver, which commits a micro-batch every `pipeline.silver_trigger_s`
(10 s). An evaluation on its own clock (every `pipeline.detect_trigger_s`, 20 s) starts at
a random point between two commits, so telemetry that just closed a window waits on
average half the detector's interval (up to all of it) before an evaluation reads it. An
evaluation that starts right after a commit reads the freshest silver there is: the same
number of evaluations, and that wait is at most one silver interval (half of one on
average).

`SilverCommits.notice` is the pipeline's ``on_batch`` (called with one stats row per
stream at the end of each silver micro-batch, once its tables are written);
`wait_fresh` is what the detector query calls before each evaluation. Only the query
named `query` (the fast silver query, the one carrying request stages and broker logs)
counts: the slow one commits once a minute and no detector waits for it.

`written_since` tells the detector's window cache (evaluation/inputs/window_cache.py)
which windows to read again: per stream, the oldest event time (`low_ms` of the stats
rows, jobs/silver.py) of the rows committed after a mark it was given. The last
WRITTEN_KEPT stats rows are kept (hours of batches); a mark older than them is answered
"not known".
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Mapping

WRITTEN_KEPT = 10_000


class SilverCommits:
    def __init__(self, query: str = "silver", *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.query = query
        self._clock = clock
        self._cond = threading.Condition()
        self._batch: int | None = None       # the last batch id seen
        self._commits = 0
        self._at: float | None = None        # clock() of the last commit
        self._closed = False
        self._rows = 0                        # stats rows seen: the marks of written_since
        self._written: deque[tuple[int, str, int]] = deque()   # (row, stream, low_ms)
        self._forgotten = 0                   # the newest row no longer in _written

    @property
    def commits(self) -> int:
        """Micro-batches of `query` seen so far."""
        with self._cond:
            return self._commits

    def notice(self, stats: Mapping) -> None:
        """One stats row of a silver micro-batch (jobs/silver.py `on_batch`): a batch of
        several streams sends one per stream; the first of them counts."""
        if stats.get("query") != self.query:
            return
        with self._cond:
            self._rows += 1
            if stats.get("low_ms") is not None:
                if len(self._written) >= WRITTEN_KEPT:
                    self._forgotten = self._written.popleft()[0]
                self._written.append((self._rows, str(stats.get("stream")),
                                      int(stats["low_ms"])))
            if stats.get("batch_id") == self._batch:
                return
            self._batch = stats.get("batch_id")
            self._commits += 1
            self._at = self._clock()
            self._cond.notify_all()

    def wait_fresh(self, fresh_s: float, timeout_s: float) -> float:
        """Return at once when `query` committed within the last `fresh_s` seconds (or
        `close` was called), else when it commits next, or after `timeout_s` (no telemetry
        coming in: the detectors still evaluate, so findings resolve). Returns the seconds
        waited."""
        with self._cond:
            started = self._clock()
            if self._closed or (self._at is not None and started - self._at <= fresh_s):
                return 0.0
            seen = self._commits
            self._cond.wait_for(lambda: self._commits != seen or self._closed, timeout_s)
            return max(0.0, self._clock() - started)

    def written_since(self, mark: int | None) -> tuple[int, dict[str, int] | None]:
        """A mark for now, and per stream the oldest event time (ms) of the valid rows
        silver committed after `mark` (a mark this returned earlier); None instead of the
        dict when that is not known (no mark, or one older than the rows kept)."""
        with self._cond:
            now = self._rows
            if mark is None or mark < self._forgotten or mark > now:
                return now, None
            lows: dict[str, int] = {}
            for row, stream, low in reversed(self._written):
                if row <= mark:
                    break
                lows[stream] = min(low, lows.get(stream, low))
            return now, lows

    def close(self) -> None:
        """Stop waiting: a wait in progress returns now, later ones at once (shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
