"""The [slow_broker] configuration section: every key with its default and bounds."""

from __future__ import annotations

from dataclasses import dataclass

from core.config_keys import ConfigError, _key


@dataclass(frozen=True)
class SlowBrokerSection:
    window_s: float = _key("Length of the request-stage windows the detector is given; keep it "
                           "short enough for persistence_windows of them to fit the detection "
                           "target", 10.0, min=1, max=3600)
    window_close_slack_s: float = _key("A window the lake has not closed yet (computed from "
                                       "silver.request_stages) counts as closed once every "
                                       "broker of its cluster has its newest row this far "
                                       "past its end: each broker logs its requests in time "
                                       "order. At the latest "
                                       "it closes pipeline.fast_watermark_s after the newest "
                                       "row of any broker (a broker that stopped logging "
                                       "holds no window back longer)", 1.0, min=0, max=3600)
    min_requests_per_minute: float = _key("A broker/API with fewer requests (scaled to the "
                                          "window) is ignored in that window", 50.0, min=0,
                                          max=1e9)
    min_requests_per_window: int = _key("A broker/API with fewer requests than this in a "
                                        "window is ignored in it, whatever the window's "
                                        "length: below 100 requests a TP99 is the slowest "
                                        "request alone, and one slow request is not a slow "
                                        "broker", 100, min=0, max=1_000_000_000)
    low_traffic_pool_windows: int = _key(
        "A broker/API window with too few requests to judge alone, over its threshold, is "
        "judged with the consecutive windows before it that were over the threshold too, "
        "up to this many windows in all, once they hold enough requests together (the "
        "least of their TP99s is a lower bound of the pooled TP99). Clients wait for their "
        "answers, so a slow broker cuts its own request rate: leaders held back 1-1.6 s by "
        "a delayed follower served too few Produce requests a window to be judged. "
        "1 = every window alone", 6, min=1, max=1000)
    corroborated_min_requests: int = _key(
        "An acks=all write (Produce, OffsetCommit) too quiet to judge alone or pooled, over "
        "its threshold and waiting in Remote on a follower that is late at the other "
        "leaders it follows too, is judged once it (pooled the same way) holds this many "
        "requests (rule 1b): the follower's fetches are the evidence, and the leader's "
        "requests only show that writes waited for it (freeze-short-5b: leaders serving "
        "~26 Produce requests a window waited for four windows to pool 100). 0 = never",
        20, min=0, max=1_000_000_000)
    threshold_ms: float = _key("Latency TP99 above which a broker/API can be slow", 300.0,
                               min=1, max=600000)
    api_threshold_ms: dict = _key("Per-API thresholds overriding threshold_ms, e.g. "
                                  "{\"Metadata\" = 1000}", {})
    watched_apis: list = _key("APIs whose latency is judged (JMX names)",
                              ["Produce", "Fetch", "FetchConsumer", "FetchFollower", "Metadata",
                               "OffsetCommit", "OffsetFetch", "ListOffsets"])
    purgatory_apis: list = _key("APIs that wait in Remote time on purpose (fetch.max.wait.ms, "
                                "rebalances): their Remote time never counts as slowness",
                                ["Fetch", "FetchConsumer", "FetchFollower", "JoinGroup",
                                 "SyncGroup"])
    history_ratio: float = _key("Slow against its own history: latency >= this x its baseline",
                                3.0, min=1, max=1000)
    corroborated_history_ratio: float = _key(
        "An acks=all write waiting on a follower that is late at the other leaders it follows "
        "too is slow against its history from this x its baseline (rule 4b)", 1.5, min=1,
        max=1000)
    min_history_windows: int = _key("Earlier healthy windows needed before the in-input "
                                    "baseline is trusted", 6, min=1, max=100000)
    peer_ratio: float = _key("Slow against its peers: latency >= this x the other brokers' "
                             "median for the same API and window", 3.0, min=1, max=1000)
    min_peers: int = _key("Other brokers with traffic needed for the peer comparison", 2,
                          min=1, max=100000)
    persistence_windows: int = _key("Windows with a verdict needed (out of "
                                    "persistence_lookback_windows) to detect; a verdict on "
                                    "quiet windows pooled together (low_traffic_pool_windows) "
                                    "counts for each of them when pooled_persistence_ratio "
                                    "holds", 2, min=1,
                                    max=1000)
    pooled_persistence_ratio: float = _key(
        "A verdict on quiet windows pooled together counts for persistence in each of them "
        "when its latency (the least TP99 of the pool: every pooled window had a request at "
        "least that slow) is at least this many times the threshold; under it, a TP99 of a "
        "few dozen requests is one request at the edge, and the verdict counts for its own "
        "window only (controller-failover-5b: the new active controller's pooled Produce "
        "at 365 ms, 1.2x, is not a page; delayed-broker-5b's leaders at 1,000 ms are)",
        2.0, min=1, max=1000)
    persistence_lookback_windows: int = _key("The last this many windows are counted for "
                                             "persistence", 3, min=1, max=1000)
    cluster_wide_share: float = _key("More than this share of the brokers with traffic blamed "
                                     "in one window is one cluster-wide event", 0.5, min=0,
                                     max=1)
    cluster_wide_persistence_windows: int = _key(
        "Windows with a cluster-wide verdict needed (out of persistence_lookback_windows) to "
        "detect cluster_wide_slowness: it names no broker and no action, so it pages when it "
        "holds, not for a host's stall of two windows (seen in the matrix's healthy runs on "
        "a loaded 2-core host)", 3, min=1, max=1000)
    cluster_wide_min_brokers: int = _key("Fewest blamed brokers that can make a cluster-wide "
                                         "event", 2, min=1, max=100000)
    quiet_slow_min_requests: int = _key(
        "A broker/API window with too few requests to be judged (min_requests_per_window), "
        "but at least this many, over its threshold, slow against its own history and slow "
        "in its own stages (a queue or Local, not Remote, Throttle or ResponseSend) counts as "
        "slow in the cluster-wide judgement though it is blamed for nothing: a stall of the "
        "host or of the cluster slows every broker and cuts the quieter ones' traffic below "
        "the floor, leaving the busiest one alone to blame (throttled-cleaner-3b live: broker "
        "1 called network_threads_saturated while broker 2, at 65 Fetch a window, was as "
        "slow). 0: only judged brokers count", 50, min=0, max=1_000_000_000)
    follower_holdback_floor_ms: float = _key("A follower that leaves its leader waiting this "
                                             "long (longest gap between its fetches) is late",
                                             1000.0, min=1, max=600000)
    follower_ratio: float = _key("A follower late at one leader and seen by no other is blamed "
                                 "when it is this many times later than the leader's other "
                                 "followers", 3.0, min=1, max=1000)
    follower_worst_ratio: float = _key(
        "A follower that at every leader it follows (two at least) holds it back past "
        "threshold_ms and this many times longer than any of that leader's other followers "
        "is late everywhere, under the holdback floor and under follower_ratio: the one "
        "follower every leader waits on (freeze-short-3b live: broker 2 frozen 0.7 s of "
        "every second held leaders 1 and 3 back 694-752 ms while a loaded host kept their "
        "other followers at 170-374 ms, under follower_ratio at one leader of two). "
        "0 = off", 1.5, min=0, max=1000)
    follower_worst_min_ms: float = _key(
        "follower_worst_ratio names a follower only when it held every leader it follows "
        "back at least this long (and past threshold_ms): a loaded host lifts one follower "
        "to 340-560 ms at both its leaders now and then, 1.5-8x the other follower there "
        "(the 3-broker live matrix of 20261201T195748Z, before and after its freezes: "
        "brokers 1 and 3 paged as slow followers), while one frozen 0.7 s of every second "
        "holds them back 690-1,070 ms", 500.0, min=0, max=600000)
    slow_client_share: float = _key("Slow ResponseSend is blamed on the slow clients when they "
                                    "are at most this share of the broker's clients", 0.5,
                                    min=0, max=1)
    link_queued_share: float = _key("A producer is not judged for a slow link at a broker in "
                                    "a window when at least this share of its Produce "
                                    "requests there had waited in the socket behind the one "
                                    "before (its median round trip then holds a wait the "
                                    "broker's TotalTime does not)", 0.5, min=0.05, max=1)
    max_named_clients: int = _key("Clients named in a client_slow_read finding", 5, min=1,
                                  max=1000)
    client_min_slow_requests: int = _key("A client is slow in a window when at least this "
                                         "many of its requests of one API were slow to send "
                                         "(ResponseSend >= the API's threshold): one slow "
                                         "request is a hiccup (a pause, a retransmit), not a "
                                         "slow reader", 2, min=1, max=1_000_000)
    client_slow_request_share: float = _key("A client is slow in a window only when at least "
                                            "this share of its requests of one API were slow "
                                            "to send too: a busy client with two slow fetches "
                                            "among hundreds reads fine", 0.5, min=0, max=1)
    broker_session_timeout_s: float = _key("The clusters' broker.session.timeout.ms, in "
                                           "seconds: a broker the controller fences for a "
                                           "timed-out session went quiet at most this long "
                                           "before (its outage starts then)", 9.0, min=0.1,
                                           max=3600)
    outage_grace_s: float = _key("After a broker that was out (crashed, hung, shut down) is "
                                 "unfenced, its own and its leaders' slow windows are set "
                                 "aside this long more while it catches up as a follower "
                                 "(seen on a rolling restart: the leaders' acks=all writes "
                                 "waited on the last restarted broker ~30 s after it was "
                                 "unfenced)", 60.0, min=0, max=3600)
    unreachable_gap_s: float = _key("The other brokers' replica fetchers logging that they "
                                    "cannot connect to a broker ('Connection to node N ... "
                                    "could not be established') make an outage of it; "
                                    "sightings of one broker less than this apart are one "
                                    "outage (they repeat at each reconnect attempt, every "
                                    "reconnect.backoff.max.ms: 1 s by default)", 10.0,
                                    min=0.1, max=3600)
    restart_warmup_s: float = _key("After a broker that was out is unfenced, its own-stage "
                                   "slowness (request queue, Local, response queue) is set "
                                   "aside this long from the unfence: a fresh JVM loads its "
                                   "logs, warms its page cache and compiles its code (seen "
                                   "live in crash-restart-3b on a loaded 2-core host: the "
                                   "restarted broker ran 300-700 ms TP99 for 70-150 s after "
                                   "its unfence). Its leaders' waits on it as a follower "
                                   "count again after outage_grace_s only where it stands "
                                   "out (past follower_holdback_floor_ms, or follower_ratio "
                                   "x later than their other followers); lesser lags are "
                                   "set aside until this ends; 0 turns this off", 180.0,
                                   min=0, max=3600)

    leadership_grace_s: float = _key("After a broker becomes leader of a partition (its own "
                                     "'Leader ... starts at leader epoch' line), its Remote "
                                     "waits that name no follower are set aside this long: "
                                     "its new followers first have to find it and fetch "
                                     "(seen after the controller's preferred-leader election "
                                     "on a rolling restart: 1.5 s TP99 for two windows); its "
                                     "own-stage slowness in that time is a warning with no "
                                     "action, the load that moved to it (seen on "
                                     "crash-restart-3b: broker 1's network threads after it "
                                     "took 17 partitions), unless it was blamed just before",
                                     30.0, min=0, max=3600)

    def __post_init__(self) -> None:
        if self.persistence_windows > self.persistence_lookback_windows:
            raise ConfigError(
                f"slow_broker.persistence_windows ({self.persistence_windows}) must be <= "
                f"slow_broker.persistence_lookback_windows ({self.persistence_lookback_windows})")
        if self.cluster_wide_persistence_windows > self.persistence_lookback_windows:
            raise ConfigError(
                f"slow_broker.cluster_wide_persistence_windows "
                f"({self.cluster_wide_persistence_windows}) must be <= "
                f"slow_broker.persistence_lookback_windows ({self.persistence_lookback_windows})")
        for api, ms in self.api_threshold_ms.items():
            if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
                raise ConfigError(f"slow_broker.api_threshold_ms.{api} must be a positive "
                                  f"number of milliseconds, got {ms!r}")

    @property
    def window_ms(self) -> int:
        return int(self.window_s * 1000)
