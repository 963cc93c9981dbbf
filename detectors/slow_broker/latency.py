"""One definition of the request signals the detector and its read side share: an API's
name, the watched and purgatory APIs, the per-API threshold; and the read side's call
forms of three rules (rules.py), with which it chooses what to read."""

from __future__ import annotations

import functools

from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import RequestStageWindow

# APIs that wait in Remote time on purpose (fetch.max.wait.ms, rebalances): Kafka's own
# deliberate waits, not a site's choice, so their Remote time never counts as slowness.
PURGATORY_APIS = ("Fetch", "FetchConsumer", "FetchFollower", "JoinGroup", "SyncGroup")


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


def threshold_for(api: str, config: SlowBrokerSection) -> float:
    for name, ms in config.api_threshold_ms.items():
        if norm_api(name) == norm_api(api):
            return float(ms)
    return config.threshold_ms


# The read side's forms (jobs/detector_inputs/client_sends.py); rules.py imports this
# module, hence the imports inside.

def latency_ms(row: RequestStageWindow, config: SlowBrokerSection) -> float:
    from detectors.slow_broker.rules import judged_latency
    return judged_latency(row)


def has_enough_traffic(row: RequestStageWindow, config: SlowBrokerSection) -> bool:
    from detectors.slow_broker.rules import enough_traffic
    return enough_traffic(row.requests, config.min_requests_per_window)


def dominant_stage(row: RequestStageWindow, config: SlowBrokerSection
                   ) -> tuple[str | None, float]:
    from detectors.slow_broker import rules
    return rules.dominant_stage(row)
