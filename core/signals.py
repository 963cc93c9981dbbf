"""The request signals the edge agents, the detectors and their read side share, each
defined once here (core/signals_sql.py generates their SQL forms from these).

- An API's name: the request log's (core/kafka_apis.py), the only one any table holds. A
  configuration may spell it otherwise ("FETCH_CONSUMER", "fetch", JMX's FetchConsumer);
  `canonical_api` maps a spelling to the name once, when the configuration is read, so
  every comparison after that is of exact strings.
- A request's stages, and which of them are the broker's own time.
- The purgatory APIs, the replicated writes, and a request's judged latency (`judged_ms`).
- An API's slow threshold (`threshold_for`).
"""

from __future__ import annotations

from typing import Mapping

from core.config_keys import ConfigError
from core.kafka_apis import API_NAMES

# A request's stages in the order it passes them (the request log's and JMX's times), and
# their JMX names; the windows also hold the total and the judged own time beside them.
STAGES = ("request_queue", "local", "remote", "throttle", "response_queue", "send")
STAGE_NAMES = {"request_queue": "RequestQueue", "local": "Local", "remote": "Remote",
               "throttle": "Throttle", "response_queue": "ResponseQueue", "send": "ResponseSend"}
# A broker's own stages: slow there, the broker (or its host) is slow.
OWN_STAGES = ("request_queue", "local", "response_queue")
# APIs whose Remote time is a deliberate wait, not the broker's work: a Fetch waits until
# fetch.min.bytes arrive or fetch.max.wait.ms runs out, a JoinGroup or SyncGroup until the
# rebalance completes. Kafka's own waits, not a site's choice, hence no configuration key.
PURGATORY_APIS = frozenset({"Fetch", "JoinGroup", "SyncGroup"})
# APIs whose Remote time waits for the followers to copy a write (acks=all): Produce, and
# the offset commits the group coordinator appends to __consumer_offsets.
REPLICATED_WRITE_APIS = frozenset({"Produce", "OffsetCommit", "TxnOffsetCommit"})


def _spelling(name: str) -> str:
    return name.replace("_", "").lower()


# Every spelling's canonical name; JMX splits Fetch by who fetches, the request log not.
_CANONICAL = {**{_spelling(n): n for n in API_NAMES.values()},
              "fetchconsumer": "Fetch", "fetchfollower": "Fetch"}


def canonical_api(name: str, key: str) -> str:
    """The request-log name of an API as a configuration spells it (case and underscores
    ignored; JMX's FetchConsumer and FetchFollower are Fetch). `key`: the configuration
    key that holds the name, which a `ConfigError` for an unknown API names."""
    canonical = _CANONICAL.get(_spelling(name)) if isinstance(name, str) else None
    if canonical is None:
        raise ConfigError(f"key '{key}': {name!r} is not a Kafka API name (the request "
                          "log's, e.g. Produce, Fetch, Metadata, OffsetCommit)")
    return canonical


def waits_in_purgatory(api: str) -> bool:
    """Whether the API's Remote time is a deliberate wait (PURGATORY_APIS)."""
    return api in PURGATORY_APIS


def judged_ms(api: str, total_ms: float, remote_ms: float | None) -> float:
    """One request's judged latency: its total time, without Remote for a purgatory API,
    whose wait measures the absence of data, not the broker (floored at 0, the two being
    timed apart; a missing Remote counts as 0)."""
    if api in PURGATORY_APIS:
        own = total_ms - (remote_ms or 0.0)
        return own if own > 0.0 else 0.0
    return total_ms


def threshold_for(api: str, default_ms: float, per_api: Mapping[str, float]) -> float:
    """The API's slow threshold: its own (`per_api`, by canonical name), else the default."""
    return float(per_api.get(api, default_ms))
