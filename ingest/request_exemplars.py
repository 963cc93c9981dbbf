"""Which requests of a window the request-log agent ships whole: the exemplars.

ingest/request_windows.py turns each broker's request log into per-window histograms; the
requests themselves stay at the edge, except a few per request key and window emission
that an on-call engineer (or a detector's diagnosis) needs to see whole:

- ``slow``: the judged latency at or over `ExemplarLimits.slow_ms` (300 ms), at most
  `slow_cap` (20) of them, a uniform sample of the slow ones when there are more; the
  judged latency is total_ms, or total_ms - remote_ms for an API that waits in Remote on
  purpose (core.signals.judged_ms: Fetch, JoinGroup, SyncGroup), as the slow-broker rule
  judges them;
- ``slowest``: the `slowest` (5) highest judged latencies, slow or not (a window with
  nothing over the threshold still shows its tail);
- ``error``: a response with a non-zero error code, at most `error_cap` (10), sampled the
  same way as the slow ones;
- ``sample``: one line in `sample_every` (1000), whatever it is: the baseline.

A request kept for several reasons is shipped once, with every reason
(``exemplar_reasons``, in that order).

Deterministic, so that a replay after a crash ships the same exemplars under the same ids
(silver drops the repeats): the capped samples are bottom-k samples (priority sampling, the
order-free form of reservoir sampling) whose random keys are a fixed hash of the line's
position (inode, byte offset); the 1-in-N sample is another hash of the position under a
cut. Ties among the slowest go to the earlier line. Nothing here depends on the order in
which lines arrive, on the clock or on a random generator's state.

The window record accounts for the selection: how many requests were over the threshold,
how many exemplars of each class were kept and, for the two capped classes, how many were
left out.

Why the judged latency: by total time, nearly every slow request is a consumer Fetch
long-poll, waiting in purgatory for data by design (maxWaitMs 500), and as exemplars they
would be most of the aggregator's output bytes (measured in docs/edge-aggregation.md).
acks=all Produce keeps its total: its Remote time is the wait for followers, real latency.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

REASONS = ("slow", "slowest", "error", "sample")
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1


@dataclass(frozen=True)
class ExemplarLimits:
    slow_ms: float = 300.0
    slow_cap: int = 20
    slowest: int = 5
    error_cap: int = 10
    sample_every: int = 1000

    def __post_init__(self):
        if self.sample_every < 1 or min(self.slow_cap, self.slowest, self.error_cap) < 0:
            raise ValueError(f"bad exemplar limits: {self}")

    @property
    def sample_cut(self) -> int:
        """`sample_hash(...) < sample_cut` picks one line in sample_every."""
        return (_MASK32 + 1) // self.sample_every


def sample_hash(inode: int, offset: int) -> int:
    """A 32-bit hash of a line position for the 1-in-N sample (multiplicative hashing: the
    high bits of the product, which the comparison with the cut reads, are well mixed)."""
    return ((offset + inode) * 2654435761) & _MASK32


def priority(inode: int, offset: int) -> int:
    """A 64-bit hash of a line position (splitmix64's finaliser): the random key of the
    bottom-k samples."""
    z = (offset * 0x9E3779B97F4A7C15 + inode) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class ExemplarPicker:
    """The exemplar candidates of one request key in one window emission.

    The aggregator calls `offer` only for a line that may be kept: slow, an error,
    sampled, or slower than the current `slowest_floor` (cheap tests it makes inline).
    """

    __slots__ = ("limits", "slow", "slow_seen", "slowest", "slowest_floor", "errors",
                 "errors_seen", "sampled")

    def __init__(self, limits: ExemplarLimits):
        self.limits = limits
        self.slow: list = []         # max-heap on priority: (-priority, pos, record)
        self.slow_seen = 0
        self.slowest: list = []      # min-heap: (judged ms, -pos, record)
        self.slowest_floor = -1.0 if limits.slowest else float("inf")
        self.errors: list = []
        self.errors_seen = 0
        self.sampled: list = []      # (pos, record)

    def offer(self, rec: dict, pos: int, inode: int, offset: int, total: float,
              error: bool, sampled: bool) -> None:
        lim = self.limits
        if total >= lim.slow_ms:
            self.slow_seen += 1
            _bottom_k(self.slow, lim.slow_cap, priority(inode, offset), pos, rec)
        if error:
            self.errors_seen += 1
            _bottom_k(self.errors, lim.error_cap, priority(inode, offset), pos, rec)
        if sampled:
            self.sampled.append((pos, rec))
        if total > self.slowest_floor:
            item = (total, -pos, rec)
            if len(self.slowest) < lim.slowest:
                heapq.heappush(self.slowest, item)
            else:
                heapq.heapreplace(self.slowest, item)
            if len(self.slowest) == lim.slowest:
                self.slowest_floor = self.slowest[0][0]

    def pick(self) -> tuple[list[tuple[int, dict, list[str]]], dict]:
        """The exemplars in line order as (pos, record, reasons), and the accounting."""
        chosen: dict[int, tuple[dict, list[str]]] = {}
        for reason, items in (("slow", [(p, r) for _, p, r in self.slow]),
                              ("slowest", [(-p, r) for _, p, r in self.slowest]),
                              ("error", [(p, r) for _, p, r in self.errors]),
                              ("sample", self.sampled)):
            for p, r in items:
                chosen.setdefault(p, (r, []))[1].append(reason)
        accounting = {
            "over_threshold": self.slow_seen,
            "exemplars_slow": len(self.slow),
            "exemplars_slow_left_out": self.slow_seen - len(self.slow),
            "exemplars_slowest": len(self.slowest),
            "exemplars_error": len(self.errors),
            "exemplars_error_left_out": self.errors_seen - len(self.errors),
            "exemplars_sample": len(self.sampled),
            "exemplars": len(chosen),
        }
        return [(p, r, reasons) for p, (r, reasons) in sorted(chosen.items())], accounting


def _bottom_k(heap: list, cap: int, prio: int, pos: int, rec: dict) -> None:
    """Keep the `cap` lines of lowest priority hash (a uniform sample without replacement
    that does not depend on the order lines come in)."""
    if len(heap) < cap:
        heapq.heappush(heap, (-prio, pos, rec))
    elif cap and prio < -heap[0][0]:
        heapq.heapreplace(heap, (-prio, pos, rec))
