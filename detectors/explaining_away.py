"""Blame by explaining away, over a matrix of waits: servers (a leader, a broker) that
waited on parties (its followers, its clients). A party late at this server is confirmed
by the other servers it talks to (late there too) or refuted (on time there); the
confirmed party waited on longest explains the server's waits, and failing one, the
server itself does when every party waits on it and on no other server. What most of
the parties one thing serves share is that thing's fault (`most_of`)."""

from __future__ import annotations

import functools
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Mapping

# A reference below this is treated as this: ratios to ~0 ms mean nothing.
MIN_REFERENCE_MS = 1.0
# One party is never "most": the fewest slow parties of a shared cause.
MIN_SHARED = 2


@dataclass(frozen=True)
class Waits:
    """Who waited on whom in one window (`by_party`: the same matrix turned round);
    `named`: the parties each server reported late itself, and how often;
    `not_by_margin`: parties a known disruption keeps from being named by margin alone."""
    by_server: Mapping[int, Mapping[int, float]]
    named: Mapping[int, Counter] = field(default_factory=dict)
    not_by_margin: frozenset[int] = frozenset()

    @functools.cached_property
    def by_party(self) -> Mapping[int, Mapping[int, float]]:
        by_party: dict[int, dict[int, float]] = defaultdict(dict)
        for server, parties in self.by_server.items():
            for party, ms in parties.items():
                by_party[party][server] = ms
        return dict(by_party)


@dataclass(frozen=True)
class Bar:
    """When a party's wait at a server is late."""
    floor_ms: float       # late, whatever the server's other parties did
    threshold_ms: float   # late from here when it stands out from the others by `ratio`
    ratio: float
    margin: float         # or the worst at every server it talks to by this margin,
    margin_min_ms: float  # from this wait (and threshold_ms) at each


@dataclass(frozen=True)
class Blame:
    """What explains a server's waits: a party, the server itself, or neither."""
    party: int | None
    server_at_fault: bool
    wait_ms: float | None          # the party's wait here; the longest if the server's
    elsewhere_ms: float | None     # the party's median wait at its other servers
    candidates: tuple[int, ...] = ()
    named: bool = False            # the server itself named the party
    late: bool = False             # the party's wait here is late
    corroborated: bool = False     # the party's other servers find it late too


def stands_out(party: int, at: Mapping[int, float], ratio: float) -> bool:
    """Far later than the server's other parties (needs at least one other)."""
    others = [h for g, h in at.items() if g != party]
    if party not in at or not others:
        return False
    return at[party] >= ratio * max(statistics.median(others), MIN_REFERENCE_MS)


def late_at(w: Waits, party: int, server: int, bar: Bar) -> bool:
    """Past the floor, or past the threshold while standing out from the other parties
    (a party late in short bursts, under the floor, but the one that lags)."""
    at = w.by_server.get(server, {})
    h = at.get(party)
    if h is None:
        return False
    return h >= bar.floor_ms or (h >= bar.threshold_ms and stands_out(party, at, bar.ratio))


def worst_everywhere(w: Waits, party: int, bar: Bar) -> bool:
    """At every server it talks to (two at least), past the threshold and margin_min_ms
    and `margin` x later than any other party there; not for a party in `not_by_margin`,
    nor for one that is a server too whose own parties wait on it past the threshold
    unless it explains that itself (`server_explains`): where every party waits at every
    server, the worst of them is no cause."""
    servers = w.by_party.get(party, {})
    if len(servers) < 2 or party in w.not_by_margin:
        return False
    least = max(bar.threshold_ms, bar.margin_min_ms)
    for server, here in servers.items():
        others = [h for g, h in w.by_server.get(server, {}).items() if g != party]
        if not others or here < least or here < bar.margin * max(max(others), MIN_REFERENCE_MS):
            return False
    own = w.by_server.get(party, {})
    return all(h < bar.threshold_ms for h in own.values()) or server_explains(w, party, bar)


def wait_elsewhere(w: Waits, party: int, server: int) -> float | None:
    """The party's median wait at its other servers, None if no other sees it."""
    seen = [ms for other, ms in w.by_party.get(party, {}).items() if other != server]
    return statistics.median(seen) if seen else None


def late_elsewhere(w: Waits, party: int, server: int, bar: Bar) -> bool | None:
    """Do the party's other servers find it late too (its median wait there past the
    floor, late at most of them, or the worst everywhere)? None: no other sees it."""
    others = [s for s in w.by_party.get(party, {}) if s != server]
    if not others:
        return None
    if wait_elsewhere(w, party, server) >= bar.floor_ms or worst_everywhere(w, party, bar):
        return True
    return sum(late_at(w, party, s, bar) for s in others) * 2 > len(others)


def server_explains(w: Waits, server: int, bar: Bar) -> bool:
    """Every party waits here past the threshold and twice its median elsewhere, which
    is under the threshold: the server itself is slow (a party no other sees cannot
    tell)."""
    at = w.by_server.get(server, {})
    if not at:
        return False
    for party, here in at.items():
        elsewhere = wait_elsewhere(w, party, server)
        if (elsewhere is None or here < bar.threshold_ms
                or elsewhere >= bar.threshold_ms or here < 2 * elsewhere):
            return False
    return True


def common_party(w: Waits, server: int, bar: Bar) -> Blame:
    """Explaining away: what makes `server` wait. Candidates are the parties late here
    and those it named (naming every party names nobody). The other servers a candidate
    talks to confirm it (late there, or slow as a server itself) or refute it; with none
    to ask, a named or standing-out candidate is confirmed. The confirmed candidate
    waited on longest explains the waits; failing one, the server itself does when every
    party waited past the floor and one was refuted, or when `server_explains`."""
    here = w.by_server.get(server, {})
    named = w.named.get(server, Counter())
    all_named = bool(here) and set(here) <= set(named)
    candidates = sorted(set(named) | {p for p in here if late_at(w, p, server, bar)
                                      or worst_everywhere(w, p, bar)})
    confirmed, refuted = [], []
    for p in candidates:
        elsewhere = wait_elsewhere(w, p, server)
        corroborated = late_elsewhere(w, p, server, bar)
        if corroborated or (corroborated is not None and server_explains(w, p, bar)):
            confirmed.append((p, elsewhere, bool(corroborated)))
        elif corroborated is not None:
            refuted.append(elsewhere)
        elif (p in named and not all_named) or stands_out(p, here, bar.ratio):
            confirmed.append((p, None, False))
    if confirmed:
        # ties: the party named most often, then the lowest (candidates are in order)
        p, elsewhere, corroborated = max(confirmed, key=lambda c: (here.get(c[0], 0.0),
                                                                   named[c[0]]))
        return Blame(p, False, here.get(p), elsewhere, tuple(candidates), named=p in named,
                     late=late_at(w, p, server, bar) or worst_everywhere(w, p, bar),
                     corroborated=corroborated)
    if refuted and here and all(h >= bar.floor_ms for h in here.values()):
        elsewhere = refuted
    elif server_explains(w, server, bar):
        elsewhere = [wait_elsewhere(w, p, server) for p in here]
    else:
        return Blame(None, False, None, None, tuple(candidates))
    return Blame(None, True, max(here.values()), max(elsewhere), tuple(candidates))


def most_of(slow: int, seen: int, share: float) -> bool:
    """More than `share` of the `seen` parties one thing serves slow at once, MIN_SHARED
    at least (one party is never "most"): that thing's fault, not theirs (the cluster's,
    not its brokers'; a broker's send path, not its clients')."""
    return slow >= MIN_SHARED and slow > share * seen
