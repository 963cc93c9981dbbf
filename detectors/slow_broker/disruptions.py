"""Known disruptions explain the slowness they cause, in one table of events: a broker
out, its warm-up, a leadership handover, replicas created. Each event (`Disruption`,
`disruptions_from`) is in effect from its start until `Row.graces` x disruption_grace_s
after its end; `TABLE` says per kind whose verdicts it sets aside (they neither count
for persistence nor name anyone) and whose own-stage culprits it only makes warning
victims (no action, not counted toward cluster-wide); `explain` applies it to one window
(a broker's other slow rows alike). For every kind alike:
partners are the brokers that share partitions with the subjects (by the follower
fetches seen so far; every broker when those never showed a subject) and those that took
leaderships; a broker blamed in the last window before is no victim (its slowness came
first); cluster-wide is never explained.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Callable, Iterable, Mapping, Sequence

from core.findings import ActionKind, Severity, broker_entity
from core.outages import BrokerOutage
from detectors.slow_broker.blame import OWN_STAGE_CAUSES, Waits
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.handovers import ReplicaStart
from detectors.slow_broker.verdicts import Attribution, BrokerVerdict, Role, SlowBrokerCause


class Kind(StrEnum):
    BROKER_OUT = "broker_out"
    BROKER_WARMUP = "broker_warmup"
    LEADERSHIP_HANDOVER = "leadership_handover"
    REPLICAS_CREATED = "replicas_created"


@dataclass(frozen=True)
class Disruption:
    cluster: str
    kind: Kind
    subject: int                 # the broker it happened to
    start_ms: int
    end_ms: int | None           # when the event itself ended; None: not yet
    partitions: frozenset[tuple[str, int]] = frozenset()   # leaderships it moved to the subject


# Creation lines of one broker less than this apart are one event (a topic's partitions
# are created in one metadata update; a window apart is another operation).
CREATION_GAP_MS = 10_000


def disruptions_from(outages: Iterable[BrokerOutage] = (),
                     starts: Iterable[ReplicaStart] = ()) -> list[Disruption]:
    """The events of every kind: a broker out until its unfence, then warming up; a
    leadership handover at each "Leader ... starts" line of the new leader at an epoch
    above 0; replicas created on a broker, from its first epoch-0 line to its last."""
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


# While a follower is out, catching up or finding its new leader, its leaders' acks=all
# writes wait on it in Remote without naming it.
_UNNAMED_REMOTE_WAITS = (SlowBrokerCause.REMOTE_PRODUCE_UNKNOWN_FOLLOWER,
                         SlowBrokerCause.REMOTE_WAIT)


class Whose(StrEnum):
    """Which verdicts of a window an event concerns (`_concerns`)."""
    SUBJECT = "every verdict of the subject"
    SUBJECT_OWN_STAGES = "the subject's own-stage verdicts"
    SUBJECT_UNNAMED_WAITS = "the subject's Remote waits that name no follower"
    BLAMING_SUBJECT = "verdicts that blame the subject"
    LEADERS_UNNAMED_WAITS = "Remote waits naming no follower, of the leaders it follows"
    PARTNERS = "the subject's partners"


def _concerns(whose: Whose, subject: int, broker: int, v: BrokerVerdict,
              waits: Waits) -> bool:
    cause = v.attribution.cause
    if whose is Whose.SUBJECT:
        return broker == subject
    if whose is Whose.SUBJECT_OWN_STAGES:
        return broker == subject and cause in OWN_STAGE_CAUSES
    if whose is Whose.SUBJECT_UNNAMED_WAITS:
        return broker == subject and cause in _UNNAMED_REMOTE_WAITS
    if whose is Whose.BLAMING_SUBJECT:
        return v.attribution.blamed_broker == subject
    if whose is Whose.LEADERS_UNNAMED_WAITS:
        # a leader whose followers the fetches do not show may follow anyone
        followers = waits.by_server.get(broker, {})
        return cause in _UNNAMED_REMOTE_WAITS and (subject in followers or not followers)
    raise ValueError(f"not a verdict test: {whose}")


def _partner_warning(a: Attribution, broker: int, active: Sequence[Disruption]) -> Attribution:
    """A partner's own-stage verdict while brokers were out (the load they left) or
    warming up (their catch-up and returning clients)."""
    out = subjects(active, Kind.BROKER_OUT)
    back = subjects(active, Kind.BROKER_WARMUP) - out
    parts = []
    if out:
        parts.append(f"broker {', '.join(str(b) for b in sorted(out))} it shares partitions "
                     "with was out: it took over that broker's leaderships and clients")
    if back:
        parts.append(f"broker {', '.join(str(b) for b in sorted(back))} it shares partitions "
                     "with was catching up after a restart: it served that broker's "
                     "catch-up and its returning clients")
    details = {**a.details, "brokers_out": [broker_entity(b) for b in sorted(out)]}
    if back:
        details["brokers_back"] = [broker_entity(b) for b in sorted(back)]
    return Attribution(Role.VICTIM, a.cause, None, ActionKind.NONE, Severity.WARNING,
                       f"{a.why}, while {'; and '.join(parts)}; not paged", details)


def _new_leader_warning(a: Attribution, broker: int,
                        active: Sequence[Disruption]) -> Attribution:
    """A new leader's own-stage verdict: the load that moved to it (moving it away again
    would undo the election)."""
    partitions = leaderships_taken(active).get(broker, 0)
    return Attribution(Role.VICTIM, a.cause, None, ActionKind.NONE, Severity.WARNING,
                       f"{a.why}, just after it became leader of {partitions} partition(s): "
                       "their clients and followers moved to it; not paged",
                       {**a.details, "leaderships_gained": partitions})


@dataclass(frozen=True)
class Row:
    graces: float                  # in effect until this many disruption graces after its end
    explains: tuple[Whose, ...]    # verdicts set aside
    downgrades: Whose | None       # whose own-stage culprits become warning victims
    warning: Callable[[Attribution, int, Sequence[Disruption]], Attribution] | None = None
    named_by_margin: bool = True   # its subject may be named the slow follower by margin alone


TABLE: Mapping[Kind, Row] = {
    # Gone, then catching up as a follower while its clients reconnect; its partners took
    # its leaderships and clients.
    Kind.BROKER_OUT: Row(1, (Whose.SUBJECT, Whose.BLAMING_SUBJECT, Whose.LEADERS_UNNAMED_WAITS),
                         Whose.PARTNERS, _partner_warning),
    # A fresh JVM loads its logs, warms its page cache and compiles its code: its own stages
    # are slow and it lags a little behind the other followers for minutes; its partners
    # serve its catch-up. A follower standing out past the floor or by peer_ratio is named.
    Kind.BROKER_WARMUP: Row(3, (Whose.SUBJECT_OWN_STAGES, Whose.LEADERS_UNNAMED_WAITS),
                            Whose.PARTNERS, _partner_warning, named_by_margin=False),
    # The partitions' other replicas fetch from a new leader only once the metadata names
    # it; its clients and followers move to it.
    Kind.LEADERSHIP_HANDOVER: Row(0.5, (Whose.SUBJECT_UNNAMED_WAITS,), Whose.SUBJECT,
                                  _new_leader_warning),
    # A new topic or partitions (an admin's, or an internal topic's on first use): each
    # broker opens a log per replica and its leaders' first acks=all writes wait for new
    # followers, while every client refreshes its metadata. An operation, not a fault of
    # the broker: its effect on those brokers is no one's; slowness beyond them is judged
    # as usual.
    Kind.REPLICAS_CREATED: Row(0.5, (Whose.SUBJECT_OWN_STAGES, Whose.SUBJECT_UNNAMED_WAITS),
                               None),
}


def span_ms(kind: Kind, config: SlowBrokerSection) -> int:
    """How long after its end an event of `kind` stays in effect."""
    return int(TABLE[kind].graces * config.disruption_grace_s * 1000)


def active_in(disruptions: Iterable[Disruption], cluster: str, start_ms: int, end_ms: int,
              config: SlowBrokerSection) -> list[Disruption]:
    """The events of the cluster in effect at some time of [start_ms, end_ms)."""
    return [d for d in disruptions
            if d.cluster == cluster and d.start_ms < end_ms
            and (d.end_ms is None or d.end_ms + span_ms(d.kind, config) > start_ms)]


def subjects(active: Iterable[Disruption], kind: Kind) -> set[int]:
    return {d.subject for d in active if d.kind is kind}


def leaderships_taken(active: Iterable[Disruption]) -> dict[int, int]:
    """Broker -> how many partitions' leadership the events moved to it."""
    taken: dict[int, set[tuple[str, int]]] = {}
    for d in active:
        if d.partitions:
            taken.setdefault(d.subject, set()).update(d.partitions)
    return {b: len(tps) for b, tps in taken.items()}


def not_named_by_margin(active: Iterable[Disruption]) -> frozenset[int]:
    """The subjects a follower's small margin over the others must not name."""
    return frozenset(d.subject for d in active if not TABLE[d.kind].named_by_margin)


def partners_of(loaders: Iterable[int], followers_seen: Mapping[int, Mapping[int, int]],
                new_leaders: Iterable[int] = ()) -> set[int] | None:
    """The brokers that take `loaders`' load: the leaders they followed and their own
    followers, by `followers_seen` (leader -> follower -> last window), and the new
    leaders. None when the fetches never showed a loader: every broker may be one."""
    loaders = set(loaders)
    leaders = {leader for leader, fs in followers_seen.items() if loaders & set(fs)}
    followers = {f for b in loaders for f in followers_seen.get(b, {})}
    if not leaders and not followers:
        return None
    return (leaders | followers | set(new_leaders)) - loaders


def counts_as_before(active: Iterable[Disruption]) -> bool:
    """Whether a window's blamed brokers are the 'before' of later events: not when an
    event in it sets its subject aside whole (a broker out)."""
    return not any(Whose.SUBJECT in TABLE[d.kind].explains for d in active)


@dataclass
class Explanation:
    kept: dict[int, BrokerVerdict]         # the window's verdicts, victims of events included
    set_aside: dict[int, BrokerVerdict]    # explained by an event
    victims: set[int]                      # own-stage culprits made warning victims
    own_stages_explained: set[int]         # brokers whose own stages the events account for


def explain(brokers: Mapping[int, BrokerVerdict], active: Sequence[Disruption],
            waits: Waits, followers_seen: Mapping[int, Mapping[int, int]],
            blamed_before: set[int]) -> Explanation:
    """The table applied to one window's verdicts (`active`: the events in effect)."""
    kept, set_aside = {}, {}
    for b, v in brokers.items():
        if any(_concerns(whose, d.subject, b, v, waits)
               for d in active for whose in TABLE[d.kind].explains):
            set_aside[b] = v
        else:
            kept[b] = v
    loaders = {d.subject for d in active if TABLE[d.kind].downgrades is Whose.PARTNERS}
    partners = (partners_of(loaders, followers_seen, leaderships_taken(active))
                if loaders else None)
    victims = set()
    for kind, row in TABLE.items():
        events = [d for d in active if d.kind is kind]
        if row.downgrades is None or not events:
            continue
        for b, v in kept.items():
            if (b in victims or b in blamed_before or v.attribution.role is not Role.CULPRIT
                    or v.attribution.cause not in OWN_STAGE_CAUSES):
                continue
            if row.downgrades is Whose.PARTNERS:
                eligible = b not in loaders and (partners is None or b in partners)
            else:
                eligible = any(d.subject == b for d in events)
            if eligible:
                kept[b] = replace(v, attribution=row.warning(v.attribution, b, active), others=[
                    replace(o, attribution=row.warning(o.attribution, b, active))
                    if o.attribution.role is Role.CULPRIT
                    and o.attribution.cause in OWN_STAGE_CAUSES else o for o in v.others])
                victims.add(b)
    explained = {d.subject for d in active
                 if {Whose.SUBJECT, Whose.SUBJECT_OWN_STAGES} & set(TABLE[d.kind].explains)}
    return Explanation(kept, set_aside, victims, explained | victims)
