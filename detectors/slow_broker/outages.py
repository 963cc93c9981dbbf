"""A broker that is down or restarting is not a slow broker: when each broker was out.

When a broker dies, its leaders' acks=all writes wait in Remote for it until the
controller fences it (broker.session.timeout.ms, 9 s by default) and the ISRs drop it;
when it comes back it reloads its logs and catches up as a follower, and the leaders wait
on it again until it is in sync. Seen in the matrix (coordinator-failover-3b, live): a kill
-9 of broker 2 made Produce on the other two brokers wait 9 s, then 0.6 s for two more
windows while it restarted, and the detector paged "slow follower: broker 2" for a broker
that was not slow but gone. Operators restart brokers every week; a restart must not page
as a slow broker.

Signals: the controller's lines on brokers' sessions (silver.log_events, controller log;
ingest/broker_log.py), as `BrokerStateChange`:

- broker_fenced: its session timed out, so it died or hung at most a session timeout
  before the line;
- broker_shutdown: it was granted a controlled shutdown (it leaves now);
- broker_registered: a new incarnation registered: it restarted (when no fence or shutdown
  came first, it died at most a session timeout before);
- broker_unfenced: it caught up with the metadata and is back.

`broker_outages` makes intervals of them: from the first sign (fence or registration
minus the session timeout, or the shutdown) to the next unfence of that broker plus
`grace_ms` (slow_broker.disruption_grace_s: the catch-up as a follower and the clients'
reconnects); an outage with no unfence yet is open.

The controller logs nothing while it is itself the broker that is gone (a cluster with one
KRaft controller, combined with a broker): it logs the fencing of its old registration
only once it is back, and a page on a partner came before that line was read (seen live:
throttled-cleaner-3b, broker 1's request handlers while broker 3, the only controller,
was killed and restarted by the heal). So the other brokers' view counts too
(`unreachable_outages`): their replica fetchers' "Connection to node N ... could not be
established" lines (`BrokerUnreachable`, repeated at each reconnect attempt while N's port
refuses) make an outage of N from the first such line to the last, sightings less than
`UNREACHABLE_GAP_MS` apart being one; it is back at the last (its port answers again),
plus the grace.

detect.py sets aside, in a window that overlaps an outage of broker B, B's own verdict
and every verdict that blames B; they neither count for persistence nor name B. After the
grace, B's own-stage verdicts (its request queue, Local, response queue: a fresh JVM
warming up) stay set aside until WARMUP_GRACES x the grace after its unfence
(`warming_during`). A wait of its leaders on it as a follower counts again when B stands
out (past the holdback floor, or peer_ratio later than their other followers); the
warm-up lags a loaded host gives a fresh JVM, the worst follower by a small margin, name
nobody (follower_blame.worst_everywhere) and the leaders' waits that name no follower are
set aside (detect.py `set_aside_warmup`): seen live at 1ad524f on crash-restart-3b,
coordinator-failover-3b and unclean-rf2-3b, 80-130 s after B's unfence.

While B is out, the brokers that share partitions with it (`partners_of`: the leaders it
followed, its followers, the new leaders) take over its leaderships and its clients; on a
loaded host their own stages slow down (seen live: crash-restart-3b, broker 1's request
queue while broker 2 recovered; controller-failover-5b, broker 2's network threads). Such
a partner's own-stage verdict is a victim of the outage: a warning naming the brokers
out, no action, not counted as a slow broker for cluster-wide (detect.py
`loaded_by_outage`). A partner already blamed in the last window before the outage keeps
its verdict. The same holds while B, back, warms up (WARMUP_GRACES x the grace): its
partners serve its catch-up and its returning clients (rolling-restart-3b live at
1ad524f: brokers 1 and 2 paged network_threads_saturated 130-160 s after the last
restarted broker was unfenced); the warning lists B under `brokers_back`. A partner still
slow after that is judged as any other. A broker that is slow without being out, or
without sharing partitions with one that is, keeps every verdict.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Mapping, Sequence

# Sightings of an unreachable broker less than this apart are one outage: 10 x the
# reconnect.backoff.max.ms default (1 s) at which the other brokers' fetchers retry.
UNREACHABLE_GAP_MS = 10_000
# A restarted broker's own-stage slowness is set aside this many disruption graces from
# its unfence: a fresh JVM loads its logs, warms its page cache and compiles its code.
WARMUP_GRACES = 3


@dataclass(frozen=True)
class BrokerUnreachable:
    cluster: str
    broker: int          # the broker that could not be reached
    event_ms: int
    seen_by: int         # the broker whose replica fetcher could not connect


class BrokerState(StrEnum):
    FENCED = "broker_fenced"
    SHUTDOWN = "broker_shutdown"
    REGISTERED = "broker_registered"
    UNFENCED = "broker_unfenced"


@dataclass(frozen=True)
class BrokerStateChange:
    cluster: str
    broker: int          # the broker the controller's line is about
    event_ms: int
    state: BrokerState


@dataclass(frozen=True)
class BrokerOutage:
    cluster: str
    broker: int
    start_ms: int
    end_ms: int | None   # back (unfenced) plus the grace; None: not back yet
    how: str             # what began it: broker_fenced, broker_shutdown, broker_registered
    back_ms: int | None = None   # when it was unfenced; None: not back yet

    def overlaps(self, start_ms: int, end_ms: int) -> bool:
        return self.start_ms < end_ms and (self.end_ms is None or self.end_ms > start_ms)


def _start_of(c: BrokerStateChange, session_timeout_ms: int) -> int:
    if c.state is BrokerState.SHUTDOWN:
        return c.event_ms
    return c.event_ms - session_timeout_ms


def broker_outages(changes: Iterable[BrokerStateChange], *, session_timeout_ms: int,
                   grace_ms: int) -> list[BrokerOutage]:
    """Each broker's outages from the controller's lines (see the module docstring)."""
    by_broker: dict[tuple[str, int], list[BrokerStateChange]] = defaultdict(list)
    for c in changes:
        by_broker[(c.cluster, c.broker)].append(c)
    out = []
    for (cluster, broker), cs in sorted(by_broker.items()):
        cs.sort(key=lambda c: (c.event_ms, c.state is BrokerState.UNFENCED))
        opened: BrokerStateChange | None = None
        for c in cs:
            if c.state is BrokerState.UNFENCED:
                if opened is not None:
                    out.append(BrokerOutage(cluster, broker,
                                            _start_of(opened, session_timeout_ms),
                                            c.event_ms + grace_ms, str(opened.state),
                                            c.event_ms))
                    opened = None
            elif opened is None:
                opened = c
        if opened is not None:
            out.append(BrokerOutage(cluster, broker, _start_of(opened, session_timeout_ms),
                                    None, str(opened.state)))
    return out


def unreachable_outages(sightings: Iterable[BrokerUnreachable], *, gap_ms: int,
                        grace_ms: int) -> list[BrokerOutage]:
    """Outages of the brokers the others could not connect to (see the module docstring):
    one per run of sightings of a broker less than `gap_ms` apart."""
    by_broker: dict[tuple[str, int], list[int]] = defaultdict(list)
    for x in sightings:
        if x.broker != x.seen_by:
            by_broker[(x.cluster, x.broker)].append(x.event_ms)
    out = []
    for (cluster, broker), times in sorted(by_broker.items()):
        times.sort()
        first = last = times[0]
        for t in times[1:] + [None]:
            if t is not None and t - last < gap_ms:
                last = t
                continue
            out.append(BrokerOutage(cluster, broker, first, last + grace_ms,
                                    "broker_unreachable", last))
            if t is not None:
                first = last = t
    return out


def warming_during(outages: Sequence[BrokerOutage], cluster: str, start_ms: int, end_ms: int,
                   warmup_ms: int) -> set[int]:
    """The brokers of the cluster back from an outage (unfenced) less than `warmup_ms`
    before some time in [start_ms, end_ms): still warming up (WARMUP_GRACES x
    slow_broker.disruption_grace_s)."""
    return {o.broker for o in outages
            if o.cluster == cluster and o.back_ms is not None and o.back_ms < end_ms
            and o.back_ms + warmup_ms > start_ms}


def partners_of(out: Iterable[int], followers_seen: Mapping[int, Mapping[int, int]],
                new_leaders: Iterable[int] = ()) -> set[int] | None:
    """The brokers that share partitions with the brokers `out` and take their load: the
    leaders they followed, their own followers (their partitions' new leaders and their
    clients' new brokers) and the brokers that just became leaders. `followers_seen`
    (leader -> follower -> last window) is what the follower fetches showed so far. None
    when the fetches never showed any broker out (no follower data: every broker may be)."""
    out = set(out)
    leaders = {leader for leader, fs in followers_seen.items() if out & set(fs)}
    followers = {f for b in out for f in followers_seen.get(b, {})}
    if not leaders and not followers:
        return None
    return (leaders | followers | set(new_leaders)) - out


def out_during(outages: Sequence[BrokerOutage], cluster: str, start_ms: int,
               end_ms: int) -> set[int]:
    """The brokers of the cluster out at some time in [start_ms, end_ms)."""
    return {o.broker for o in outages if o.cluster == cluster and o.overlaps(start_ms, end_ms)}
