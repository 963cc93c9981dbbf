"""When each broker was out: the events of the broker_out and broker_warmup disruptions
(disruptions.py). A broker that died holds its leaders' acks=all writes until it is
fenced, and one that restarts catches up while its clients reconnect: out, not slow.

`broker_outages`: from the controller's lines on a broker's session (`BrokerStateChange`),
from its first sign (a fence or a new registration, a session timeout before the line; a
controlled shutdown, at once) to its next unfence (`back_ms`). `unreachable_outages`: a
controller that is the broker gone logs nothing, so the other brokers' replica fetchers
that cannot connect to it (`BrokerUnreachable`) make an outage too, from the first such
line to the last.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable

# Sightings of an unreachable broker less than this apart are one outage: 10 x the
# reconnect.backoff.max.ms default (1 s) at which the other brokers' fetchers retry.
UNREACHABLE_GAP_MS = 10_000


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
    """Each broker's outages from the controller's lines; `end_ms` adds the grace."""
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
    """Outages of the brokers the others could not connect to: one per run of sightings
    of a broker less than `gap_ms` apart, back at the last."""
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
