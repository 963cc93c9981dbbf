"""Rule 7: what the known disruptions (core/disruptions.py) explain in one window. Per
kind, `TABLE` says whose verdicts an event sets aside (not counted, naming no one) and
whose own-stage culprits it makes warning victims (no action, not counted toward
cluster-wide): its subject's, or its partners' (the brokers sharing partitions with it,
every broker when the fetches never showed it, and those that took its leaderships). A
broker blamed in the window before is no victim; cluster-wide is never explained."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Literal, Mapping, Sequence

from core.disruptions import Disruption, Kind, leaderships_taken, subjects
from core.findings import ActionKind, Severity, broker_entity
from detectors.explaining_away import Waits
from detectors.slow_broker.blame import OWN_STAGE_CAUSES
from detectors.slow_broker.verdicts import Attribution, BrokerVerdict, Role, SlowBrokerCause

# A follower out, catching up or finding its new leader holds back acks=all writes
# without being named.
UNNAMED_WAITS = frozenset({SlowBrokerCause.REMOTE_PRODUCE_UNKNOWN_FOLLOWER,
                           SlowBrokerCause.REMOTE_WAIT})
ANY = None


@dataclass(frozen=True)
class Row:
    subject: frozenset | None    # the subject's verdicts of these causes are set aside
    blaming: bool = False        # so are those that blame the subject
    leaders_waits: bool = False  # and its leaders' Remote waits naming no follower
    warns: Literal["partners", "subject"] | None = None  # whose own stages are victims
    named_by_margin: bool = True  # the subject may be named slow follower by margin alone


TABLE: Mapping[Kind, Row] = {
    # Gone, then catching up while its clients reconnect; its partners took its load.
    Kind.BROKER_OUT: Row(ANY, blaming=True, leaders_waits=True, warns="partners"),
    # A fresh JVM loads its logs, warms its page cache and compiles: its own stages and its
    # followers' fetches are slow, and it lags the other followers a little for minutes;
    # its partners serve its catch-up. Only a follower late past the floor or by
    # peer_ratio is named.
    Kind.BROKER_WARMUP: Row(OWN_STAGE_CAUSES | UNNAMED_WAITS, leaders_waits=True,
                            warns="partners", named_by_margin=False),
    # Followers fetch from a new leader only once the metadata names it, and its clients
    # move to it (moving them away would undo the election).
    Kind.LEADERSHIP_HANDOVER: Row(UNNAMED_WAITS, warns="subject"),
    # New partitions: each broker opens a log per replica, the first acks=all writes wait
    # for new followers, every client refreshes its metadata.
    Kind.REPLICAS_CREATED: Row(OWN_STAGE_CAUSES | UNNAMED_WAITS),
}


def _explains(d: Disruption, broker: int, v: BrokerVerdict, waits: Waits) -> bool:
    """Whether event `d` sets aside `broker`'s verdict `v` (`TABLE`); a leader whose
    followers the fetches do not show may wait on anyone."""
    row, cause = TABLE[d.kind], v.attribution.cause
    if broker == d.subject and (row.subject is ANY or cause in row.subject):
        return True
    if row.blaming and v.attribution.blamed_broker == d.subject:
        return True
    followers = waits.by_server.get(broker, {})
    return row.leaders_waits and cause in UNNAMED_WAITS and (
        d.subject in followers or not followers)


def _warning(a: Attribution, broker: int, active: Sequence[Disruption]) -> Attribution:
    """An own-stage verdict made a warning victim of the events in effect."""
    out = subjects(active, Kind.BROKER_OUT)
    back = subjects(active, Kind.BROKER_WARMUP) - out
    gained = leaderships_taken(active).get(broker, 0)
    parts, details = [], dict(a.details)
    if out or back:
        details["brokers_out"] = [broker_entity(b) for b in sorted(out)]
    if out:
        parts.append(f"broker {', '.join(str(b) for b in sorted(out))} it shares partitions "
                     "with was out: it took over that broker's leaderships and clients")
    if back:
        parts.append(f"broker {', '.join(str(b) for b in sorted(back))} it shares partitions "
                     "with was catching up after a restart: it served that broker's "
                     "catch-up and its returning clients")
        details["brokers_back"] = [broker_entity(b) for b in sorted(back)]
    if gained:
        parts.append(f"it had just become leader of {gained} partition(s): their clients "
                     "and followers moved to it")
        details["leaderships_gained"] = gained
    return Attribution(Role.VICTIM, a.cause, None, ActionKind.NONE, Severity.WARNING,
                       f"{a.why}, while {'; and '.join(parts)}; not paged", details)


def not_named_by_margin(active: Iterable[Disruption]) -> frozenset[int]:
    """The subjects a follower's small margin over the others must not name."""
    return frozenset(d.subject for d in active if not TABLE[d.kind].named_by_margin)


def partners_of(loaders: Iterable[int], followers_seen: Mapping[int, Mapping[int, int]],
                new_leaders: Iterable[int] = ()) -> set[int] | None:
    """The brokers that take `loaders`' load: the leaders they followed, their followers
    (`followers_seen`: leader -> follower -> last window) and the new leaders; None when
    the fetches never showed a loader."""
    loaders = set(loaders)
    leaders = {leader for leader, fs in followers_seen.items() if loaders & set(fs)}
    followers = {f for b in loaders for f in followers_seen.get(b, {})}
    if not leaders and not followers:
        return None
    return (leaders | followers | set(new_leaders)) - loaders


def counts_as_before(active: Iterable[Disruption]) -> bool:
    """Whether a window's blamed brokers are the 'before' of later events: not while a
    broker is out."""
    return not any(TABLE[d.kind].subject is ANY for d in active)


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
        (set_aside if any(_explains(d, b, v, waits) for d in active) else kept)[b] = v
    loaders = {d.subject for d in active if TABLE[d.kind].warns == "partners"}
    partners = (partners_of(loaders, followers_seen, leaderships_taken(active))
                if loaders else None)
    own = {d.subject for d in active if TABLE[d.kind].warns == "subject"}

    def own_stages(x: BrokerVerdict) -> bool:
        return x.attribution.role is Role.CULPRIT and x.attribution.cause in OWN_STAGE_CAUSES

    victims = {b for b, v in kept.items() if own_stages(v) and b not in blamed_before and (
        b in own or (loaders and b not in loaders and (partners is None or b in partners)))}
    for b in victims:
        v = kept[b]
        kept[b] = replace(v, attribution=_warning(v.attribution, b, active), others=[
            replace(o, attribution=_warning(o.attribution, b, active)) if own_stages(o) else o
            for o in v.others])
    explained = {d.subject for d in active if TABLE[d.kind].subject is ANY
                 or TABLE[d.kind].subject >= OWN_STAGE_CAUSES}
    return Explanation(kept, set_aside, victims, explained | victims)
