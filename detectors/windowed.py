"""What the detectors that judge fixed windows share (slow brokers, slow clients): their
inputs grouped by cluster and window, the recent windows persistence weighs, and a finding
over the windows it was flagged in. `config` is the [slow_broker] section, whose window
and persistence keys both use."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence, TypeVar

from core.findings import Detection

Windowed = TypeVar("Windowed")


def by_cluster_window(items: Iterable[Windowed]) -> dict[tuple[str, int], list[Windowed]]:
    grouped: dict[tuple[str, int], list[Windowed]] = defaultdict(list)
    for x in items:
        grouped[(x.cluster, x.window_start_ms)].append(x)
    return grouped


def recent_windows(assessed: Sequence, config) -> dict[str, list[int]]:
    """Per cluster, the starts of the last persistence_lookback_windows windows of the grid
    ending at its latest assessed window (a window with no rows counts, as clear)."""
    latest: dict[str, int] = {}
    for a in assessed:
        latest[a.cluster] = max(latest.get(a.cluster, a.window_start_ms), a.window_start_ms)
    n = config.persistence_lookback_windows
    return {c: [end - k * config.window_ms for k in range(n - 1, -1, -1)]
            for c, end in latest.items()}


def finding(cluster: str, flagged: list[int], config, evidence: dict,
            **detection) -> Detection:
    """A finding over its flagged windows, its evidence ending with the persistence it met."""
    return Detection(cluster=cluster, first_seen_ms=min(flagged),
                     last_seen_ms=max(flagged) + config.window_ms,
                     evidence={**evidence, "window_s": config.window_s,
                               "windows_flagged": len(flagged),
                               "windows_considered": config.persistence_lookback_windows},
                     **detection)
