"""Rules 1-5 on one broker/API/window, small pure functions, and rules 2b and 4b, which
lower the bars of 2 and 4 for an acks=all write whose follower is late elsewhere too;
`judge_rows` applies them to one window's rows."""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from core.signals import REPLICATED_WRITE_APIS, STAGES, threshold_for, waits_in_purgatory
from detectors.explaining_away import MIN_REFERENCE_MS
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import STAGES_OUTSIDE_REMOTE, RequestStageWindow
from detectors.slow_broker.verdicts import ApiVerdict

POOL_WINDOWS = 6          # windows pooled at most (a minute): an older pool is not now
MIN_PEERS = 2             # a median of one peer is that peer
MIN_HISTORY_WINDOWS = 6   # earlier windows before the in-input baseline is trusted
# With a second, independent sign (rules 2b and 4b: its follower late elsewhere; rule 8:
# most brokers risen at once): a pool's floor (20 requests make a wait at the edge
# unlikely to be one request's), and half the history bar.
CORROBORATED_MIN_REQUESTS = 20
RISEN_RATIO = 1.5

Sample = tuple[int, float]       # (requests, judged latency) of one earlier window
Pool = tuple[int, int, float]    # (windows, requests, least judged latency) judged together


def judged_latency(row: RequestStageWindow) -> float:
    """Rule 1: TotalTime TP99; for a purgatory API the time outside Remote
    (core.signals.judged_ms), exact when given, else a lower bound."""
    if not waits_in_purgatory(row.api):
        return row.total_p99_ms
    if row.total_excl_remote_p99_ms is not None:
        return row.total_excl_remote_p99_ms
    own_stages = [row.stage_p99(s) for s in STAGES_OUTSIDE_REMOTE]
    return max(row.total_p99_ms - row.remote_p99_ms, *own_stages, 0.0)


def enough_traffic(requests: int, floor: int) -> bool:
    """Rule 2: enough requests for a p99 to mean something."""
    return requests >= floor


def pool_quiet(requests: int, latency: float, threshold: float,
               earlier: Sequence[Sample | None], floor: int) -> Pool | None:
    """Rule 2 for a window too quiet alone (a slow broker cuts its own rate): pooled with
    the windows just before it (`earlier`, newest first) over the threshold too, up to
    POOL_WINDOWS, until they hold `floor` requests; judged at their least latency."""
    if latency <= threshold:
        return None
    windows, total, least = 1, requests, latency
    for prior in earlier[:POOL_WINDOWS - 1]:
        if enough_traffic(total, floor):
            break
        if prior is None or prior[1] <= threshold:
            return None
        windows, total, least = windows + 1, total + prior[0], min(least, prior[1])
    return (windows, total, least) if enough_traffic(total, floor) else None


def over_threshold(latency: float, threshold: float) -> bool:
    """Rule 3: above the absolute floor below which no latency is a problem."""
    return latency > threshold


def baseline(external: float | None, healthy: Sequence[float], quiet: Sequence[Sample],
             floor: int) -> float | None:
    """Rule 4's reference: the external baseline; else the median of MIN_HISTORY_WINDOWS
    or more earlier healthy windows; else of as many quiet ones holding `floor` requests
    together (all a quiet cluster has)."""
    if external is not None:
        return external
    if len(healthy) >= MIN_HISTORY_WINDOWS:
        return statistics.median(healthy)
    if len(quiet) >= MIN_HISTORY_WINDOWS and sum(n for n, _ in quiet) >= floor:
        return statistics.median(lat for _, lat in quiet)
    return None


def stands_out(value: float, reference: float | None, ratio: float) -> bool:
    """Rules 4 and 5: at least `ratio` x a reference, its baseline or its peers' median."""
    return reference is not None and value >= ratio * max(reference, MIN_REFERENCE_MS)


def median_without(sorted_values: Sequence[float], value: float) -> float | None:
    """The median of a sorted list with one occurrence of `value` left out, in O(log n)."""
    i = bisect.bisect_left(sorted_values, value)
    m = len(sorted_values) - 1
    if m <= 0:
        return None

    def kth(k: int) -> float:
        return sorted_values[k] if k < i else sorted_values[k + 1]

    return kth(m // 2) if m % 2 else (kth(m // 2 - 1) + kth(m // 2)) / 2


def peer_median(latencies: Sequence[float], own: float | None) -> float | None:
    """Rule 5's reference: the median of MIN_PEERS or more other brokers with traffic
    (sorted `latencies` hold `own` when it has traffic)."""
    peers = len(latencies) - (own is not None)
    if peers < MIN_PEERS:
        return None
    return median_without(latencies, own) if own is not None else statistics.median(latencies)


def dominant_stage(row: RequestStageWindow) -> tuple[str | None, float]:
    """The stage with the largest p99 (not a deliberate Remote wait) and its share: what
    blame starts from."""
    stages = STAGES_OUTSIDE_REMOTE if waits_in_purgatory(row.api) else STAGES
    values = [row.stage_p99(s) for s in stages]
    total = sum(values)
    if total <= 0:
        return None, 0.0
    # ties: the earlier stage in the request path (max keeps the first)
    i = max(range(len(stages)), key=values.__getitem__)
    return stages[i], values[i] / total


def judge_row(row: RequestStageWindow, latency: float, threshold: float, own_traffic: bool,
              pool: Pool | None, baseline_ms: float | None, peers: float | None,
              history_ratio: float, peer_ratio: float) -> ApiVerdict:
    """Rules 1-5 on one row, at its pool's least latency when pooled. Only a row over its
    threshold has a dominant stage: no other is blamed (most rows of a fleet)."""
    windows, requests, lat = pool or (1, None, latency)
    stage, share = dominant_stage(row) if latency > threshold else (None, 0.0)
    return ApiVerdict(
        row=row, latency_ms=lat, threshold_ms=threshold,
        enough_traffic=own_traffic or pool is not None,
        over_threshold=over_threshold(lat, threshold), baseline_ms=baseline_ms,
        slow_vs_history=stands_out(lat, baseline_ms, history_ratio), peer_median_ms=peers,
        slow_vs_peers=stands_out(lat, peers, peer_ratio), dominant_stage=stage,
        stage_share=share, pooled_windows=windows, pooled_requests=requests)


@dataclass
class History:
    """Per broker/API, the earlier windows' (requests, latency) and those that were no
    usual latency (suspect, a shared stall's, pooled), over the range judged (judged.py
    carries it from one evaluation to the next)."""
    windows: dict[tuple[int, str], dict[int, Sample]] = field(
        default_factory=lambda: defaultdict(dict))
    unusual: dict[tuple[int, str], set[int]] = field(default_factory=lambda: defaultdict(set))
    noted: dict[int, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))

    def earlier(self, row: RequestStageWindow, window_ms: int) -> list[Sample | None]:
        """The row's broker/API in the windows just before it, newest first."""
        seen = self.windows.get((row.broker, row.api), {})
        return [seen.get(row.window_start_ms - k * window_ms) for k in range(1, POOL_WINDOWS)]

    def note(self, row: RequestStageWindow, latency: float) -> None:
        key = (row.broker, row.api)
        self.windows[key][row.window_start_ms] = (row.requests, latency)
        self.noted[row.window_start_ms].append(key)

    def _forget(self, starts: list[int]) -> None:
        for start in starts:
            for key in self.noted.pop(start):
                self.windows[key].pop(start, None)
                self.unusual.get(key, set()).discard(start)

    def forget_from(self, start_ms: int) -> None:
        """Forget the windows from start_ms on (judged again)."""
        self._forget([s for s in self.noted if s >= start_ms])

    def drop_before(self, start_ms: int) -> None:
        """Forget the windows before start_ms (out of the range)."""
        self._forget([s for s in self.noted if s < start_ms])

    def usual(self, row: RequestStageWindow, floor: int) -> tuple[list[float], list[Sample]]:
        """The usual latencies before the row's window: with `floor` requests, and fewer."""
        key = (row.broker, row.api)
        unusual = self.unusual.get(key, ())
        before = [x for w, x in self.windows.get(key, {}).items()
                  if w < row.window_start_ms and w not in unusual]
        return [lat for n, lat in before if n >= floor], [x for x in before if 0 < x[0] < floor]

    def baseline(self, row: RequestStageWindow, external: Mapping[tuple[int, str], float],
                 floor: int) -> float | None:
        return baseline(external.get((row.broker, row.api)), *self.usual(row, floor), floor)

    def remember(self, verdicts: Sequence[ApiVerdict]) -> None:
        """Mark the window's rows that are no usual latency."""
        for v in verdicts:
            if v.over_threshold and (v.suspect or v.shared_stall or v.pooled_windows > 1):
                self.unusual[(v.row.broker, v.row.api)].add(v.row.window_start_ms)


def corroborated(v: ApiVerdict, latency: float, late_follower: Callable[[int], bool]) -> bool:
    """Rules 4b and 2b: an acks=all write waiting in Remote, `risen`, whose follower is
    late at its other leaders too. A follower that holds back most leaders raises the
    peers and the baselines alike, so rules 4 and 5 fail; the other leaders' fetches are
    an independent sign (a loaded host lags now and then, so the baseline still counts)."""
    return (v.dominant_stage == "remote" and v.row.api in REPLICATED_WRITE_APIS
            and risen(v, latency) and late_follower(v.row.broker))


def risen(v: ApiVerdict, latency: float | None = None) -> bool:
    """Over its threshold and at least RISEN_RATIO x its baseline (half the history bar):
    no evidence against a broker alone, but a second sign can make it one."""
    latency = v.latency_ms if latency is None else latency
    return (latency > v.threshold_ms and v.baseline_ms is not None
            and latency >= RISEN_RATIO * max(v.baseline_ms, MIN_REFERENCE_MS))


def judge_rows(rows: Sequence[RequestStageWindow], history: History,
               external: Mapping[tuple[int, str], float], cfg: SlowBrokerSection,
               late_follower: Callable[[int], bool] = lambda _: False) -> list[ApiVerdict]:
    """Rules 1-5, 2b and 4b on one window's rows. A pooled row stays out of its peers'
    medians (its latency bounds several windows); a row at or under its threshold is never
    slow, so its references are not looked up."""
    floor = cfg.min_requests_per_window
    thresholds: dict[str, float] = {}
    judged = []
    by_api: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        latency = judged_latency(r)
        threshold = thresholds.get(r.api)
        if threshold is None:
            threshold = thresholds[r.api] = threshold_for(r.api, cfg.threshold_ms,
                                                          cfg.api_threshold_ms)
        own = enough_traffic(r.requests, floor)
        pool = quiet = None
        if own:
            by_api[r.api].append(latency)
        elif latency > threshold:   # pool_quiet pools no window at or under it
            earlier = history.earlier(r, cfg.window_ms)
            pool = pool_quiet(r.requests, latency, threshold, earlier, floor)
            if pool is None:
                quiet = pool_quiet(r.requests, latency, threshold, earlier,
                                   CORROBORATED_MIN_REQUESTS)
        history.note(r, latency)   # earlier() reads only windows before
        judged.append((r, latency, threshold, own, pool, quiet))
    for lats in by_api.values():
        lats.sort()
    out = []
    for r, latency, threshold, own, pool, quiet in judged:
        if latency <= threshold:
            out.append(ApiVerdict(r, latency, threshold, own, False, None, False, None, False,
                                  None, 0.0))
            continue
        base = history.baseline(r, external, floor)
        peers = peer_median(by_api.get(r.api, []), latency if own else None)
        v = judge_row(r, latency, threshold, own, pool, base, peers, cfg.history_ratio,
                      cfg.peer_ratio)
        if quiet is not None and corroborated(v, quiet[2], late_follower):
            v = judge_row(r, latency, threshold, False, quiet, base, peers,
                          cfg.history_ratio, cfg.peer_ratio)
            v.follower_corroborated = True
        elif v.enough_traffic and not v.suspect and corroborated(v, v.latency_ms,
                                                                 late_follower):
            v.follower_corroborated = True
        out.append(v)
    return out
