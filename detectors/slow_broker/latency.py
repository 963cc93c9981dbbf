"""Rules 1-5 on one broker/API/window: traffic, latency (outside purgatory), threshold,
history, peers; and the dominant stage that rule 6 attributes."""

from __future__ import annotations

import bisect
import functools
import statistics
from typing import Sequence

from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import STAGES, RequestStageWindow

# A baseline or peer median below this is treated as this: ratios to ~0 ms mean nothing.
MIN_REFERENCE_MS = 1.0
# APIs that wait in Remote time on purpose (fetch.max.wait.ms, rebalances): Kafka's own
# deliberate waits, not a site's choice, so their Remote time never counts as slowness.
PURGATORY_APIS = ("Fetch", "FetchConsumer", "FetchFollower", "JoinGroup", "SyncGroup")
# A quiet window is pooled with at most this many windows in all (one minute at 10-s
# windows): an older pool no longer describes now.
POOL_WINDOWS = 6
# Other brokers with traffic needed for the peer comparison: a median of one peer is that
# peer.
MIN_PEERS = 2


@functools.lru_cache(maxsize=1024)
def norm_api(api: str) -> str:
    """"FetchConsumer", "FETCH_CONSUMER" and "fetchconsumer" are one API."""
    return api.replace("_", "").lower()


@functools.lru_cache(maxsize=64)
def norm_api_set(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(norm_api(a) for a in names)


def is_watched(api: str, config: SlowBrokerSection) -> bool:
    return norm_api(api) in norm_api_set(tuple(config.watched_apis))


def waits_in_purgatory(api: str) -> bool:
    """APIs whose Remote time is a deliberate wait (fetch.max.wait.ms, rebalances)."""
    return norm_api(api) in norm_api_set(PURGATORY_APIS)


def latency_ms(row: RequestStageWindow, config: SlowBrokerSection) -> float:
    """TotalTime TP99, without the purgatory wait for the APIs that wait on purpose."""
    if not waits_in_purgatory(row.api):
        return row.total_p99_ms
    if row.total_excl_remote_p99_ms is not None:
        return row.total_excl_remote_p99_ms
    own_stages = [row.stage_p99(s) for s in STAGES if s != "remote"]
    return max(row.total_p99_ms - row.remote_p99_ms, *own_stages, 0.0)


def has_enough_traffic(row: RequestStageWindow, config: SlowBrokerSection) -> bool:
    """Enough requests in the window for a p99 to mean something: at least
    min_requests_per_window (with fewer than 100, the TP99 is the window's slowest
    request)."""
    return enough_requests(row.requests, 1, config)


def enough_requests(requests: int, windows: int, config: SlowBrokerSection,
                    floor: int | None = None) -> bool:
    """`has_enough_traffic` for `requests` over `windows` consecutive windows; with
    `floor`, at least that many requests instead (rule 1b's CORROBORATED_MIN_REQUESTS)."""
    if floor is not None:
        return requests >= floor
    return requests >= config.min_requests_per_window


def pooled_traffic(requests: int, latency: float, threshold: float,
                   earlier: Sequence[tuple[int, float] | None],
                   config: SlowBrokerSection,
                   floor: int | None = None) -> tuple[int, int, float] | None:
    """A window with too few requests to judge alone, pooled with the windows before it.

    `earlier`: (requests, latency) of the same broker/API in the windows just before,
    newest first, None where it had no row. Pools this window (over `threshold`) with
    the consecutive earlier ones over the threshold too, up to POOL_WINDOWS
    in all, until they hold enough requests together; returns (windows, requests, the
    least latency of the pool), or None when they never do.

    The least latency is a lower bound of the pooled TP99: at least 1% of every window's
    requests took its own TP99 or longer, so at least 1% of the pool took the least of
    them or longer. A broker is judged on real requests, never on one slow one: a window
    under the threshold, or with no row, ends the pool.
    """
    if latency <= threshold:
        return None
    windows, total, least = 1, requests, latency
    for prior in earlier[:POOL_WINDOWS - 1]:
        if enough_requests(total, windows, config, floor):
            break
        if prior is None or prior[1] <= threshold:
            return None
        windows, total, least = windows + 1, total + prior[0], min(least, prior[1])
    return (windows, total, least) if enough_requests(total, windows, config, floor) else None


def threshold_for(api: str, config: SlowBrokerSection) -> float:
    for name, ms in config.api_threshold_ms.items():
        if norm_api(name) == norm_api(api):
            return float(ms)
    return config.threshold_ms


def is_over_threshold(latency: float, threshold: float) -> bool:
    """Above the absolute floor below which no latency is a problem."""
    return latency > threshold


def is_slow_vs_history(latency: float, baseline: float | None, config: SlowBrokerSection) -> bool:
    """Far above the broker's own usual latency for this API."""
    return baseline is not None and latency >= config.history_ratio * max(baseline,
                                                                          MIN_REFERENCE_MS)


def is_slow_vs_peers(latency: float, peer_median: float | None, config: SlowBrokerSection) -> bool:
    """Far above the other brokers' latency for the same API in the same window."""
    return peer_median is not None and latency >= config.peer_ratio * max(peer_median,
                                                                         MIN_REFERENCE_MS)


def dominant_stage(row: RequestStageWindow, config: SlowBrokerSection) -> tuple[str | None, float]:
    """The stage with the largest p99, and its share of the stage p99s considered."""
    stages = [s for s in STAGES if not (s == "remote" and waits_in_purgatory(row.api))]
    values = {s: row.stage_p99(s) for s in stages}
    total = sum(values.values())
    if total <= 0:
        return None, 0.0
    stage = max(stages, key=lambda s: values[s])  # ties: the earlier stage in the request path
    return stage, values[stage] / total


def median_without(sorted_values: Sequence[float], value: float) -> float | None:
    """The median of a sorted list with one occurrence of `value` left out, in O(log n)
    (a 2,000-broker cluster would make the obvious way quadratic)."""
    i = bisect.bisect_left(sorted_values, value)
    m = len(sorted_values) - 1
    if m <= 0:
        return None

    def kth(k: int) -> float:
        return sorted_values[k] if k < i else sorted_values[k + 1]

    return kth(m // 2) if m % 2 else (kth(m // 2 - 1) + kth(m // 2)) / 2


def peer_median(latencies: Sequence[float], own: float | None,
                config: SlowBrokerSection) -> float | None:
    """Median latency of the other brokers with traffic (sorted `latencies` include this
    broker's `own` when it has traffic), when there are at least MIN_PEERS of them."""
    peers = len(latencies) - (own is not None)
    if peers < MIN_PEERS:
        return None
    return median_without(latencies, own) if own is not None else statistics.median(latencies)
