"""Incremental window reads for the live detector.

Each evaluation judges the windows of [now - lookback, now) (300 s: 30 windows of 10 s).
Every one of them is a merge of histogram rows (per broker and request key). From one
evaluation to the next, 10 s later, only the newest windows change: a window row exists
once the agent closed the window, and the later rows of an old window are late deltas. At
2,000 brokers a window is about 13,000 histogram rows, so merging all 30 on every
evaluation was most of its time (bench/bench_fleet.py).

`WindowReadCache` keeps, per read, the merged result of each window it has read, and on
the next evaluation reads again only the windows that start at or after ``end -
reread_s`` (aligned down to a window boundary); the older windows of the range come from
the cache. So a window is merged again for `reread_s` after it closed (the agent's
lateness, its delivery and silver's batch are well inside the default 60 s), then kept
as it was. When the pipeline falls behind, a cluster's newest window in the last read is
older than that: the read starts again at that window, so a window that closed late (its
rows reached silver late) is still read once it is there.

What it costs: a late delta or row that reaches silver more than `reread_s` after its
window started, while newer windows of its cluster were already read (one broker's
agent behind the others), is not in the live detector's view of that window (it is in
silver, gold and the report; the agent sends deltas only for lines later than its own
`request_log.lateness_s`, 2 s by default). A range that is not the continuation of the
last one (a restart, a clock jump, a gap of more than `reread_s` between evaluations,
another window length) is read whole. The corpus replays (`kmon matrix replay`, the
corpus tests) step through each recording with a cache of their own, as the live
detector does.

When the silver query runs in the same process (`kmon run`), the cache need not guess:
`written` (jobs/silver_commits.py `SilverCommits.written_since`) tells, per stream, the
oldest event time of the rows silver committed since the cache's last read, and a read
given its `stream` reads again from that row's window (or from the last range's end,
when nothing older was written), however late the rows came: a broker's agent minutes
behind the others, a late delta, an evaluation that took longer than `reread_s`. At 2,000
brokers this reads the one or two windows silver wrote since the last evaluation instead
of six (bench/bench_detect_eval.py `--reread`). Without it (replays, `kmon detect`) the
margin above applies.
"""

from __future__ import annotations

import threading
from typing import Callable, Mapping, Sequence, TypeVar

from evaluation.inputs.tables import TimeRange

T = TypeVar("T")

DEFAULT_REREAD_S = 60.0

# written(mark) -> (a mark for now, per stream the oldest event ms silver wrote after
# `mark`, or None when that is not known)
Written = Callable[[int | None], tuple[int, Mapping[str, int] | None]]


class WindowReadCache:
    """Per read name, the merged rows of the windows read so far (items with a
    `window_start_ms`), and the range they cover."""

    def __init__(self, reread_s: float = DEFAULT_REREAD_S, written: Written | None = None):
        if reread_s <= 0:
            raise ValueError(f"reread_s must be > 0, not {reread_s!r}")
        self.reread_ms = int(reread_s * 1000)
        self.written = written
        self._lock = threading.Lock()          # the reads run in parallel threads
        # per read: the range it covered, the window length, its items, the `written` mark
        self._kept: dict[str, tuple[TimeRange, int, list, int | None]] = {}
        self.windows_read: dict[str, int] = {}  # per read, the range ms read last time

    def read(self, name: str, r: TimeRange, window_ms: int,
             read_range: Callable[[TimeRange], Sequence[T]],
             time_of: Callable[[T], int] = lambda x: x.window_start_ms,
             reread_ms: int | None = None, stream: str | None = None) -> list[T]:
        """The items of windows in `r` (as `read_range(r)` would give them), reading only
        the part of `r` that the cache cannot answer. `time_of(item)`: the time that puts
        an item in a window (its window's start by default; a row's own time for reads
        of rows, whose `window_ms` only aligns what is read again); `reread_ms`: this
        read's own margin (the cache's by default); `stream`: the silver stream whose
        table the read reads, for `written`."""
        reread = self.reread_ms if reread_ms is None else reread_ms
        fresh_from = max(r.start_ms, (r.end_ms - reread) // window_ms * window_ms)
        with self._lock:
            kept = self._kept.get(name)
        mark, lows = None, None
        if self.written is not None and stream is not None:
            # before the read: rows committed after this are read next time
            mark, lows = self.written(kept[3] if kept is not None else None)
        if kept is not None:
            covered, kept_window_ms, items, _ = kept
            if (kept_window_ms != window_ms or covered.start_ms > r.start_ms
                    or covered.end_ms > r.end_ms
                    or (lows is None and covered.end_ms < fresh_from)):
                kept = None
            elif lows is not None:
                # what silver wrote since: from its oldest row's window, and the windows
                # the last range did not hold whole
                fresh_from = covered.end_ms // window_ms * window_ms
                if lows.get(stream) is not None:
                    fresh_from = min(fresh_from, lows[stream] // window_ms * window_ms)
                fresh_from = max(r.start_ms, fresh_from)
            else:
                fresh_from = max(r.start_ms, min(fresh_from, _behind(items, time_of, window_ms)))
        if kept is None or fresh_from == r.start_ms:
            fresh_from = r.start_ms
            old: list[T] = []
        else:
            old = [x for x in kept[2] if r.start_ms <= time_of(x) < fresh_from]
        new = list(read_range(TimeRange(fresh_from, r.end_ms))) if fresh_from < r.end_ms else []
        out = old + new
        with self._lock:
            self._kept[name] = (r, window_ms, out, mark)
            self.windows_read[name] = r.end_ms - fresh_from
        return out


def _behind(items: Sequence[T], time_of: Callable[[T], int], window_ms: int) -> float:
    """The start of the window of the newest item of the cluster whose newest item is
    oldest (its later windows were not there yet when they were read, and rows of that
    window may still come); +inf without items."""
    newest: dict[object, int] = {}
    for x in items:
        cluster, t = getattr(x, "cluster", None), time_of(x)
        if t > newest.get(cluster, t - 1):
            newest[cluster] = t
    if not newest:
        return float("inf")
    return min(newest.values()) // window_ms * window_ms
