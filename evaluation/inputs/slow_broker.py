"""The slow-broker detector's inputs that are not the request windows
(evaluation/inputs/request_windows.py reads those): the baselines' bounds and cache,
and what silver.log_events says of leaderships, outages and ISR shrinks.

- `LatencyBaseline` (read by request_windows.py `read_window_baselines`): per broker/API
  the median of the minutes' judged latency over the BASELINE_HISTORY_S before start_ms,
  minutes with enough traffic only (BASELINE_MINUTE_MIN_REQUESTS), and only when at
  least MIN_HISTORY_WINDOWS minutes exist (else the rule's own in-input baseline is
  used). The baseline ends at start_ms, so a slowness that lasts longer than half of
  BASELINE_HISTORY_S becomes the baseline: the peer comparison still catches it. Cached by
  `BaselineCache`.
- `IsrShrink` <- silver.log_events kind isr_shrink (leader = broker), plus isr_update
  ("ISR updated to ...", which names only the new ISR) when it removes replicas from the
  ISR last known for that partition on that broker (from any isr_*/leader_change line of
  the ISR_SEED_S before it) and no isr_shrink line already reported the same change
  (`shrinks_from_isr_events`).
- `BrokerOutage` (the events of the detector's broker_out and broker_warmup
  disruptions) <- the controller's lines on a broker's session and the broker's own line
  that it is shutting down (`broker_outages`): from its first sign (a fence or a new
  registration, a session timeout before the line; a shutdown, at once) to its next
  unfence (`back_ms`); and, since a controller that is the broker gone logs nothing, the
  other brokers' replica fetchers that cannot connect to it (`unreachable_outages`),
  from the first such line to the last.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Iterable, Mapping

from core.outages import BrokerOutage
from detectors.slow_broker import (
    IsrShrink,
    LatencyBaseline,
    SlowBrokerSection,
)
from core.disruptions import ReplicaStart

# How much history before the range each input reads (see the module docstring).
BASELINE_HISTORY_S = 3600
ISR_SEED_S = 600
# An "ISR updated to" line this soon after a "Shrinking ISR" line to the same ISR confirms
# that shrink rather than reporting another.
ISR_CONFIRM_S = 30
# A minute with fewer requests is too thin to describe a broker's usual latency: left out
# of the baseline.
BASELINE_MINUTE_MIN_REQUESTS = 50


# --- baselines ----------------------------------------------------------------------------------

class BaselineCache:
    """The slow-broker baselines (medians over the hour of gold.request_stages_1m before
    the range) move by a minute's worth at most per minute: read them again only when the
    range start has moved `refresh_s` past the last read. A live evaluation then saves
    one read most of the time; a replay passes no cache and reads every step."""

    def __init__(self, refresh_s: float = 60.0):
        self.refresh_ms = int(refresh_s * 1000)
        self._value: list[LatencyBaseline] = []
        self._start_ms: int | None = None

    def __call__(self, start_ms: int, read: Callable[[], list[LatencyBaseline]]
                 ) -> list[LatencyBaseline]:
        if (self._start_ms is None or start_ms < self._start_ms
                or start_ms - self._start_ms >= self.refresh_ms):
            self._value = read()
            self._start_ms = start_ms
        return self._value


# --- replica starts, outages, ISR shrinks (from silver.log_events) ------------------------------

def replica_starts_from(events: Iterable[Mapping[str, Any]], since_ms: int
                        ) -> list[ReplicaStart]:
    """When brokers started to lead or follow partitions: each "[Broker id=B] Leader (or
    Follower) <tp> ... starts at leader epoch E" line a broker logged about itself (kind
    leader_change; it leads when new_leader = broker) at or after since_ms that is a
    handover or a creation (core/disruptions.py): a follower line above
    epoch 0, thousands at a broker's restart, is neither."""
    starts = (ReplicaStart(e["cluster"], int(e["broker"]), int(e["ts_ms"]), e["topic"],
                           int(e["partition"]), int(e["leader_epoch"]),
                           e.get("new_leader") == e["broker"])
              for e in events
              if e["kind"] == "leader_change" and e.get("leader_epoch") is not None
              and e["leader_epoch"] >= 0 and e["ts_ms"] >= since_ms
              and e.get("topic") is not None and e.get("partition") is not None)
    return sorted((g for g in starts if g.is_handover or g.is_creation),
                  key=lambda g: g.event_ms)


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


def outages_from(events: Iterable[Mapping[str, Any]], config: SlowBrokerSection
                 ) -> list[BrokerOutage]:
    """When brokers were out, from the broker_fenced / broker_shutdown /
    broker_registered / broker_unfenced lines (the controller's, and a broker's own
    shutdown) and the other brokers' broker_unreachable lines."""
    states = {s.value for s in BrokerState}
    events = [e for e in events if e.get("subject_broker") is not None]
    changes = [BrokerStateChange(e["cluster"], int(e["subject_broker"]), int(e["ts_ms"]),
                                 BrokerState(e["kind"]))
               for e in events if e["kind"] in states]
    sightings = [BrokerUnreachable(e["cluster"], int(e["subject_broker"]), int(e["ts_ms"]),
                                   int(e["broker"]))
                 for e in events if e["kind"] == "broker_unreachable"]
    grace_ms = int(config.disruption_grace_s * 1000)
    return (broker_outages(changes,
                           session_timeout_ms=int(config.broker_session_timeout_s * 1000),
                           grace_ms=grace_ms)
            + unreachable_outages(sightings, gap_ms=UNREACHABLE_GAP_MS, grace_ms=grace_ms))


def shrinks_from_isr_events(rows: Iterable[Mapping[str, Any]], since_ms: int,
                            confirm_window_ms: int = ISR_CONFIRM_S * 1000) -> list[IsrShrink]:
    """ISR shrinks at or after since_ms from log_events rows of kinds isr_shrink,
    isr_update, isr_expand and leader_change (rows before since_ms give the ISR known).

    A "Shrinking ISR" line is a shrink. An "ISR updated to" line is one when it drops
    replicas from the ISR last known for the partition on that broker, unless a shrink
    line to the same ISR came shortly before it (the update confirms that shrink).
    """
    keyed: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("topic") is None or r.get("partition") is None:
            continue
        keyed[(r["cluster"], int(r["broker"]), r["topic"], int(r["partition"]))].append(r)
    out: list[IsrShrink] = []
    for (cluster, broker, topic, partition), events in keyed.items():
        events.sort(key=lambda r: int(r["ts_ms"]))
        known: tuple[int, ...] | None = None
        last_shrink: tuple[int, tuple[int, ...]] | None = None   # (time, isr after)
        for r in events:
            t, kind = int(r["ts_ms"]), r["kind"]
            after = tuple(r.get("isr_after") or ())
            if kind == "leader_change" and r.get("new_leader") != broker:
                continue  # a follower's line says nothing about the leader's ISR
            if not after:
                continue
            before = tuple(r.get("isr_before") or ()) or known
            if kind == "isr_shrink":
                if t >= since_ms and before:
                    out.append(IsrShrink(cluster, t, broker, topic, partition, before, after))
                last_shrink = (t, after)
            elif kind == "isr_update" and known and set(known) - set(after):
                confirmed = (last_shrink is not None and set(last_shrink[1]) == set(after)
                             and t - last_shrink[0] <= confirm_window_ms)
                if t >= since_ms and not confirmed:
                    out.append(IsrShrink(cluster, t, broker, topic, partition, known, after))
            known = after
    return sorted(out, key=lambda s: (s.event_ms, s.cluster, s.leader, s.topic, s.partition))
