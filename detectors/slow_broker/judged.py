"""Windows judged once: what `assess_windows` carries from one evaluation to the next.

An evaluation judges the windows of its range in order, each with the rules' history of
the windows before it (rules.History) and the followers seen fetching lately. From one
evaluation to the next only the newest windows' inputs change: the read side keeps the
older windows' rows as the same objects (evaluation/inputs/window_cache.py). So a window
whose inputs are what they were when it was judged, after windows all kept too, keeps
its assessment; the first window that differs and every later one are judged again from
the state as it was before it. A window is judged with the history of the range it was
first judged in, instead of again with less history as the range moves on.

A window's inputs are its rows, follower fetches, client sends and the held requests
that could overlap it (compared by identity, since the entry keeps them), and its ISR
shrinks and known disruptions (by value: they are derived again each evaluation). The
baselines are not among them: a window keeps the baseline it was judged against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from detectors.slow_broker.rules import History
from detectors.slow_broker.verdicts import WindowAssessment


@dataclass
class Judged:
    """One window's assessment, the inputs it was judged on (kept alive, so that their
    ids stay theirs) and what it changed in the followers seen (to undo it)."""
    inputs: tuple[Sequence[Any], ...]
    values: tuple
    assessment: WindowAssessment
    seen_before: list[tuple[int, int, int | None]]

    def same(self, inputs: tuple[Sequence[Any], ...], values: tuple) -> bool:
        return (values == self.values and len(inputs) == len(self.inputs)
                and all(len(a) == len(b) and all(x is y for x, y in zip(a, b))
                        for a, b in zip(inputs, self.inputs)))


@dataclass
class ClusterJudgements:
    """One cluster's rules state after the windows in `windows` (oldest first)."""
    settings: Any = None
    history: History = field(default_factory=History)
    last_seen: dict[int, dict[int, int]] = field(default_factory=dict)
    windows: dict[int, Judged] = field(default_factory=dict)
    oldest_ms: int | None = None
    judged_last: int = 0   # windows judged (not kept) by the last evaluation

    def drop_before(self, start_ms: int) -> None:
        """Forget the windows before the range (their effects stay in the history for the
        windows kept; the history itself keeps only what is in the range)."""
        self.oldest_ms = start_ms
        for s in [s for s in self.windows if s < start_ms]:
            del self.windows[s]
        self.history.drop_before(start_ms)
        for followers in self.last_seen.values():
            for f in [f for f, t in followers.items() if t < start_ms]:
                del followers[f]

    def forget_from(self, start_ms: int) -> None:
        """Undo the windows from start_ms on, newest first."""
        for s in sorted((s for s in self.windows if s >= start_ms), reverse=True):
            for leader, follower, before in reversed(self.windows.pop(s).seen_before):
                if before is None or (self.oldest_ms is not None and before < self.oldest_ms):
                    self.last_seen.get(leader, {}).pop(follower, None)
                else:
                    self.last_seen.setdefault(leader, {})[follower] = before
        self.history.forget_from(start_ms)

    def see(self, fetches: Sequence[Any], start_ms: int) -> list[tuple[int, int, int | None]]:
        """Record the window's follower fetches as the latest sightings; returns the undo."""
        undo = []
        for f in fetches:
            followers = self.last_seen.setdefault(f.leader, {})
            undo.append((f.leader, f.follower, followers.get(f.follower)))
            followers[f.follower] = start_ms
        return undo


class JudgedWindows:
    """Per cluster, the windows judged so far and the rules state after them; held by
    whoever evaluates the detector again and again (the detector query, a replay)."""

    def __init__(self) -> None:
        self._clusters: dict[str, ClusterJudgements] = {}

    def cluster(self, name: str, settings: Any, oldest_ms: int) -> ClusterJudgements:
        """The cluster's state for a range whose oldest window is oldest_ms; a new one when
        the settings changed."""
        c = self._clusters.get(name)
        if c is None or c.settings != settings:
            c = self._clusters[name] = ClusterJudgements(settings)
        c.drop_before(oldest_ms)
        return c

    def clear(self) -> None:
        self._clusters.clear()

    def judged_last(self) -> int:
        """Windows judged (not kept) by the last evaluation, over every cluster."""
        return sum(c.judged_last for c in self._clusters.values())
