"""Rule 6b, a stall the brokers share: a suspect row slow in the broker's own stages is no
one's when, for each request it held over the threshold (of those kept whole), most
other brokers held one under way at the same time at least 1/peer_ratio as long: rule 5
at the instant (a hypervisor or storage pause). It counts toward cluster-wide only."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import replace
from typing import AbstractSet, Iterable, Sequence

from detectors.explaining_away import most_of
from detectors.slow_broker.config import SlowBrokerSection
from core.signals import OWN_STAGES
from detectors.slow_broker.inputs import HeldRequest
from detectors.slow_broker.verdicts import ApiVerdict


def _end(h: HeldRequest) -> int:
    return h.end_ms


class Holds:
    """One cluster's held requests, per broker in the order they ended."""

    def __init__(self, held: Iterable[HeldRequest]):
        by_broker: dict[int, list[HeldRequest]] = defaultdict(list)
        for h in held:
            by_broker[h.broker].append(h)
        self._held = {b: sorted(hs, key=_end) for b, hs in by_broker.items()}
        self._longest = {b: max(h.total_ms for h in hs) for b, hs in self._held.items()}

    def could_overlap(self, start_ms: int, end_ms: int) -> list[HeldRequest]:
        """Every request a stall ending in [start_ms, end_ms) could be compared with: those
        under way at some time from the longest hold before start_ms to end_ms."""
        reach = max(self._longest.values(), default=0.0)
        return [h for held in self._held.values()
                for h in held[bisect.bisect_left(held, start_ms - reach, key=_end):
                              bisect.bisect_left(held, end_ms + reach, key=_end)]
                if h.start_ms < end_ms]

    def ended(self, broker: int, start_ms: int, end_ms: int) -> list[HeldRequest]:
        """The broker's requests that ended in [start_ms, end_ms)."""
        held = self._held.get(broker, [])
        return held[bisect.bisect_left(held, start_ms, key=_end):
                    bisect.bisect_left(held, end_ms, key=_end)]

    def longest_during(self, broker: int, start_ms: float, end_ms: float) -> float:
        """The broker's longest hold among its requests under way at some time of
        [start_ms, end_ms]; 0 when none was kept."""
        reach = self._longest.get(broker, 0.0)
        return max((h.held_ms for h in self.ended(broker, int(start_ms), int(end_ms + reach) + 1)
                    if h.start_ms <= end_ms), default=0.0)


def shared(v: ApiVerdict, holds: Holds, peers: AbstractSet[int],
           config: SlowBrokerSection) -> bool:
    """Whether every request the row's broker held over the threshold in its window was
    held while most other brokers in `peers` held theirs about as long."""
    start = v.row.window_start_ms
    stalls = [h for h in holds.ended(v.row.broker, start, start + config.window_ms)
              if h.api == v.row.api and h.held_ms > v.threshold_ms]
    others = peers - {v.row.broker}
    return bool(stalls) and all(most_of(sum(
        holds.longest_during(p, s.start_ms, s.end_ms) * config.peer_ratio >= s.held_ms
        for p in others), len(others), config.shared_cause_share) for s in stalls)


def set_aside_shared_stalls(verdicts: Sequence[ApiVerdict], holds: Holds | None,
                            peers: AbstractSet[int],
                            config: SlowBrokerSection) -> list[ApiVerdict]:
    """Rule 6b on one window's verdicts (`peers`: its brokers with traffic)."""
    if holds is None:
        return list(verdicts)
    return [replace(v, shared_stall=True) if v.over_threshold and v.suspect
            and v.dominant_stage in OWN_STAGES and shared(v, holds, peers, config)
            else v for v in verdicts]
