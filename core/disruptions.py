"""Known disruptions: events that make brokers slow or silent for a while without a fault
of theirs. A broker out (core/outages.py) until it is unfenced, then warming up; a
leadership handover, from the new leader's "Leader <tp> starts at leader epoch E" line at
an epoch above 0; replicas created, from a broker's epoch-0 "Leader"/"Follower" lines (a
new topic or partition: nothing moved). Each event is in effect from its start until
GRACES[kind] x the detector's grace after its end; the detectors decide what it explains."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable

from core.outages import BrokerOutage


class Kind(StrEnum):
    BROKER_OUT = "broker_out"
    BROKER_WARMUP = "broker_warmup"
    LEADERSHIP_HANDOVER = "leadership_handover"
    REPLICAS_CREATED = "replicas_created"


# How many graces after its end an event's effects last: a broker back from an outage
# catches up for one; a fresh JVM warms its page cache and code for three; the followers
# of a new leader or replica find it within half of one.
GRACES = {Kind.BROKER_OUT: 1.0, Kind.BROKER_WARMUP: 3.0, Kind.LEADERSHIP_HANDOVER: 0.5,
          Kind.REPLICAS_CREATED: 0.5}
# Creation lines of one broker less than this apart are one event (a topic's partitions
# are created in one metadata update; a window apart is another operation).
CREATION_GAP_MS = 10_000


@dataclass(frozen=True)
class ReplicaStart:
    """A broker's own line that it started to lead (`leads`) or follow a partition."""
    cluster: str
    broker: int
    event_ms: int
    topic: str
    partition: int
    leader_epoch: int = 1
    leads: bool = True

    @property
    def is_handover(self) -> bool:
        return self.leads and self.leader_epoch > 0

    @property
    def is_creation(self) -> bool:
        return self.leader_epoch == 0


@dataclass(frozen=True)
class Disruption:
    cluster: str
    kind: Kind
    subject: int                 # the broker it happened to
    start_ms: int
    end_ms: int | None           # when the event itself ended; None: not yet
    partitions: frozenset[tuple[str, int]] = frozenset()   # leaderships it moved to the subject


def disruptions_from(outages: Iterable[BrokerOutage] = (),
                     starts: Iterable[ReplicaStart] = ()) -> list[Disruption]:
    """The events of every kind (see the module docstring)."""
    out = []
    for o in outages:
        out.append(Disruption(o.cluster, Kind.BROKER_OUT, o.broker, o.start_ms, o.back_ms))
        if o.back_ms is not None:
            out.append(Disruption(o.cluster, Kind.BROKER_WARMUP, o.broker, o.back_ms,
                                  o.back_ms))
    created: dict[tuple[str, int], list[int]] = {}
    for g in sorted(starts, key=lambda g: g.event_ms):
        if g.is_handover:
            out.append(Disruption(g.cluster, Kind.LEADERSHIP_HANDOVER, g.broker, g.event_ms,
                                  g.event_ms, frozenset({(g.topic, g.partition)})))
        elif g.is_creation:
            run = created.get((g.cluster, g.broker))
            if run is not None and g.event_ms - run[1] <= CREATION_GAP_MS:
                run[1] = g.event_ms
            else:
                if run is not None:
                    out.append(Disruption(g.cluster, Kind.REPLICAS_CREATED, g.broker, *run))
                created[(g.cluster, g.broker)] = [g.event_ms, g.event_ms]
    out.extend(Disruption(cluster, Kind.REPLICAS_CREATED, broker, *run)
               for (cluster, broker), run in created.items())
    return out


def span_ms(kind: Kind, grace_s: float) -> int:
    """How long after its end an event of `kind` stays in effect."""
    return int(GRACES[kind] * grace_s * 1000)


def active_in(disruptions: Iterable[Disruption], cluster: str, start_ms: int, end_ms: int,
              grace_s: float) -> list[Disruption]:
    """The events of the cluster in effect at some time of [start_ms, end_ms)."""
    return [d for d in disruptions
            if d.cluster == cluster and d.start_ms < end_ms
            and (d.end_ms is None or d.end_ms + span_ms(d.kind, grace_s) > start_ms)]


def subjects(active: Iterable[Disruption], kind: Kind) -> set[int]:
    return {d.subject for d in active if d.kind is kind}


def leaderships_taken(active: Iterable[Disruption]) -> dict[int, int]:
    """Broker -> how many partitions' leadership the events moved to it."""
    taken: dict[int, set[tuple[str, int]]] = {}
    for d in active:
        if d.partitions:
            taken.setdefault(d.subject, set()).update(d.partitions)
    return {b: len(tps) for b, tps in taken.items()}
