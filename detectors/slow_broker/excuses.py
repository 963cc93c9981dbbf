"""Rule 7: what the known disruptions (core/disruptions.py) explain in one window. Per
kind, `TABLE` says whose verdicts an event sets aside (they neither count for persistence
nor name anyone) and whose own-stage culprits it makes warning victims (no action, not
counted toward cluster-wide). Partners are the brokers that share partitions with the
subjects (by the follower fetches seen so far; every broker when those never showed a
subject) and those that took leaderships; a broker blamed in the window before is no
victim (its slowness came first); cluster-wide is never explained."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Iterable, Mapping, Sequence

from core.disruptions import Disruption, Kind, leaderships_taken, subjects
from core.findings import ActionKind, Severity, broker_entity
from detectors.explaining_away import Waits
from detectors.slow_broker.blame import OWN_STAGE_CAUSES
from detectors.slow_broker.verdicts import Attribution, BrokerVerdict, Role, SlowBrokerCause

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


@dataclass(frozen=True)
class Row:
    explains: tuple[Whose, ...]    # verdicts set aside
    downgrades: Whose | None       # whose own-stage culprits become warning victims
    named_by_margin: bool = True   # its subject may be named the slow follower by margin alone


TABLE: Mapping[Kind, Row] = {
    # Gone, then catching up as a follower while its clients reconnect; its partners took
    # its leaderships and clients.
    Kind.BROKER_OUT: Row((Whose.SUBJECT, Whose.BLAMING_SUBJECT, Whose.LEADERS_UNNAMED_WAITS),
                         Whose.PARTNERS),
    # A fresh JVM loads its logs, warms its page cache and compiles its code: its own stages
    # are slow and it lags a little behind the other followers for minutes; its partners
    # serve its catch-up. A follower standing out past the floor or by peer_ratio is named.
    Kind.BROKER_WARMUP: Row((Whose.SUBJECT_OWN_STAGES, Whose.LEADERS_UNNAMED_WAITS),
                            Whose.PARTNERS, named_by_margin=False),
    # The partitions' other replicas fetch from a new leader only once the metadata names
    # it; its clients and followers move to it (moving them away would undo the election).
    Kind.LEADERSHIP_HANDOVER: Row((Whose.SUBJECT_UNNAMED_WAITS,), Whose.SUBJECT),
    # A new topic or partitions: each broker opens a log per replica and its leaders' first
    # acks=all writes wait for new followers, while every client refreshes its metadata.
    # Its effect on those brokers is no one's; slowness beyond them is judged as usual.
    Kind.REPLICAS_CREATED: Row((Whose.SUBJECT_OWN_STAGES, Whose.SUBJECT_UNNAMED_WAITS), None),
}


def _warning(a: Attribution, broker: int, active: Sequence[Disruption]) -> Attribution:
    """An own-stage verdict made a warning victim of the events in effect: the load of the
    brokers out or warming up it shares partitions with, or of the leaderships it took."""
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
    own = {d.subject for d in active if TABLE[d.kind].downgrades is Whose.SUBJECT}

    def own_stages(x: BrokerVerdict) -> bool:
        return x.attribution.role is Role.CULPRIT and x.attribution.cause in OWN_STAGE_CAUSES

    victims = {b for b, v in kept.items() if own_stages(v) and b not in blamed_before and (
        b in own or (loaders and b not in loaders and (partners is None or b in partners)))}
    for b in victims:
        v = kept[b]
        kept[b] = replace(v, attribution=_warning(v.attribution, b, active), others=[
            replace(o, attribution=_warning(o.attribution, b, active)) if own_stages(o) else o
            for o in v.others])
    explained = {d.subject for d in active
                 if {Whose.SUBJECT, Whose.SUBJECT_OWN_STAGES} & set(TABLE[d.kind].explains)}
    return Explanation(kept, set_aside, victims, explained | victims)
