"""Blame (rule 6), by a suspect row's dominant stage: its own stages make the broker the
culprit; an acks=all Remote wait is explained away over the leaders' waits on their
followers (detectors/explaining_away.py); slow sends are a few clients', or the broker's
send path when most are slow; Throttle is the quotas'; the rest is unattributed."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from typing import AbstractSet, Callable, Iterable, Mapping, Sequence

from core.findings import broker_entity
from core.signals import OWN_STAGES, REPLICATED_WRITE_APIS
from detectors.explaining_away import Bar, Blame, Waits, common_party, most_of
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import ClientSendWindow, FollowerFetchWindow, IsrShrink
from detectors.slow_broker.verdicts import (ApiVerdict, Attribution, BrokerVerdict, Role,
                                            SlowBrokerCause, attribution)

# A healthy follower fetches again within milliseconds; 1 s without one holds acks=all
# writes past 3x the threshold: late, whatever the others did.
LATE_FLOOR_MS = 1000.0
# On three brokers a leader has one other follower: a margin, not a median, names the
# worst everywhere, from this wait on (under it, a loaded host's chance lag).
WORST_MARGIN = 1.5
WORST_MIN_MS = 500.0
FOLLOWER_MEMORY_WINDOWS = 3   # a follower that stopped fetching is remembered this long
MAX_NAMED = 5                 # slow clients named in a finding (display only)
# A quiet broker counts toward cluster-wide from half the traffic floor (it can only take
# blame off a single broker).
QUIET_SLOW_MIN_REQUESTS = 50


# --- Replication waits: leader x follower ----------------------------------------------

def follower_holdback_ms(f: FollowerFetchWindow) -> float:
    """How long the leader waited on this follower: its longest silence between fetches or
    its slowest read of a response."""
    return max(f.max_fetch_gap_ms or 0.0, f.send_p99_ms or 0.0)


def holdback_view(fetches: Sequence[FollowerFetchWindow], window_start_ms: int,
                  last_seen: Mapping[int, Mapping[int, int]], leaders_logging: set[int],
                  window_ms: int) -> dict[int, dict[int, float]]:
    """holdback[leader][follower] in one window; a follower seen lately that sent nothing
    while its leader logged other requests held it back the whole window."""
    view: dict[int, dict[int, float]] = defaultdict(dict)
    for f in fetches:
        if f.window_start_ms == window_start_ms:
            view[f.leader][f.follower] = follower_holdback_ms(f)
    for leader, followers in last_seen.items():
        if leader not in leaders_logging:
            continue
        for follower, seen_ms in followers.items():
            if window_start_ms - seen_ms <= FOLLOWER_MEMORY_WINDOWS * window_ms:
                view[leader].setdefault(follower, float(window_ms))
    return dict(view)


def replication_waits(by_leader: Mapping[int, Mapping[int, float]],
                      shrinks: Iterable[IsrShrink] = (),
                      not_by_margin: Iterable[int] = ()) -> Waits:
    """The holdback matrix and how often each leader's ISR shrinks named each follower; a
    shrink to the leader alone names nobody (a stalled leader drops every follower)."""
    named: dict[int, Counter] = defaultdict(Counter)
    for x in shrinks:
        if tuple(x.isr_after) != (x.leader,):
            named[x.leader].update(r for r in x.out_of_sync if r != x.leader)
    return Waits(dict(by_leader), dict(named), frozenset(not_by_margin))


def replication_bar(config: SlowBrokerSection) -> Bar:
    return Bar(LATE_FLOOR_MS, config.threshold_ms, config.peer_ratio, WORST_MARGIN,
               WORST_MIN_MS)


def leader_blames(w: Waits, config: SlowBrokerSection) -> Callable[[int], Blame]:
    """Each leader's replication waits explained, judged once per window."""
    bar = replication_bar(config)
    return functools.cache(lambda leader: common_party(w, leader, bar))


# --- Rule 6: whose fault a suspect row is -------------------------------------------

# The broker's own stages and the cause each names.
OWN_STAGE_CAUSE = {"request_queue": SlowBrokerCause.REQUEST_HANDLERS_SATURATED,
                   "local": SlowBrokerCause.LOCAL_DISK_OR_PAGE_CACHE,
                   "response_queue": SlowBrokerCause.NETWORK_THREADS_SATURATED}
OWN_STAGE_CAUSES = frozenset(OWN_STAGE_CAUSE.values())


def attribute(v: ApiVerdict, blame_of: Callable[[int], Blame],
              sends: Sequence[ClientSendWindow], config: SlowBrokerSection) -> Attribution:
    """Whose fault a suspect row is, from its dominant stage."""
    broker, stage = v.row.broker, v.dominant_stage
    if stage in OWN_STAGE_CAUSE:
        return attribution(OWN_STAGE_CAUSE[stage], broker)
    if stage == "throttle":
        return attribution(SlowBrokerCause.QUOTA_THROTTLED)
    if stage == "send":
        return attribute_send(v, sends, config)
    if stage == "remote" and v.row.api in REPLICATED_WRITE_APIS:
        return attribute_replication(broker, blame_of(broker))
    return attribution(SlowBrokerCause.REMOTE_WAIT if stage == "remote"
                       else SlowBrokerCause.SLOW_UNATTRIBUTED)


def attribute_replication(broker: int, blame: Blame) -> Attribution:
    """An acks=all write waiting in Remote: the follower that explains it, the leader, or
    no one."""
    if blame.party is not None:
        via = "+".join(s for s, holds in (("isr_shrink", blame.named),
                                          ("fetch_holdback", blame.late)) if holds)
    else:
        via = "fetch_holdback" if blame.server_at_fault else "none"
    details = {"follower_evidence": via, "follower_holdback_ms": blame.wait_ms,
               "follower_holdback_elsewhere_ms": blame.elsewhere_ms,
               "follower_candidates": list(blame.candidates)}
    f = blame.party
    if f is not None:
        return attribution(SlowBrokerCause.REMOTE_PRODUCE_SLOW_FOLLOWER, f,
                           f"acks=all writes wait for follower broker {f}, which is slow (see "
                           f"its finding); moving leadership off broker {broker} would not "
                           f"help", {**details, "slow_follower": broker_entity(f)})
    if blame.server_at_fault:
        return attribution(SlowBrokerCause.LEADER_REPLICATION_STALLED, broker, "", details)
    return attribution(SlowBrokerCause.REMOTE_PRODUCE_UNKNOWN_FOLLOWER, None, "", details)


def slow_clients(sends: Sequence[ClientSendWindow], threshold: float) -> tuple[list, int]:
    """The broker's clients whose ResponseSend p99 is over the threshold (slowest first),
    and how many clients it had in the window."""
    worst: dict[str, float] = {}
    for s in sends:
        worst[s.client_id] = max(worst.get(s.client_id, 0.0), s.send_p99_ms)
    slow = sorted(((c, ms) for c, ms in worst.items() if ms >= threshold),
                  key=lambda x: (-x[1], x[0]))
    return slow, len(worst)


def attribute_send(v: ApiVerdict, sends: Sequence[ClientSendWindow],
                   config: SlowBrokerSection) -> Attribution:
    """Slow ResponseSend: a few slow clients are theirs; most, the broker's network path;
    without per-client data, unattributed."""
    slow, seen = slow_clients(sends, v.threshold_ms)
    named = [{"client_id": c, "send_p99_ms": round(ms, 3)} for c, ms in slow[:MAX_NAMED]]
    if not seen:
        return attribution(SlowBrokerCause.RESPONSE_SEND_SLOW)
    details = {"slow_clients": named, "clients_seen": seen}
    if slow and not most_of(len(slow), seen, config.shared_cause_share):
        names = ", ".join(c for c, _ in slow[:MAX_NAMED])
        return attribution(SlowBrokerCause.CLIENT_SLOW_READ, None, f"clients read their "
                           f"responses slowly ({names}); not a broker fault", details)
    return attribution(SlowBrokerCause.NETWORK_SEND_SLOW, None, f"{len(slow)} of its {seen} "
                       f"clients receive slowly: the broker's network path rather than one "
                       f"client", details)


# --- Victims to culprits, and cluster-wide ---------------------------------------------

def blame_slow_followers(brokers: dict[int, BrokerVerdict]) -> None:
    """Every follower a victim names gets a culprit verdict listing the leaders it holds
    back: its own when it is a culprit itself, else slow_follower."""
    for v in list(brokers.values()):
        f = v.attribution.blamed_broker
        if v.attribution.role is not Role.VICTIM or f is None:
            continue
        blamed = brokers.get(f)
        if blamed is None or blamed.attribution.role is not Role.CULPRIT:
            own = blamed
            blamed = BrokerVerdict(f, attribution(SlowBrokerCause.SLOW_FOLLOWER, f),
                                   own.api_verdict if own else None,
                                   slow_apis=own.slow_apis if own else [],
                                   others=[own, *own.others] if own else [])
            brokers[f] = blamed
        blamed.held_back_leaders.append(v.broker)
        blamed.victim_latency_ms = max(blamed.victim_latency_ms, v.api_verdict.latency_ms)


def waits_on_culprit(v: ApiVerdict, waits: Waits, culprits: AbstractSet[int]) -> bool:
    """Whether the row is an acks=all write waiting in Remote at a leader one of whose
    followers is a culprit (in its own stages, or a slow follower): that broker explains
    the wait. A leader whose followers the fetches do not show may wait on anyone."""
    if not (culprits and v.dominant_stage == "remote" and v.row.api in REPLICATED_WRITE_APIS):
        return False
    followers = waits.by_server.get(v.row.broker, {})
    return not followers or bool(culprits & set(followers))


def is_cluster_wide(blamed: set[int], with_traffic: set[int], config: SlowBrokerSection) -> bool:
    """Most brokers slow at once (`most_of`): no one broker's fault."""
    return most_of(len(blamed), len(with_traffic), config.shared_cause_share)


def quiet_but_slow(verdicts: Sequence[ApiVerdict], explained: AbstractSet[int],
                   config: SlowBrokerSection) -> set[int]:
    """Brokers too quiet to judge but slow in their own stages all the same (over the
    threshold and their history, not `explained` by a disruption): blamed for nothing,
    counted toward cluster-wide, since a stall of the host cuts quiet brokers' traffic."""
    return {v.row.broker for v in verdicts
            if not v.enough_traffic and v.row.broker not in explained
            and v.row.requests >= QUIET_SLOW_MIN_REQUESTS
            and v.over_threshold and v.slow_vs_history and v.dominant_stage in OWN_STAGES}
