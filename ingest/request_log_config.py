"""The [request_log] config section: what the request-log agents ship (issue 24).

Kept apart from the agent so the configuration loads without it. The agents ship the edge
aggregation's per-window histograms and exemplars (ingest/request_windows.py), whose volume
follows the number of brokers, not of requests; OffsetCommit requests also go out whole to
request_stages. `full_brokers` names brokers whose every request also goes out whole to
request_stages, besides their windows, for root-cause work on them (as the exemplars do
for some requests); no detector reads those rows. (The ``mode`` key is gone: windows are
the only wire format, and a file that still sets it fails as an unknown key.)
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config_keys import ConfigError, _key


@dataclass(frozen=True)
class RequestLogSection:
    full_brokers: list = _key("Brokers (node ids) whose every request also goes out whole, "
                              "one record each, to request_stages, besides its windows "
                              "(root-cause work; no detector reads those rows)", [])
    window_s: int = _key("Window length of the edge aggregation, seconds", 10, min=1, max=60)
    lateness_s: float = _key("How long after a window's end (in the broker's own request "
                             "times) the agent waits before sending it; later lines go out in "
                             "an additive delta. A request-log line is at most 0.6 s older "
                             "than the newest before it in the 1.8 million lines of the "
                             "recorded fault matrix (a broker held to 5% of a core)", 2.0,
                             min=0, max=60)
    exemplar_slow_ms: float = _key("A request whose latency (total, or total - remote for "
                                   "Fetch, JoinGroup and SyncGroup) reaches this goes out "
                                   "whole, up to exemplar_slow_cap per key and window (keep it "
                                   "at or below slow_broker's threshold)", 300.0, min=0,
                                   max=600_000)
    exemplar_slow_cap: int = _key("Most slow requests sent whole per key and window (a uniform "
                                  "sample past it; the window row counts those left out)", 20,
                                  min=0, max=100_000)
    exemplar_slowest: int = _key("The slowest requests sent whole per key and window, slow or "
                                 "not", 5, min=0, max=1000)
    exemplar_error_cap: int = _key("Most error responses sent whole per key and window", 10,
                                   min=0, max=100_000)
    exemplar_sample_every: int = _key("One request in this many goes out whole, whatever it is "
                                      "(a baseline)", 1000, min=1, max=10**9)
    send_threshold_ms: float = _key("A response send time at or over this counts as a slow send "
                                    "(client_send_windows.slow_sends), and its client always "
                                    "gets its own row", 300.0, min=0, max=600_000)
    top_clients: int = _key("Clients with their own send-time row per key and window (the "
                            "busiest; the rest summed in one row)", 20, min=0, max=100_000)

    def __post_init__(self):
        bad = [b for b in self.full_brokers if isinstance(b, bool) or not isinstance(b, int)
               or b < 0]
        if bad:
            raise ConfigError(f"key 'request_log.full_brokers': broker node ids (integers >= 0), "
                              f"not {bad!r}")

    def aggregator_options(self) -> dict:
        """WindowAggregator's keyword arguments."""
        return {"window_ms": int(self.window_s * 1000),
                "lateness_ms": int(self.lateness_s * 1000),
                "slow_ms": self.exemplar_slow_ms, "slow_cap": self.exemplar_slow_cap,
                "slowest": self.exemplar_slowest, "error_cap": self.exemplar_error_cap,
                "sample_every": self.exemplar_sample_every,
                "send_threshold_ms": self.send_threshold_ms, "top_clients": self.top_clients}
