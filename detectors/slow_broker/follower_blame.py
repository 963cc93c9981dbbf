"""Which follower holds a leader's acks=all writes back, or whether the leader itself is
slow to serve replication (the package docstring, "Slow-follower attribution")."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import FollowerFetchWindow, IsrShrink
from detectors.slow_broker.latency import MIN_REFERENCE_MS

# How many windows a leader remembers a follower that stopped sending fetches.
FOLLOWER_MEMORY_WINDOWS = 3
# A follower that leaves its leader waiting this long is late: a healthy fetcher fetches
# again within milliseconds, and 1 s without one holds every acks=all write past 3x the
# latency threshold.
LATE_FLOOR_MS = 1000.0
# The worst follower at every leader it follows by this margin is late everywhere: on
# three brokers a leader has one other follower, so a margin, not a median.
WORST_MARGIN = 1.5
# The margin names a follower only from this holdback at each leader: under it a loaded
# host's chance lag looks the same.
WORST_MIN_MS = 500.0


@dataclass(frozen=True)
class FollowerBlame:
    follower: int | None          # the follower that holds the leader back, if one does
    leader_at_fault: bool         # every follower waited on here fetches fine elsewhere
    via: str                      # isr_shrink | fetch_holdback | none
    holdback_ms: float | None     # the blamed follower's holdback at this leader
    elsewhere_ms: float | None    # its median holdback at the other leaders it follows
    candidates: tuple[int, ...] = ()


def follower_holdback_ms(f: FollowerFetchWindow) -> float:
    """How long the leader waited on this follower outside purgatory: its longest silence
    between fetches, or how slowly it read its responses."""
    return max(f.max_fetch_gap_ms or 0.0, f.send_p99_ms or 0.0)


def holdback_view(fetches: Sequence[FollowerFetchWindow], window_start_ms: int,
                  last_seen: Mapping[int, Mapping[int, int]], leaders_logging: set[int],
                  window_ms: int) -> dict[int, dict[int, float]]:
    """holdback[leader][follower] in one window.

    A follower the leader saw in the last FOLLOWER_MEMORY_WINDOWS windows that sent
    nothing in this one, while the leader logged other requests, stopped fetching: it
    held the leader back the whole window. (If the leader logged nothing, it is the one
    that stopped.) The memory is short because replicas move: a follower reassigned away
    must not stay "missing" for the rest of the input.
    """
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


@dataclass(frozen=True)
class FollowerView:
    """What the leaders saw of their followers in one window, indexed both ways, and the
    brokers a known disruption keeps from being named by margin alone (disruptions.py)."""
    by_leader: Mapping[int, Mapping[int, float]]    # leader -> follower -> holdback ms
    by_follower: Mapping[int, Mapping[int, float]]  # follower -> leader -> holdback ms
    shrinks_by_leader: Mapping[int, Sequence[IsrShrink]]
    not_by_margin: frozenset[int] = frozenset()

    @classmethod
    def build(cls, by_leader: Mapping[int, Mapping[int, float]],
              shrinks: Iterable[IsrShrink] = (),
              not_by_margin: Iterable[int] = ()) -> "FollowerView":
        by_follower: dict[int, dict[int, float]] = defaultdict(dict)
        for leader, followers in by_leader.items():
            for follower, ms in followers.items():
                by_follower[follower][leader] = ms
        by_shrinker: dict[int, list[IsrShrink]] = defaultdict(list)
        for x in shrinks:
            by_shrinker[x.leader].append(x)
        return cls(dict(by_leader), dict(by_follower), dict(by_shrinker),
                   frozenset(not_by_margin))


def isr_shrink_names(shrinks: Sequence[IsrShrink], leader: int) -> Counter:
    """How often each replica was named out of sync by this leader's shrinks.

    A shrink that leaves the leader alone in the ISR names nobody: a leader that stalled
    drops all its followers at once when it resumes, which points at the leader.
    """
    names: Counter = Counter()
    for x in shrinks:
        if tuple(x.isr_after) != (leader,):
            names.update(r for r in x.out_of_sync if r != leader)
    return names


def holdback_elsewhere(view: FollowerView, follower: int, leader: int) -> float | None:
    """The follower's median holdback at the other leaders it follows, None if none see it."""
    seen = [ms for other, ms in view.by_follower.get(follower, {}).items() if other != leader]
    return statistics.median(seen) if seen else None


def stands_out(follower: int, mine: Mapping[int, float], config: SlowBrokerSection) -> bool:
    """Far later than the leader's other followers (needs at least one other)."""
    others = [h for g, h in mine.items() if g != follower]
    if follower not in mine or not others:
        return False
    return mine[follower] >= config.peer_ratio * max(statistics.median(others),
                                                     MIN_REFERENCE_MS)


def late_at(follower: int, mine: Mapping[int, float], config: SlowBrokerSection) -> bool:
    """The leader waited on this follower: past the holdback floor, or long enough to make
    an acks=all TP99 slow (the latency threshold) while its other followers kept up.

    The second half names a follower frozen in short bursts (0.7 s of every second, seen
    on the real cluster): its gaps stay under the floor, but at every leader it follows
    it is the one follower that lags, and without it every leader looked slow at once
    (a cluster-wide event with no broker named).
    """
    h = mine.get(follower)
    if h is None:
        return False
    return h >= LATE_FLOOR_MS or (
        h >= config.threshold_ms and stands_out(follower, mine, config))


def worst_everywhere(view: FollowerView, follower: int, config: SlowBrokerSection) -> bool:
    """At every leader it follows (two at least), the follower held the leader back past
    threshold_ms and WORST_MIN_MS, and WORST_MARGIN x longer than any
    other follower of that leader: the one follower every leader waits on most, by a
    margin, under the floor and under peer_ratio. On three brokers a leader has one
    other follower to compare with, and a loaded host lifts it now and then
    (freeze-short-3b live: broker 2 at 694 ms against 374 ms at leader 3, 1.9x, and at
    706 ms against 170 ms at leader 1). The floor under it (WORST_MIN_MS) keeps a
    loaded host's chance lags out: on the same cluster a healthy follower was now and then
    340-560 ms late at both its leaders, 1.5-8x the other follower there.

    A broker a known disruption exempts (`view.not_by_margin`: one warming up after a
    restart, disruptions.py) is not named by the margin: a fresh JVM on a loaded host lags
    like that for minutes. Past the floor, or standing out by peer_ratio at most of its leaders, it
    is still named."""
    leaders = view.by_follower.get(follower, {})
    if len(leaders) < 2 or follower in view.not_by_margin:
        return False
    least = max(config.threshold_ms, WORST_MIN_MS)
    for leader, here in leaders.items():
        others = [h for g, h in view.by_leader.get(leader, {}).items() if g != follower]
        if (not others or here < least
                or here < WORST_MARGIN * max(max(others), MIN_REFERENCE_MS)):
            return False
    return True


def late_elsewhere(view: FollowerView, follower: int, leader: int,
                   config: SlowBrokerSection) -> bool | None:
    """Is the follower late at the other leaders it follows too (slow everywhere)? Its
    median holdback there past the floor, or late (`late_at`) at most of them, or the
    worst follower at every leader it follows (`worst_everywhere`); None when no other
    leader sees it."""
    others = {other: view.by_leader.get(other, {})
              for other in view.by_follower.get(follower, {}) if other != leader}
    if not others:
        return None
    if holdback_elsewhere(view, follower, leader) >= LATE_FLOOR_MS:
        return True
    if worst_everywhere(view, follower, config):
        return True
    return sum(late_at(follower, m, config) for m in others.values()) * 2 > len(others)


def serves_slowly(view: FollowerView, leader: int, config: SlowBrokerSection) -> bool:
    """Every follower of `leader` waits on it while keeping up at the other leaders it
    follows: the leader is slow to serve replication (its own network or its fetch path),
    even when the waits stay under the holdback floor.

    Each follower's holdback here is at least threshold_ms (long enough to make an acks=all
    TP99 slow) and at least twice its median holdback at its other leaders, which is under
    threshold_ms. A follower no other leader sees cannot tell, so the leader is not judged
    (delayed-broker-5b live: every byte to and from broker 2 delayed 250 ms; its three
    followers waited 550-760 ms at it and 30-240 ms at the others, under the 1,000-ms
    floor. Every follower about as late everywhere, a starved host, is not this: their
    median elsewhere is over the threshold.)
    """
    mine = view.by_leader.get(leader, {})
    if not mine:
        return False
    for follower, here in mine.items():
        elsewhere = holdback_elsewhere(view, follower, leader)
        if (elsewhere is None or here < config.threshold_ms
                or elsewhere >= config.threshold_ms or here < 2 * elsewhere):
            return False
    return True


def blame_follower(leader: int, view: FollowerView, config: SlowBrokerSection) -> FollowerBlame:
    """The follower that holds back acks=all Produce on `leader` (see the package docstring)."""
    mine = dict(view.by_leader.get(leader, {}))
    named = isr_shrink_names(view.shrinks_by_leader.get(leader, ()), leader)
    floor = LATE_FLOOR_MS
    # Every follower we know of named at once points at the leader, as above.
    all_named = bool(mine) and set(mine) <= set(named)
    candidates = sorted(set(named) | {f for f in mine if late_at(f, mine, config)
                                      or worst_everywhere(view, f, config)})
    confirmed, refuted = [], []
    for f in candidates:
        elsewhere = holdback_elsewhere(view, f, leader)
        slow_elsewhere = late_elsewhere(view, f, leader, config)
        if slow_elsewhere or (slow_elsewhere is not None and serves_slowly(view, f, config)):
            # Late everywhere, or late here and slow to serve its own followers: the
            # broker's own network or fetch path, slow both ways.
            confirmed.append((f, elsewhere))
        elif slow_elsewhere is not None:
            refuted.append((f, elsewhere))
        elif (f in named and not all_named) or stands_out(f, mine, config):
            confirmed.append((f, None))
    if confirmed:
        f, elsewhere = max(confirmed, key=lambda c: (mine.get(c[0], 0.0), named[c[0]], -c[0]))
        via = "+".join(source for source, holds in (("isr_shrink", f in named),
                                                    ("fetch_holdback", late_at(f, mine, config)
                                                     or worst_everywhere(view, f, config)))
                       if holds)
        return FollowerBlame(follower=f, leader_at_fault=False, via=via,
                             holdback_ms=mine.get(f), elsewhere_ms=elsewhere,
                             candidates=tuple(candidates))
    waited_on_all = bool(mine) and all(h >= floor for h in mine.values())
    if refuted and waited_on_all:
        elsewhere = [e for _, e in refuted]
    elif serves_slowly(view, leader, config):
        elsewhere = [holdback_elsewhere(view, f, leader) for f in mine]
    else:
        elsewhere = []
    if elsewhere:
        return FollowerBlame(follower=None, leader_at_fault=True, via="fetch_holdback",
                             holdback_ms=max(mine.values()), elsewhere_ms=max(elsewhere),
                             candidates=tuple(candidates))
    return FollowerBlame(follower=None, leader_at_fault=False, via="none", holdback_ms=None,
                         elsewhere_ms=None, candidates=tuple(candidates))
