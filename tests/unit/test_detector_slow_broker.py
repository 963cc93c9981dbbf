"""Slow-broker rules on named scenarios: every rule's result, then the verdicts, then the
detections. Three brokers (1, 2, 3), RF=3, acks=all producers, 10-second windows: ten
healthy-or-not windows, the fault (when there is one) in the last two."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

import pytest

from core.findings import ActionKind, AnomalyType, Severity
from detectors.slow_broker import (
    ClientSendWindow,
    FollowerFetchWindow,
    IsrShrink,
    LatencyBaseline,
    RequestStageWindow,
    Role,
    SlowBrokerSection,
    assess_windows,
    detect_slow_brokers,
    replication_bar,
    replication_waits,
)
from detectors.explaining_away import common_party
from detectors.slow_broker import blame, rules
from detectors.slow_broker.persistence import detections_from
from detectors.slow_broker.rules import dominant_stage, median_without
from detectors.slow_client import assess_clients, detect_slow_clients
from kmon.config import ConfigError, _build_section

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
W = 10_000
BROKERS = (1, 2, 3)
LAST = 9
CONFIG = SlowBrokerSection()


def start(w: int) -> int:
    return T0 + w * W


def window_of(x) -> int:
    return (x.window_start_ms - T0) // W


def produce(b, w, *, total=8.0, rq=0.5, local=4.0, remote=3.0, throttle=0.0, rsq=0.2, send=0.3,
            requests=600):
    return RequestStageWindow("c1", b, "Produce", start(w), requests, total, rq, local, remote,
                              throttle, rsq, send)


def fetch_consumer(b, w, *, total=502.0, rq=0.3, local=1.5, remote=499.0, send=0.5,
                   requests=200, excl=None):
    return RequestStageWindow("c1", b, "Fetch", start(w), requests, total, rq, local,
                              remote, 0.0, 0.2, send, excl)


def healthy(windows=range(LAST + 1), brokers=BROKERS):
    return [r for w in windows for b in brokers for r in (produce(b, w), fetch_consumer(b, w))]


SHORT = {"total": "total_p99_ms", "rq": "request_queue_p99_ms", "local": "local_p99_ms",
         "remote": "remote_p99_ms", "throttle": "throttle_p99_ms",
         "rsq": "response_queue_p99_ms", "send": "send_p99_ms", "requests": "requests",
         "excl": "total_excl_remote_p99_ms"}


def with_(row, **stages):
    return replace(row, **{SHORT[k]: v for k, v in stages.items()})


def replaced(rows, broker, api, windows, **stages):
    """The rows with one broker/API's stages replaced in the given windows."""
    out = []
    for r in rows:
        if r.broker == broker and r.api == api and window_of(r) in windows:
            r = with_(r, **stages)
        out.append(r)
    return out


def follower_fetches(windows, gaps):
    """gaps[(leader, follower)] -> max_fetch_gap_ms in the given windows; 5 ms elsewhere."""
    out = []
    for w in range(LAST + 1):
        for leader in BROKERS:
            for follower in BROKERS:
                if leader == follower:
                    continue
                gap = gaps.get((leader, follower), 5.0) if w in windows else 5.0
                if gap is None:
                    continue  # the follower sent nothing: no row at all
                out.append(FollowerFetchWindow("c1", start(w), leader, follower, 40, gap))
    return out


@dataclass
class Scenario:
    name: str
    rows: list
    fetches: list = field(default_factory=list)
    shrinks: list = field(default_factory=list)
    sends: list = field(default_factory=list)
    # (broker, api) -> rule results in the last window
    rules: dict = field(default_factory=dict)
    # broker -> (role, cause) of its verdict in the last window
    verdicts: dict = field(default_factory=dict)
    cluster_wide: bool = False
    # entity -> (type, cause, action, severity)
    detections: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)  # entity -> evidence items to check
    clients: set = field(default_factory=set)  # clients slow by their own requests, last window
    first_window: int = LAST - 1  # the earliest flagged window of the lookback


def rules_of(v):
    return {"enough_traffic": v.enough_traffic, "over_threshold": v.over_threshold,
            "slow_vs_history": v.slow_vs_history, "slow_vs_peers": v.slow_vs_peers,
            "follower_corroborated": v.follower_corroborated, "suspect": v.suspect,
            "stage": v.dominant_stage}


FAULT = {LAST - 1, LAST}
# A cluster-wide slowdown pages once it holds every window of the lookback (3).
HELD = {LAST - 2, LAST - 1, LAST}
SLOW_LOCAL = dict(total=910.0, local=900.0)
PAUSED_PRODUCE_ON_LEADER = dict(total=2600.0, remote=2580.0)
# Leaders 1 and 2 wait on follower 3: they are its victims, it is named the slow follower.
FOLLOWER_3_NAMED = {1: (Role.VICTIM, "remote_produce_slow_follower"),
                    2: (Role.VICTIM, "remote_produce_slow_follower"),
                    3: (Role.CULPRIT, "slow_follower")}
FOLLOWER_3_NAMED_DETECTIONS = {
    "broker:1": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                 Severity.WARNING),
    "broker:2": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                 Severity.WARNING),
    "broker:3": (AnomalyType.SLOW_BROKER, "slow_follower", ActionKind.PAGE_HUMAN,
                 Severity.HIGH)}


def over_the_threshold_before_the_fault():
    """Leaders 1 and 2 at 340 ms acks=all Produce TP99 (Remote) in every window, 820 ms in
    the fault's: 2.4x their usual, under history_ratio."""
    rows = healthy()
    for leader in (1, 2):
        rows = replaced(rows, leader, "Produce", set(range(LAST + 1)), total=340.0, remote=330.0)
        rows = replaced(rows, leader, "Produce", FAULT, total=820.0, remote=800.0)
    return rows


def _stalled(quiet_requests: int, quiet_stages: dict | None = None,
             quiet_windows: set = FAULT) -> list:
    """Broker 3 gone (restarting) for the last three windows; broker 1's fetches wait 600 ms
    for a network thread in them; in `quiet_windows` (the last two), broker 2's
    `quiet_requests` Produce requests wait as long (or have `quiet_stages`)."""
    rows = [r for r in healthy() if not (r.broker == 3 and window_of(r) in HELD)]
    rows = replaced(rows, 1, "Fetch", HELD, total=1100.0, rsq=600.0, excl=600.0)
    return replaced(rows, 2, "Produce", quiet_windows, requests=quiet_requests,
                    **(quiet_stages or dict(total=650.0, rsq=640.0)))


def scenarios():
    yield Scenario(
        "healthy_quiet_cluster_fetch_purgatory_is_not_slow", healthy(),
        fetches=follower_fetches(set(), {}),
        # under the threshold: no stage is judged (blame reads none)
        rules={(1, "Fetch"): {"enough_traffic": True, "over_threshold": False,
                                      "slow_vs_history": False, "slow_vs_peers": False,
                                      "suspect": False, "stage": None},
               (1, "Produce"): {"enough_traffic": True, "over_threshold": False,
                                "slow_vs_history": False, "slow_vs_peers": False,
                                "suspect": False, "stage": None}})

    yield Scenario(
        "one_noisy_window_does_not_fire",
        replaced(healthy(), 2, "Produce", {LAST}, **SLOW_LOCAL),
        rules={(2, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": True, "suspect": True,
                                "stage": "local"}},
        verdicts={2: (Role.CULPRIT, "local_disk_or_page_cache")})

    yield Scenario(
        "slow_disk_broker_is_blamed_with_local_stage",
        replaced(healthy(), 2, "Produce", FAULT, **SLOW_LOCAL),
        rules={(2, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": True, "suspect": True,
                                "stage": "local"},
               (1, "Produce"): {"enough_traffic": True, "over_threshold": False,
                                "slow_vs_history": False, "slow_vs_peers": False,
                                "suspect": False, "stage": None}},
        verdicts={2: (Role.CULPRIT, "local_disk_or_page_cache")},
        detections={"broker:2": (AnomalyType.SLOW_BROKER, "local_disk_or_page_cache",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:2": {"api": "Produce", "stage": "local", "stage_p99_ms": 900.0,
                               "windows_flagged": 2, "role": "culprit"}})

    # Broker 3 frozen in bursts (SIGSTOP): the leaders 1 and 2 wait in Remote time for it
    # as a follower; it fetched nothing for 2.5 s at a time; its own requests froze in the
    # request queue.
    paused = healthy()
    for leader in (1, 2):
        paused = replaced(paused, leader, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER)
    paused = replaced(paused, 3, "Produce", FAULT, total=2700.0, rq=2500.0, remote=150.0,
                      requests=300)
    yield Scenario(
        "paused_follower_slows_produce_remote_on_leaders", paused,
        fetches=follower_fetches(FAULT, {(1, 3): 2500.0, (2, 3): 2500.0,
                                         (3, 1): 2500.0, (3, 2): 2500.0}),
        rules={(1, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": False,
                                "suspect": True, "stage": "remote"},
               (3, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": False,
                                "suspect": True, "stage": "request_queue"}},
        verdicts={1: (Role.VICTIM, "remote_produce_slow_follower"),
                  2: (Role.VICTIM, "remote_produce_slow_follower"),
                  3: (Role.CULPRIT, "request_handlers_saturated")},
        detections={
            "broker:1": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                         Severity.WARNING),
            "broker:2": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                         Severity.WARNING),
            "broker:3": (AnomalyType.SLOW_BROKER, "request_handlers_saturated",
                         ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:1": {"slow_follower": "broker:3", "stage": "remote",
                               "follower_evidence": "fetch_holdback",
                               "follower_holdback_ms": 2500.0, "role": "victim"},
                  "broker:3": {"held_back_leaders": [1, 2], "stage": "request_queue",
                               "role": "culprit"}})

    # Seen on the real cluster (kmon demo): the paused follower also holds back the group
    # coordinators' offset commits (acks=all appends to __consumer_offsets) on leaders 1
    # and 2. Those wait in Remote too and are the same follower's doing, not two more
    # slow brokers: no cluster-wide event.
    def commits(b, w, remote=3.0):
        return RequestStageWindow("c1", b, "OffsetCommit", start(w), 120, remote + 2.0, 0.3,
                                  1.0, remote, 0.0, 0.2, 0.3)
    with_commits = paused + [commits(b, w, 2400.0 if (w in FAULT and b in (1, 2)) else 3.0)
                             for w in range(LAST + 1) for b in BROKERS]
    yield Scenario(
        "paused_follower_slows_offset_commits_on_leaders_too", with_commits,
        fetches=follower_fetches(FAULT, {(1, 3): 2500.0, (2, 3): 2500.0,
                                         (3, 1): 2500.0, (3, 2): 2500.0}),
        verdicts={1: (Role.VICTIM, "remote_produce_slow_follower"),
                  2: (Role.VICTIM, "remote_produce_slow_follower"),
                  3: (Role.CULPRIT, "request_handlers_saturated")},
        detections={
            "broker:1": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                         Severity.WARNING),
            "broker:2": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                         Severity.WARNING),
            "broker:3": (AnomalyType.SLOW_BROKER, "request_handlers_saturated",
                         ActionKind.MOVE_LEADERSHIP, Severity.HIGH)})

    # Broker 3 frozen 0.7 s of every second (a live matrix scenario, freeze-short): its
    # fetch gaps at the other leaders stay under the 1 s floor, but it is the one follower
    # late at both of them. It is named; the leaders are its victims, not a cluster-wide
    # event.
    yield Scenario(
        "short_freezes_under_the_floor_still_name_the_common_follower", paused,
        fetches=follower_fetches(FAULT, {(1, 3): 720.0, (2, 3): 700.0,
                                         (3, 1): 650.0, (3, 2): 640.0}),
        verdicts={1: (Role.VICTIM, "remote_produce_slow_follower"),
                  2: (Role.VICTIM, "remote_produce_slow_follower"),
                  3: (Role.CULPRIT, "request_handlers_saturated")},
        cluster_wide=False,
        detections={
            "broker:1": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                         Severity.WARNING),
            "broker:2": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower", ActionKind.NONE,
                         Severity.WARNING),
            "broker:3": (AnomalyType.SLOW_BROKER, "request_handlers_saturated",
                         ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:1": {"slow_follower": "broker:3", "follower_evidence": "fetch_holdback",
                               "follower_holdback_ms": 720.0}})

    # Every byte to and from broker 3 delayed 250 ms (the live matrix's delayed-broker-5b):
    # its fetches reach each leader ~500 ms apart, and the leaders' acks=all writes wait
    # 1.2 s on it. The producers wait for their answers, so the leaders serve 40 Produce
    # requests a window, too few to judge one window alone: three windows over the
    # threshold in a row are judged together, and broker 3 is named.
    starving = {LAST - 3, LAST - 2, *FAULT}
    delayed = healthy()
    for leader in (1, 2):
        delayed = replaced(delayed, leader, "Produce", starving, total=1200.0, remote=1180.0,
                           requests=40)
    yield Scenario(
        "delayed_follower_that_starves_its_leaders_traffic_is_named", delayed,
        fetches=follower_fetches(starving, {(1, 3): 500.0, (2, 3): 510.0}),
        rules={(1, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": False,
                                "suspect": True, "stage": "remote"}},
        verdicts=FOLLOWER_3_NAMED, detections=FOLLOWER_3_NAMED_DETECTIONS,
        evidence={"broker:1": {"slow_follower": "broker:3", "pooled_windows": 3,
                               "pooled_requests": 120, "requests": 40}},
        first_window=LAST - 2)   # the pool's windows count for persistence

    # Leaders whose acks=all Produce TP99 is already over the threshold (340 ms) before the
    # fault rise 2.4x when follower 3 freezes in bursts (freeze-short-5b on the live
    # matrix): slow neither against their history (3x) nor their peers (they all wait on
    # 3), but 3 is late at every leader it follows: the follower evidence makes them
    # suspects (rule 4b), and 3 is named.
    over_before = over_the_threshold_before_the_fault()
    yield Scenario(
        "follower_late_everywhere_names_it_when_its_leaders_usual_latency_is_over_the_threshold",
        over_before, fetches=follower_fetches(FAULT, {(1, 3): 700.0, (2, 3): 680.0}),
        rules={(1, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": False, "slow_vs_peers": False,
                                "follower_corroborated": True, "suspect": True,
                                "stage": "remote"}},
        verdicts=FOLLOWER_3_NAMED, detections=FOLLOWER_3_NAMED_DETECTIONS,
        evidence={"broker:1": {"slow_follower": "broker:3", "follower_evidence": "fetch_holdback",
                               "follower_holdback_ms": 700.0}})

    # The same leaders, but follower 3 keeps up with leader 2: nothing corroborates their
    # rise (3 is refuted at leader 1: it fetches fine elsewhere), so a 2.4x rise over a
    # usual latency already over the threshold stays below history_ratio, the two leaders
    # are each other's peers, and no broker is blamed: two of three risen at once are
    # cluster-wide in those windows, too few windows for a finding.
    one_leader = over_the_threshold_before_the_fault()
    yield Scenario(
        "follower_late_at_one_leader_only_corroborates_nothing", one_leader,
        fetches=follower_fetches(FAULT, {(1, 3): 700.0}),
        rules={(1, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": False, "slow_vs_peers": False,
                                "follower_corroborated": False, "suspect": False,
                                "stage": "remote"}},
        verdicts={}, cluster_wide=True, detections={})

    # Every follower a little late everywhere (the whole machine starved): nobody stands
    # out, so nobody is named, and the leaders are not victims of anyone.
    everywhere = {(a, b): 700.0 for a in BROKERS for b in BROKERS if a != b}
    starved = healthy()
    for leader in (1, 2):
        starved = replaced(starved, leader, "Produce", HELD, **PAUSED_PRODUCE_ON_LEADER)
    starved = replaced(starved, 3, "Produce", HELD, total=2700.0, rq=2500.0, remote=150.0,
                       requests=300)
    yield Scenario(
        "every_follower_equally_late_names_no_follower", starved,
        fetches=follower_fetches(HELD, everywhere),
        verdicts={1: (Role.UNATTRIBUTED, "remote_produce_unknown_follower"),
                  2: (Role.UNATTRIBUTED, "remote_produce_unknown_follower"),
                  3: (Role.CULPRIT, "request_handlers_saturated")},
        cluster_wide=True, first_window=LAST - 2,
        detections={"cluster:c1": (AnomalyType.CLUSTER_WIDE_SLOWNESS, "cluster_wide_slowness",
                                   ActionKind.PAGE_HUMAN, Severity.HIGH)})

    # The same, but broker 3 was frozen for whole windows: it logged nothing and its
    # leaders saw no fetch from it at all. Only the leaders can tell.
    silent = [r for r in healthy() if not (r.broker == 3 and window_of(r) in FAULT)]
    for leader in (1, 2):
        silent = replaced(silent, leader, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER)
    silent_fetches = [f for f in follower_fetches(set(), {})
                      if not (window_of(f) in FAULT and 3 in (f.leader, f.follower))]
    yield Scenario(
        "silent_paused_follower_is_blamed_by_its_leaders", silent, fetches=silent_fetches,
        verdicts=FOLLOWER_3_NAMED, detections=FOLLOWER_3_NAMED_DETECTIONS,
        evidence={"broker:3": {"held_back_leaders": [1, 2], "api": "Produce", "stage": "remote",
                               "stage_observed_on": "held_back_leaders"},
                  "broker:1": {"follower_holdback_ms": float(W)}})

    # Broker 3 is slow to serve its followers (both wait on it) while they fetch normally
    # from each other: the leader is at fault, not its followers.
    stalled = replaced(healthy(), 3, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER)
    yield Scenario(
        "stalled_leader_is_not_blamed_on_its_followers", stalled,
        fetches=follower_fetches(FAULT, {(3, 1): 2500.0, (3, 2): 2500.0}),
        verdicts={3: (Role.CULPRIT, "leader_replication_stalled")},
        detections={"broker:3": (AnomalyType.SLOW_BROKER, "leader_replication_stalled",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:3": {"follower_candidates": [1, 2],
                               "follower_holdback_elsewhere_ms": 5.0}})

    # Every byte to and from broker 3 delayed (delayed-broker-5b live): its followers wait
    # 600 ms at it and keep up elsewhere, under the 1,000-ms floor; it is 600 ms late at
    # leader 1 but, its fetches to leader 2 not delayed, fine there: not "late everywhere",
    # yet slow to serve its own followers. Both ways it is broker 3's fault: leader 3 is
    # the culprit (leader_replication_stalled) and leader 1 its victim, not an unknown.
    both_ways = replaced(healthy(), 3, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER)
    both_ways = replaced(both_ways, 1, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER)
    yield Scenario(
        "broker_slow_both_ways_is_named_by_the_leader_it_holds_back", both_ways,
        fetches=follower_fetches(FAULT, {(3, 1): 600.0, (3, 2): 600.0, (1, 3): 600.0}),
        verdicts={1: (Role.VICTIM, "remote_produce_slow_follower"),
                  3: (Role.CULPRIT, "leader_replication_stalled")},
        detections={"broker:1": (AnomalyType.SLOW_BROKER, "remote_produce_slow_follower",
                                 ActionKind.NONE, Severity.WARNING),
                    "broker:3": (AnomalyType.SLOW_BROKER, "leader_replication_stalled",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:1": {"slow_follower": "broker:3", "follower_holdback_ms": 600.0},
                  "broker:3": {"follower_holdback_ms": 600.0,
                               "follower_holdback_elsewhere_ms": 5.0}})

    # Its followers a little later at broker 3 (350 ms) than elsewhere (250 ms, a loaded
    # host): not twice as late, so broker 3 is not called slow to serve, and nobody
    # stands out: unknown, as before.
    marginal = replaced(healthy(), 3, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER)
    near = {(3, 1): 350.0, (3, 2): 350.0, (1, 2): 250.0, (2, 1): 250.0, (1, 3): 250.0,
            (2, 3): 250.0}
    yield Scenario(
        "followers_a_little_later_at_one_leader_do_not_make_it_stalled", marginal,
        fetches=follower_fetches(FAULT, near),
        verdicts={3: (Role.UNATTRIBUTED, "remote_produce_unknown_follower")},
        detections={"broker:3": (AnomalyType.SLOW_BROKER, "remote_produce_unknown_follower",
                                 ActionKind.PAGE_HUMAN, Severity.WARNING)})

    fleet = healthy()
    for b in BROKERS:
        fleet = replaced(fleet, b, "Produce", HELD, **SLOW_LOCAL)
    yield Scenario(
        "fleet_wide_latency_is_cluster_event", fleet,
        rules={(1, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": False,
                                "suspect": True, "stage": "local"}},
        verdicts={b: (Role.CULPRIT, "local_disk_or_page_cache") for b in BROKERS},
        cluster_wide=True, first_window=LAST - 2,
        detections={"cluster:c1": (AnomalyType.CLUSTER_WIDE_SLOWNESS, "cluster_wide_slowness",
                                   ActionKind.PAGE_HUMAN, Severity.HIGH)},
        evidence={"cluster:c1": {"brokers_blamed": [1, 2, 3], "dominant_stage": "local"}})

    # Seen in the matrix (rolling-restart-3b, a healthy run): every broker's acks=all
    # Produce over the threshold for two windows, on a 2-core host shared with the
    # pipeline while the restarted JVMs warmed up. Cluster-wide in each window, but two
    # windows are a host's stall, not a page: nothing is detected.
    stall = healthy()
    for b in BROKERS:
        stall = replaced(stall, b, "Produce", FAULT, **SLOW_LOCAL)
    yield Scenario(
        "a_cluster_wide_stall_of_two_windows_pages_nobody", stall, cluster_wide=True,
        verdicts={b: (Role.CULPRIT, "local_disk_or_page_cache") for b in BROKERS},
        detections={})

    # throttled-cleaner-3b live: broker 3 (also the only controller) restarting on a
    # starved 2-core host. Brokers 1 and 2 stalled alike (network and handler queues), but
    # broker 2 served 65 fetches a window, too few to judge alone until a second window
    # pooled with the first, so broker 1 was blamed alone in two windows of three
    # (network_threads_saturated, high). Counted as slow, broker 2 makes the window
    # cluster-wide: two such windows page nobody (a_cluster_wide_stall_of_two_windows...).
    yield Scenario(
        "a_stall_that_leaves_a_broker_too_quiet_to_judge_is_still_cluster_wide",
        _stalled(quiet_requests=65), cluster_wide=True,
        verdicts={1: (Role.CULPRIT, "network_threads_saturated"),
                  2: (Role.CULPRIT, "network_threads_saturated")},
        detections={})

    # The quiet broker's one slow request among twenty is no sign of a stall: broker 1 is.
    yield Scenario(
        "a_quiet_brokers_one_slow_request_does_not_make_a_stall",
        _stalled(quiet_requests=20), first_window=LAST - 2,
        verdicts={1: (Role.CULPRIT, "network_threads_saturated")},
        detections={"broker:1": (AnomalyType.SLOW_BROKER, "network_threads_saturated",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)})

    # A quiet broker slow because it waits on others (Remote) is not slow itself: in the
    # window it is too quiet to judge, broker 1 is blamed alone (in all three windows).
    yield Scenario(
        "a_quiet_broker_waiting_in_remote_is_not_a_stall",
        _stalled(quiet_requests=65, quiet_stages=dict(total=1150.0, rsq=5.0, remote=1140.0),
                 quiet_windows={LAST - 1}),
        first_window=LAST - 2,
        verdicts={1: (Role.CULPRIT, "network_threads_saturated")},
        detections={"broker:1": (AnomalyType.SLOW_BROKER, "network_threads_saturated",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:1": {"windows_flagged": 3}})

    yield Scenario(
        "low_traffic_broker_ignored",
        replaced(healthy(), 2, "Produce", {7, 8, 9}, total=5000.0, local=4990.0, requests=3),
        rules={(2, "Produce"): {"enough_traffic": False, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": True,
                                "suspect": False, "stage": "local"}})

    # The demo's healthy run (2026-11-25 19:32): broker 2 took 20 OffsetCommits a window at
    # 104 ms and one of them took 377 ms in two windows of three. Above the per-minute
    # floor (50/min, 8 a window), but with 20 requests the TP99 is that one commit.
    yield Scenario(
        "one_slow_request_among_twenty_is_not_a_slow_broker",
        replaced(healthy(), 2, "Produce", {8, 9}, total=377.0, remote=372.0, requests=20),
        rules={(2, "Produce"): {"enough_traffic": False, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": True,
                                "suspect": False, "stage": "remote"}})

    # analytics-batch makes 6 of the broker's 200 fetches a window, every one of them
    # slow to send: enough to push the broker's TP99 over the threshold. Rule 6 says it
    # is a client's doing (Role.CLIENT), and the finding is the client's, not the broker's.
    slow_read = replaced(healthy(), 1, "Fetch", FAULT, total=2000.0, send=1500.0)
    clients = ["billing", "orders", "search", "fraud", "audit", "analytics-batch"]
    yield Scenario(
        "slow_client_read_is_not_blamed_on_broker", slow_read,
        sends=[ClientSendWindow("c1", start(w), 1, c, 6 if c == "analytics-batch" else 38,
                                1480.0 if c == "analytics-batch" else 0.4, "Fetch",
                                slow_requests=6 if c == "analytics-batch" else 0)
               for w in FAULT for c in clients],
        rules={(1, "Fetch"): {"enough_traffic": True, "over_threshold": True,
                                      "slow_vs_history": True, "slow_vs_peers": True,
                                      "suspect": True, "stage": "send"}},
        verdicts={1: (Role.CLIENT, "client_slow_read")},
        clients={"analytics-batch"},
        detections={"client:analytics-batch": (AnomalyType.SLOW_CLIENT, "client_slow_read",
                                               ActionKind.NONE, Severity.WARNING)},
        evidence={"client:analytics-batch": {"brokers": [1], "api": "Fetch",
                                             "requests": 6, "slow_requests": 6,
                                             "send_p99_ms": 1480.0,
                                             "share_of_broker_requests": 0.03}})

    # Every client but one slow at broker 1, each with most of its fetches slow: the
    # broker's network path. The clients are not blamed, the broker is.
    yield Scenario(
        "most_clients_slow_is_the_brokers_network", slow_read,
        sends=[ClientSendWindow("c1", start(w), 1, c, 50, 0.4 if c == "billing" else 1400.0,
                                "Fetch", slow_requests=0 if c == "billing" else 40)
               for w in FAULT for c in clients],
        verdicts={1: (Role.UNATTRIBUTED, "network_send_slow")},
        detections={"broker:1": (AnomalyType.SLOW_BROKER, "network_send_slow",
                                 ActionKind.PAGE_HUMAN, Severity.WARNING)})

    throttled = healthy()
    for b in BROKERS:
        throttled = replaced(throttled, b, "Produce", FAULT, total=1210.0, throttle=1200.0)
    yield Scenario(
        "quota_throttling_everywhere_is_not_a_broker_fault", throttled,
        verdicts={b: (Role.QUOTA, "quota_throttled") for b in BROKERS},
        cluster_wide=False,
        detections={f"broker:{b}": (AnomalyType.SLOW_BROKER, "quota_throttled", ActionKind.NONE,
                                    Severity.INFO) for b in BROKERS})

    yield Scenario(
        "chronically_slow_broker_found_by_peers",
        replaced(healthy(), 2, "Produce", set(range(LAST + 1)), **SLOW_LOCAL),
        rules={(2, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": False, "slow_vs_peers": True,
                                "suspect": True, "stage": "local"}},
        verdicts={2: (Role.CULPRIT, "local_disk_or_page_cache")},
        detections={"broker:2": (AnomalyType.SLOW_BROKER, "local_disk_or_page_cache",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:2": {"baseline_ms": None, "peer_median_ms": 8.0,
                               "windows_flagged": 3}},
        first_window=LAST - 2)

    busy = healthy()
    for b in BROKERS:
        busy = replaced(busy, b, "Produce", set(range(LAST + 1)), total=320.0, local=310.0)
    yield Scenario(
        "uniformly_busy_cluster_at_threshold_is_not_flagged", busy,
        rules={(1, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": False, "slow_vs_peers": False,
                                "suspect": False, "stage": "local"}})

    # No per-follower fetch data (JMX only), but both leaders' ISR shrinks name broker 3.
    shrunk = healthy()
    for leader in (1, 2):
        shrunk = replaced(shrunk, leader, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER)
    yield Scenario(
        "isr_shrink_names_the_slow_follower", shrunk,
        shrinks=[IsrShrink("c1", start(w) + 4000, leader, "orders", p, (1, 2, 3),
                           (1, 2))
                 for w in FAULT for leader in (1, 2) for p in (0, 1)],
        verdicts=FOLLOWER_3_NAMED, detections=FOLLOWER_3_NAMED_DETECTIONS,
        evidence={"broker:1": {"follower_evidence": "isr_shrink", "slow_follower": "broker:3"}})

    yield Scenario(
        "produce_remote_without_follower_data_is_unattributed",
        replaced(healthy(), 1, "Produce", FAULT, **PAUSED_PRODUCE_ON_LEADER),
        verdicts={1: (Role.UNATTRIBUTED, "remote_produce_unknown_follower")},
        detections={"broker:1": (AnomalyType.SLOW_BROKER, "remote_produce_unknown_follower",
                                 ActionKind.PAGE_HUMAN, Severity.WARNING)})

    # A quiet cluster (freeze-short-quiet-5b: 20-60 Produce requests a broker a window,
    # never enough to judge one window alone, so no window is a healthy one and no broker
    # a peer). Broker 2 freezes in the last five windows: from the fourth the pool holds
    # enough requests (rule 1), and its quiet windows before the fault are its baseline:
    # each one's TP99 is its slowest request, 20 ms, against 700 ms.
    frozen_quiet = replaced(quiet_produce(), 2, "Produce", QUIET_FAULT, total=700.0, rq=690.0)
    yield Scenario(
        "a_quiet_broker_frozen_until_its_windows_pool_is_named_against_its_quiet_windows",
        frozen_quiet,
        rules={(2, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": True, "slow_vs_peers": False,
                                "suspect": True, "stage": "request_queue"}},
        verdicts={2: (Role.CULPRIT, "request_handlers_saturated")},
        detections={"broker:2": (AnomalyType.SLOW_BROKER, "request_handlers_saturated",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)},
        evidence={"broker:2": {"pooled_windows": 4, "pooled_requests": 120,
                               "baseline_ms": 20.0}},
        first_window=LAST - 2)   # the pool's windows in the lookback

    # The same quiet cluster on a loaded host: every broker's quiet windows at 450 ms, over
    # the threshold, and broker 2 at 900 ms through the last five. Pooled, it is over the
    # threshold but only 2x its usual, and there is no peer: nothing is flagged.
    slow_host = quiet_produce()
    for b in BROKERS:
        slow_host = replaced(slow_host, b, "Produce", set(range(LAST + 1)), total=450.0,
                             rq=440.0)
    yield Scenario(
        "a_quiet_broker_as_slow_as_twice_its_usual_over_the_threshold_is_not_slow",
        replaced(slow_host, 2, "Produce", QUIET_FAULT, total=900.0, rq=890.0),
        rules={(2, "Produce"): {"enough_traffic": True, "over_threshold": True,
                                "slow_vs_history": False, "slow_vs_peers": False,
                                "suspect": False}})

    # A host slowdown every broker shares (auto-reset-rewind-3b live at rules
    # 60f3c3a02f7e, 20261206T181419Z): every broker's acks=all Produce usually at 250 ms
    # TP99; in the fault's windows broker 3 at 800 ms (3.2x its usual, over the history
    # bar by a hair, no follower late), broker 2 at 480 (1.9x), broker 1 at 350 (1.4x).
    # Broker 3 alone clears the bar, broker 2 has risen past half of it: two of three
    # slow at once is cluster-wide, and two such windows are not yet a finding.
    usual = over_the_threshold_before_the_fault()
    for b in BROKERS:
        usual = replaced(usual, b, "Produce", set(range(LAST + 1)), total=250.0, remote=240.0)
    for b, ms in ((1, 350.0), (2, 480.0), (3, 800.0)):
        usual = replaced(usual, b, "Produce", FAULT, total=ms, remote=ms - 10.0)
    yield Scenario(
        "a_host_slowdown_every_broker_shares_is_cluster_wide_not_one_brokers", usual,
        fetches=follower_fetches(set(), {}),
        rules={(3, "Produce"): {"slow_vs_history": True, "slow_vs_peers": False,
                                "suspect": True, "stage": "remote"},
               (2, "Produce"): {"over_threshold": True, "slow_vs_history": False,
                                "suspect": False}},
        verdicts={3: (Role.UNATTRIBUTED, "remote_produce_unknown_follower")},
        cluster_wide=True)

    # cpu-starved-3b's guard: broker 2 starved, its Fetch responses wait 900 ms for a
    # network thread; leaders 1 and 3 wait on it as a follower (2.4x their usual) before
    # its fetch gaps show. Their rise is broker 2's doing, not a second and third slow
    # broker: it is blamed alone.
    starved = usual
    for b in BROKERS:
        starved = replaced(starved, b, "Produce", FAULT, total=250.0, remote=240.0)
    starved = replaced(starved, 2, "Fetch", FAULT, total=1100.0, rsq=900.0, excl=900.0)
    for b in (1, 3):
        starved = replaced(starved, b, "Produce", FAULT, total=600.0, remote=590.0)
    yield Scenario(
        "a_culprit_follower_explains_its_leaders_rise", starved,
        fetches=follower_fetches(set(), {}),
        rules={(1, "Produce"): {"over_threshold": True, "slow_vs_history": False,
                                "suspect": False}},
        verdicts={2: (Role.CULPRIT, "network_threads_saturated")},
        detections={"broker:2": (AnomalyType.SLOW_BROKER, "network_threads_saturated",
                                 ActionKind.MOVE_LEADERSHIP, Severity.HIGH)})


# The last five windows; quiet_produce's brokers serve 30 Produce requests a window.
QUIET_FAULT = set(range(LAST - 4, LAST + 1))


def quiet_produce():
    """healthy(), every broker's Produce at 30 requests a window, TP99 20 ms."""
    return [with_(r, requests=30, total=20.0) if r.api == "Produce" else r for r in healthy()]


SCENARIOS = list(scenarios())


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(s: Scenario):
    assessments = assess_windows(s.rows, follower_fetches=s.fetches, isr_shrinks=s.shrinks,
                                 client_sends=s.sends, config=CONFIG)
    last = assessments[-1]
    assert last.window_start_ms == start(LAST)

    verdicts = {(v.row.broker, v.row.api): v for v in last.api_verdicts}
    for key, expected in s.rules.items():
        got_rules = rules_of(verdicts[key])
        assert {k: got_rules[k] for k in expected} == expected, key

    got = {b: (v.attribution.role, v.attribution.cause) for b, v in last.brokers.items()}
    assert got == s.verdicts
    assert last.cluster_wide is s.cluster_wide
    clients = assess_clients(s.rows, client_sends=s.sends, config=CONFIG)
    assert set(clients[-1].clients) == s.clients

    detections = detections_from(assessments, CONFIG) + detect_slow_clients(
        s.rows, client_sends=s.sends, config=CONFIG)
    got_detections = {d.entity: (d.type, d.cause, d.suggested_action, d.severity)
                      for d in detections}
    assert got_detections == s.detections
    by_entity = {d.entity: d for d in detections}
    for entity, items in s.evidence.items():
        for k, v in items.items():
            assert by_entity[entity].evidence[k] == v, (entity, k)
    for d in detections:
        assert d.first_seen_ms == start(s.first_window)
        assert d.last_seen_ms == start(LAST) + W
        assert d.explanation.endswith(".")


def test_fetch_latency_leaves_out_purgatory_wait():
    quiet = fetch_consumer(1, 0)
    assert rules.judged_latency(quiet) == 3.0      # 502 - 499
    assert dominant_stage(quiet)[0] == "local"     # Remote is never the Fetch culprit
    # A slow disk hidden under the purgatory population still shows through its stage p99.
    hidden = with_(quiet, total=500.0, remote=500.0, local=400.0)
    assert rules.judged_latency(hidden) == 400.0
    # The exact p99 of (total - remote) from the request log wins when gold has it.
    assert rules.judged_latency(with_(quiet, excl=12.5)) == 12.5
    # Produce keeps its Remote time: acks=all waits for followers are real latency.
    assert rules.judged_latency(produce(1, 0, total=900.0, remote=880.0)) == 900.0


def test_external_baseline_replaces_missing_history():
    rows = [r for r in healthy(windows=range(LAST - 1, LAST + 1))]
    rows = replaced(rows, 2, "Produce", FAULT, total=150.0, local=140.0)
    config = replace(CONFIG, threshold_ms=100.0, peer_ratio=100.0)
    without = assess_windows(rows, config=config)[-1]
    assert not without.brokers  # no history, peers too lenient: nothing to compare with
    with_baseline = assess_windows(rows, baselines=[LatencyBaseline("c1", 2, "Produce", 10.0)],
                                   config=config)[-1]
    v = next(v for v in with_baseline.api_verdicts if (v.row.broker, v.row.api) == (2, "Produce"))
    assert (v.baseline_ms, v.slow_vs_history, v.suspect) == (10.0, True, True)


def test_leader_dropping_all_followers_from_isr_points_at_the_leader():
    shrink_all = [IsrShrink("c1", start(0), 3, "orders", 0, (1, 2, 3), (3,))]
    got = common_party(replication_waits({}, shrink_all), 3, replication_bar(CONFIG))
    assert (got.party, got.server_at_fault, got.candidates) == (None, False, ())


@pytest.mark.parametrize("last_window,detected", [
    (LAST - 1, False),  # first faulty window: 1 of 3
    (LAST, True),       # second: 2 of 3, detected
    (LAST + 1, True),   # first clear window: still 2 of the last 3 (decay)
    (LAST + 2, False),  # second clear window: 1 of 3, cleared
], ids=["first_faulty_window", "second_faulty_window", "decays_one_window",
        "cleared_after_two_clear_windows"])
def test_persistence_and_decay(last_window, detected):
    rows = replaced(healthy(windows=range(last_window + 1)), 2, "Produce", FAULT, **SLOW_LOCAL)
    got = {d.entity for d in detect_slow_brokers(rows, config=CONFIG)}
    assert got == ({"broker:2"} if detected else set())


def test_bursty_pause_that_spares_a_window_still_fires():
    rows = replaced(healthy(), 2, "Produce", {LAST - 2, LAST}, **SLOW_LOCAL)
    assert {d.entity for d in detect_slow_brokers(rows, config=CONFIG)} == {"broker:2"}


def test_a_victim_briefly_slow_itself_stays_the_victim():
    # delayed-broker-quiet-5b live: leaders wait on follower 3 (victims) in both windows,
    # and in the newer one leader 1's Fetch is also slow in its own ResponseQueue (a host
    # hiccup). Its culprit verdict held one window of the two: the finding names the
    # cause that persisted, the follower it waits on. Five brokers: two blamed of three
    # would be cluster-wide.
    brokers, both = (1, 2, 3, 4, 5), {LAST - 1, LAST}
    fetches = [FollowerFetchWindow("c1", start(w), leader, follower, 40,
                                   700.0 if w in both and follower == 3 else 5.0)
               for w in range(LAST + 1) for leader in brokers for follower in brokers
               if leader != follower]
    rows = healthy(brokers=brokers)
    for leader in (1, 2):
        rows = replaced(rows, leader, "Produce", both, total=820.0, remote=800.0)

    def found(slow_fetch_windows):
        slow = replaced(rows, 1, "Fetch", slow_fetch_windows, rsq=400.0)
        return {d.entity: d.cause for d in detect_slow_brokers(
            slow, follower_fetches=fetches, config=CONFIG)}

    assert found({LAST}) == {"broker:1": "remote_produce_slow_follower",
                             "broker:2": "remote_produce_slow_follower",
                             "broker:3": "slow_follower"}
    # slow itself in both windows: the culprit persisted
    assert found(both)["broker:1"] == "network_threads_saturated"


def test_windows_that_disagree_on_whose_fault_wait_for_a_third():
    # starved-handlers-5b live (monitor niced): in the fault's first window leader 1's
    # Produce waited on follower 3 (its fetches silent ~1 s at every leader); from the
    # next, leader 1 was slow in its own request queue, its Produce waiting on no follower
    # in particular. Victim then culprit is no cause yet; the third window decides.
    brokers, first = (1, 2, 3, 4, 5), LAST - 1
    fetches = [FollowerFetchWindow("c1", start(w), leader, follower, 40,
                                   900.0 if w == first and follower == 3 else 5.0)
               for w in range(LAST + 2) for leader in brokers for follower in brokers
               if leader != follower]
    rows = healthy(windows=range(LAST + 2), brokers=brokers)
    rows = replaced(rows, 1, "Produce", {first}, total=880.0, remote=860.0)
    rows = replaced(rows, 2, "Produce", {first}, total=880.0, remote=860.0)
    rows = replaced(rows, 1, "Produce", {LAST, LAST + 1}, total=990.0, rq=380.0,
                    local=270.0, remote=900.0)
    rows = replaced(rows, 1, "Fetch", {LAST, LAST + 1}, total=1200.0, rq=850.0,
                    remote=500.0)

    def found(last):
        got = [r for r in rows if window_of(r) <= last]
        return {d.entity: d.cause for d in detect_slow_brokers(
            got, follower_fetches=[f for f in fetches if window_of(f) <= last],
            config=CONFIG)}

    assert "broker:1" not in found(LAST)
    assert found(LAST + 1)["broker:1"] == "request_handlers_saturated"


def test_a_named_culprit_is_not_replaced_by_a_newer_unattributed_window():
    # freeze-long-3b live (broker 2 frozen 1.5 s of every 2 s): its finding was
    # slow_follower and leader_replication_stalled, then remote_produce_unknown_follower in
    # the fault's last window, and ended with that vaguer cause. A window that blames no
    # one supports any cause: the finding names the culprit that persisted, the newest.
    rows = replaced(healthy(), 2, "Produce", {LAST - 1}, **SLOW_LOCAL)
    rows = replaced(rows, 2, "Produce", {LAST}, total=910.0, remote=900.0)
    (d,) = detect_slow_brokers(rows, config=CONFIG)
    assert (d.entity, d.cause) == ("broker:2", "local_disk_or_page_cache")
    # The other way round, the newer culprit is reported too.
    rows = replaced(healthy(), 2, "Produce", {LAST - 1}, total=910.0, remote=900.0)
    rows = replaced(rows, 2, "Produce", {LAST}, **SLOW_LOCAL)
    (d,) = detect_slow_brokers(rows, config=CONFIG)
    assert (d.entity, d.cause) == ("broker:2", "local_disk_or_page_cache")
    # Two culprit causes: the newest.
    rows = replaced(healthy(), 2, "Produce", {LAST - 1}, total=910.0, rq=900.0,
                    local=4.0)
    rows = replaced(rows, 2, "Produce", {LAST}, **SLOW_LOCAL)
    (d,) = detect_slow_brokers(rows, config=CONFIG)
    assert d.cause == "local_disk_or_page_cache"


def test_a_named_follower_is_not_replaced_by_a_newer_window_that_names_none():
    # delayed-broker-5b (replay): leader 5 waited on the delayed broker 2 in every window;
    # one window could not confirm broker 2 at the other leaders, and the finding said "no
    # follower stands out" for one evaluation between two that named broker 2.
    rows = replaced(healthy(), 1, "Produce", FAULT, total=720.0, remote=700.0)
    named = follower_fetches({LAST - 1}, {(1, 3): 1500.0, (2, 3): 1500.0})
    got = {d.entity: d.cause for d in detect_slow_brokers(rows, follower_fetches=named,
                                                          config=CONFIG)}
    assert got["broker:1"] == "remote_produce_slow_follower", got
    # Named in the newest window only, the same.
    newest = follower_fetches({LAST}, {(1, 3): 1500.0, (2, 3): 1500.0})
    got = {d.entity: d.cause for d in detect_slow_brokers(rows, follower_fetches=newest,
                                                          config=CONFIG)}
    assert got["broker:1"] == "remote_produce_slow_follower", got
    # Named in neither: no follower stands out, and the finding says so.
    got = {d.entity: d.cause for d in detect_slow_brokers(rows, config=CONFIG)}
    assert got["broker:1"] == "remote_produce_unknown_follower", got


def test_the_follower_every_leader_waits_on_most_is_named_under_peer_ratio(monkeypatch):
    # freeze-short-3b live: follower 2, frozen 0.7 s of every second, held its two leaders
    # back ~700 ms while a loaded host lifted their other follower to 170-374 ms: under
    # peer_ratio (3) at one leader of two, so it was refuted there and the window was
    # called cluster-wide. It is the worst follower at every leader it follows by
    # WORST_MARGIN (1.5), past the threshold: named.
    rows = healthy()
    for leader in (1, 2):
        rows = replaced(rows, leader, "Produce", FAULT, total=720.0, remote=700.0)
    gaps = {(1, 3): 706.0, (1, 2): 170.0, (2, 3): 694.0, (2, 1): 374.0}
    fetches = follower_fetches(FAULT, gaps)
    got = {d.entity: d.cause for d in detect_slow_brokers(rows, follower_fetches=fetches,
                                                          config=CONFIG)}
    assert got == {"broker:1": "remote_produce_slow_follower",
                   "broker:2": "remote_produce_slow_follower", "broker:3": "slow_follower"}
    # Without the margin rule it is not.
    with monkeypatch.context() as m:
        m.setattr(blame, "WORST_MARGIN", float("inf"))
        assert "broker:3" not in {d.entity for d in detect_slow_brokers(
            rows, follower_fetches=fetches, config=CONFIG)}
    # A host stall: every follower 400-560 ms late everywhere, none by the margin at
    # every leader it follows: no follower is named.
    stall = {(1, 2): 420.0, (1, 3): 560.0, (2, 1): 450.0, (2, 3): 400.0,
             (3, 1): 430.0, (3, 2): 480.0}
    got = {d.entity: d.cause for d in detect_slow_brokers(
        rows, follower_fetches=follower_fetches(FAULT, stall), config=CONFIG)}
    assert "slow_follower" not in got.values(), got


def test_a_loaded_hosts_chance_lag_at_two_leaders_names_no_follower():
    # The 3-broker live matrix of 20261201T195748Z, just before freeze-long-3b's fault:
    # follower 3 held leader 1 back 373 ms (its other follower 178 ms) and leader 2 399 ms
    # (263 ms), the worst at both by 1.5x and past the threshold, with nothing wrong with
    # it: paged HIGH as a slow follower. Under WORST_MIN_MS (500) at a leader, the
    # margin alone names nobody; a frozen follower is 690-1,070 ms late at each.
    rows = healthy()
    for leader in (1, 2):
        rows = replaced(rows, leader, "Produce", FAULT, total=720.0, remote=700.0)
    lag = {(1, 3): 373.0, (1, 2): 178.0, (2, 3): 399.0, (2, 1): 263.0}
    got = {d.entity: d.cause for d in detect_slow_brokers(
        rows, follower_fetches=follower_fetches(FAULT, lag), config=CONFIG)}
    assert "slow_follower" not in got.values(), got
    # The same lags at the level a frozen follower shows are named.
    frozen = {k: (v * 1.9 if k[1] == 3 else v) for k, v in lag.items()}
    got = {d.entity: d.cause for d in detect_slow_brokers(
        rows, follower_fetches=follower_fetches(FAULT, frozen), config=CONFIG)}
    assert got.get("broker:3") == "slow_follower", got


def test_detection_within_60_seconds_of_fault_start():
    # The fault starts 3 s into window 8. Evaluate as each window closes; the first
    # detection must have its evidence complete within 2 windows of the fault, leaving
    # the rest of the 60-second budget to gold's watermark and the trigger interval.
    fault_start = start(LAST - 1) + 3_000
    rows = replaced(healthy(), 2, "Produce", FAULT, **SLOW_LOCAL)
    for w in range(LAST + 1):
        closed = [r for r in rows if r.window_start_ms <= start(w)]
        if detect_slow_brokers(closed, config=CONFIG):
            evidence_complete_ms = start(w) + W
            break
    else:
        pytest.fail("never detected")
    assert evidence_complete_ms - fault_start <= 2 * W
    assert evidence_complete_ms - fault_start + 2 * W <= 60_000


# Rule 1b's floor out of reach: no row is judged on its corroborated follower.
RULE_1B_OFF = 1_000_000_000


def test_a_pooled_verdict_is_persistent_on_its_own(monkeypatch):
    # delayed-broker-5b live: leaders held back 1 s served 30-40 Produce requests a window,
    # so their first verdict pooled three windows and persistence waited 10 s more for the
    # next. Here the leaders held back by delayed follower 3 serve 40 a window: the
    # first window whose pool holds enough requests (three windows, each over the
    # threshold) already speaks for three windows, so the follower and its victims are
    # detected there, not a window later; one quiet window over the threshold is not.
    starving = {LAST - 3, LAST - 2, LAST - 1}
    rows = healthy(windows=range(LAST))
    for leader in (1, 2):
        rows = replaced(rows, leader, "Produce", starving, total=1200.0, remote=1180.0,
                        requests=40)
    fetches = [f for f in follower_fetches(starving, {(1, 3): 500.0, (2, 3): 510.0})
               if window_of(f) < LAST]
    got = {d.entity: d.cause for d in detect_slow_brokers(rows, follower_fetches=fetches,
                                                          config=CONFIG)}
    assert got == {"broker:1": "remote_produce_slow_follower",
                   "broker:2": "remote_produce_slow_follower", "broker:3": "slow_follower"}
    # Without rule 1b (each 40-request window judged alone on its corroborated follower):
    # the same pool just over the threshold (400 ms: each window's TP99 is about its one
    # slowest request) is weak evidence, it counts for its own window only, as before.
    edge = healthy(windows=range(LAST))
    for leader in (1, 2):
        edge = replaced(edge, leader, "Produce", starving, total=400.0, remote=380.0,
                        requests=40)
    # One window fewer over the threshold: the pool never holds enough requests.
    short = [r for r in rows if window_of(r) != LAST - 3 or r.broker not in (1, 2)
             or r.api != "Produce"]
    short += [with_(produce(b, LAST - 3), requests=40) for b in (1, 2)]
    with monkeypatch.context() as m:
        m.setattr(rules, "CORROBORATED_MIN_REQUESTS", RULE_1B_OFF)
        assert not detect_slow_brokers(edge, follower_fetches=fetches, config=CONFIG)
        assert not detect_slow_brokers(short, follower_fetches=fetches, config=CONFIG)
    # With it, the windows are judged one by one: the follower, late at both its leaders,
    # is named from the first two.
    got = {d.entity: d.cause for d in detect_slow_brokers(short, follower_fetches=fetches,
                                                          config=CONFIG)}
    assert got["broker:3"] == "slow_follower", got


def _quiet_leaders(slow_windows, requests=25):
    """Leaders 1 and 2 serve `requests` Produce requests a window (too few to judge one
    alone, or two pooled), at 700 ms in `slow_windows`."""
    rows = healthy()
    for leader in (1, 2):
        rows = replaced(rows, leader, "Produce", set(range(LAST + 1)), requests=requests)
        rows = replaced(rows, leader, "Produce", slow_windows, total=700.0, remote=690.0,
                        requests=requests)
    return rows


def test_quiet_leaders_waiting_on_a_follower_late_everywhere_are_judged_window_by_window(
        monkeypatch):
    # Rule 1b (freeze-short-5b live: leaders serving ~26 Produce requests a window pooled
    # 100 only after four windows): follower 3 frozen 0.7 s of every second is late at
    # both its leaders, whose few writes wait for it: named from the fault's first two
    # windows, not after a pool of four.
    fault = {LAST - 1, LAST}
    rows = _quiet_leaders(fault)
    fetches = follower_fetches(fault, {(1, 3): 700.0, (2, 3): 700.0})
    got = {d.entity: d.cause for d in detect_slow_brokers(rows, follower_fetches=fetches,
                                                          config=CONFIG)}
    assert got == {"broker:1": "remote_produce_slow_follower",
                   "broker:2": "remote_produce_slow_follower", "broker:3": "slow_follower"}
    # Without rule 1b, two windows of 25 never pool enough.
    with monkeypatch.context() as m:
        m.setattr(rules, "CORROBORATED_MIN_REQUESTS", RULE_1B_OFF)
        assert not detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
    # The follower's fetches are the evidence: without them, or with a follower late at
    # one leader only (fine at the other it follows), a few slow writes are no verdict.
    assert not detect_slow_brokers(rows, config=CONFIG)
    one = _quiet_leaders(fault)
    one = replaced(one, 2, "Produce", fault, total=8.0, remote=3.0, requests=25)
    assert not detect_slow_brokers(one, follower_fetches=follower_fetches(fault, {(1, 3): 700.0}),
                                   config=CONFIG)
    # Fewer requests than CORROBORATED_MIN_REQUESTS, even pooled over the two windows.
    few = _quiet_leaders(fault, requests=8)
    assert not detect_slow_brokers(few, follower_fetches=fetches, config=CONFIG)


def test_many_clusters_are_judged_apart():
    other = [replace(r, cluster="c2") for r in replaced(healthy(), 1, "Produce", FAULT,
                                                          **SLOW_LOCAL)]
    rows = replaced(healthy(), 2, "Produce", FAULT, **SLOW_LOCAL) + other
    got = {(d.cluster, d.entity) for d in detect_slow_brokers(rows, config=CONFIG)}
    assert got == {("c1", "broker:2"), ("c2", "broker:1")}


@pytest.mark.parametrize("values,message", [
    ({"persistence_windows": 4}, "persistence_windows (4) must be <= "
                                 "slow_broker.persistence_lookback_windows (3)"),
    ({"api_threshold_ms": {"Metadata": -1}}, "api_threshold_ms.Metadata must be a positive"),
    ({"shared_cause_share": 1.5}, "must be <= 1"),
])
def test_config_errors_name_the_key(values, message):
    with pytest.raises(ConfigError) as e:
        _build_section(SlowBrokerSection, values, "kmon.toml", "slow_broker")
    assert message in str(e.value)


@pytest.mark.parametrize("values", [[1.0], [1.0, 2.0], [1.0, 2.0, 3.0], [5.0, 5.0, 5.0, 9.0],
                                    [1.0, 4.0, 4.0, 7.0, 8.0, 100.0]])
def test_median_without_one_value_matches_the_obvious_way(values):
    for v in values:
        rest = list(values)
        rest.remove(v)
        expected = statistics.median(rest) if rest else None
        assert median_without(sorted(values), v) == expected


@pytest.mark.parametrize("earlier,expected", [
    # 40 a window: three windows make the 100 (min_requests_per_window).
    ([(40, 900.0), (40, 700.0), (40, 800.0)], (3, 120, 700.0)),
    # A window under the threshold ends the pool before it has enough.
    ([(40, 900.0), (40, 250.0), (40, 800.0)], None),
    # So does a window with no row (no request at all).
    ([(40, 900.0), None, (40, 800.0)], None),
    # Enough already with the first earlier window: the older ones are not looked at.
    ([(70, 350.0), (40, 301.0)], (2, 110, 350.0)),
    # 10 a window never make 100 within POOL_WINDOWS (6).
    ([(10, 900.0)] * 8, None),
])
def test_low_traffic_windows_are_pooled_only_while_each_is_over_the_threshold(earlier, expected):
    assert rules.pool_quiet(40, 1000.0, 300.0, earlier,
                            CONFIG.min_requests_per_window) == expected


def test_a_window_under_the_threshold_is_never_pooled():
    assert rules.pool_quiet(40, 290.0, 300.0, [(400, 900.0)],
                            CONFIG.min_requests_per_window) is None


def test_a_quiet_broker_as_slow_as_it_usually_is_makes_no_stall():
    # Broker 2's usual Produce TP99 (an external baseline) is as high as in the stall: it
    # is not slow against its history, so broker 1 stays blamed alone in the window where
    # broker 2 is too quiet to judge.
    rows = _stalled(quiet_requests=65)
    usual = [LatencyBaseline("c1", 2, "Produce", 600.0)]
    by_window = {window_of(a): a for a in assess_windows(rows, baselines=usual, config=CONFIG)}
    assert by_window[LAST - 1].quiet_slow == set()
    assert not by_window[LAST - 1].cluster_wide
    quiet = {window_of(a): a for a in assess_windows(rows, config=CONFIG)}
    assert quiet[LAST - 1].quiet_slow == {2} and quiet[LAST - 1].cluster_wide


def test_without_quiet_brokers_only_judged_brokers_count(monkeypatch):
    rows = _stalled(quiet_requests=65)
    with monkeypatch.context() as m:
        m.setattr(blame, "QUIET_SLOW_MIN_REQUESTS", 1_000_000_000)
        found = {d.entity: d.cause for d in detect_slow_brokers(rows, config=CONFIG)}
    assert found == {"broker:1": "network_threads_saturated"}
    assert detect_slow_brokers(rows, config=CONFIG) == []


def test_a_victim_suspected_only_through_a_follower_that_is_not_found_is_no_finding():
    # rolling-restart-3b live (a loaded host after a crash-restart): every follower's fetch
    # gaps ran 100-700 ms at random. In one window follower 2 happened to be the latest at
    # both leaders and leader 1's Produce, 2.4x its usual, became a suspect only through
    # that (rule 4b); in the next leader 1 waited on no follower in particular. Follower 2
    # was not found slow, so the window that blamed it is no evidence about leader 1.
    rows = [with_(r, total=448.0, remote=440.0) if r.api == "Produce" else r
            for r in healthy()]
    rows = replaced(rows, 1, "Produce", set(range(LAST - 1)), total=235.0, remote=230.0)
    rows = replaced(rows, 1, "Produce", {LAST - 1}, total=567.0, remote=560.0)
    rows = replaced(rows, 1, "Produce", {LAST}, total=846.0, remote=840.0)
    gaps = {LAST - 1: {(1, 2): 579.0, (1, 3): 148.0, (3, 2): 535.0, (3, 1): 102.0,
                       (2, 1): 157.0, (2, 3): 181.0},
            LAST: {(1, 2): 191.0, (1, 3): 411.0, (3, 2): 285.0, (3, 1): 398.0,
                   (2, 1): 164.0, (2, 3): 391.0}}
    fetches = [f for w, g in gaps.items() for f in follower_fetches({w}, g)
               if window_of(f) == w]
    last = assess_windows(rows, follower_fetches=fetches, config=CONFIG)
    one_before = last[-2].brokers
    assert one_before[1].attribution.cause == "remote_produce_slow_follower"
    assert one_before[1].api_verdict.follower_corroborated
    assert not (one_before[1].api_verdict.slow_vs_history
                or one_before[1].api_verdict.slow_vs_peers)
    assert last[-1].brokers[1].attribution.cause == "remote_produce_unknown_follower"
    assert detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG) == []
    # The same leader slow by its own history in the first window is a victim all the same.
    rows = replaced(rows, 1, "Produce", {LAST - 1}, total=967.0, remote=960.0)
    (d,) = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
    assert (d.entity, d.cause) == ("broker:1", "remote_produce_slow_follower")
