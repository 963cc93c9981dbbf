"""The [slow_broker] configuration section: every key with its default and bounds. The
rules' other numbers are constants in the module of the rule that uses them, each with
its reason."""

from __future__ import annotations

from dataclasses import dataclass

from core.config_keys import ConfigError, _key
from core.signals import canonical_api


@dataclass(frozen=True)
class SlowBrokerSection:
    window_s: float = _key("Length of the judged windows; persistence_windows of them must "
                           "fit the 60-s detection target", 10.0, min=1, max=3600)
    min_requests_per_window: int = _key("Fewer requests make a TP99 of one request: such "
                                        "windows are pooled with the slow windows before "
                                        "them until they hold this many", 100, min=0,
                                        max=1_000_000_000)
    threshold_ms: float = _key("A judged latency TP99 at or under this is never slow, however "
                               "far above its usual", 300.0, min=1, max=600000)
    api_threshold_ms: dict = _key("Per-API thresholds overriding threshold_ms, e.g. "
                                  "{\"Metadata\" = 1000}", {})
    watched_apis: list = _key("APIs whose latency is judged (Kafka API names, any case, "
                              "underscores ignored; JMX's FetchConsumer and FetchFollower "
                              "are Fetch)",
                              ["Produce", "Fetch", "Metadata", "OffsetCommit", "OffsetFetch",
                               "ListOffsets"])
    history_ratio: float = _key("Slow against its own usual: judged latency >= this x the "
                                "broker's baseline for the API", 3.0, min=1, max=1000)
    peer_ratio: float = _key("Stands out from its peers: >= this x the median of the others "
                             "(brokers for an API, followers at one leader)", 3.0, min=1,
                             max=1000)
    persistence_windows: int = _key("A finding needs a verdict in this many of the last "
                                    "persistence_lookback_windows windows", 2, min=1,
                                    max=1000)
    persistence_lookback_windows: int = _key("Windows counted for persistence; cluster-wide "
                                             "needs all of them", 3, min=1, max=1000)
    shared_cause_share: float = _key("More than this share of the parties one thing serves "
                                     "slow at once blames that thing: most brokers, the "
                                     "cluster; most clients of a broker, its send path",
                                     0.5, min=0, max=1)
    broker_session_timeout_s: float = _key("The clusters' broker.session.timeout.ms, in "
                                           "seconds: a fenced broker went quiet at most this "
                                           "long before", 9.0, min=0.1, max=3600)
    disruption_grace_s: float = _key("How long after a known disruption ends its effects "
                                     "are expected: a broker back from an outage catches "
                                     "up this long, its own warm-up lasts 3x this, and a "
                                     "new leader waits for its followers 0.5x", 60.0, min=0,
                                     max=3600)

    def __post_init__(self) -> None:
        if self.persistence_windows > self.persistence_lookback_windows:
            raise ConfigError(
                f"slow_broker.persistence_windows ({self.persistence_windows}) must be <= "
                f"slow_broker.persistence_lookback_windows ({self.persistence_lookback_windows})")
        for api, ms in self.api_threshold_ms.items():
            if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
                raise ConfigError(f"slow_broker.api_threshold_ms.{api} must be a positive "
                                  f"number of milliseconds, got {ms!r}")
        # API names made canonical once, here: the rules and the reads compare exact names.
        watched = [canonical_api(a, "slow_broker.watched_apis") for a in self.watched_apis]
        thresholds: dict = {}
        for api, ms in self.api_threshold_ms.items():   # the first spelling of an API wins
            thresholds.setdefault(canonical_api(api, "slow_broker.api_threshold_ms"), ms)
        object.__setattr__(self, "watched_apis", list(dict.fromkeys(watched)))
        object.__setattr__(self, "api_threshold_ms", thresholds)

    @property
    def window_ms(self) -> int:
        return int(self.window_s * 1000)
