"""The known disruptions (core/disruptions.py) and the slow-broker table of what each kind
explains (detectors/slow_broker/excuses.py), one row per kind: whose verdicts an event of that kind explains (sets aside) and whose own-stage culprits it only
makes warning victims, for how long after its end, and nothing before or after. Then the
rules every kind shares."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from core.findings import ActionKind, Severity
from core.outages import BrokerOutage
from core.disruptions import Kind, ReplicaStart, active_in, disruptions_from
from detectors.slow_broker import SlowBrokerSection, replication_waits
from detectors.slow_broker.excuses import counts_as_before, explain, not_named_by_margin
from detectors.slow_broker.verdicts import Attribution, BrokerVerdict, Role, SlowBrokerCause

pytestmark = pytest.mark.unit

GRACE_S = SlowBrokerSection().disruption_grace_s   # 60
W = 10_000
SUBJECT = 2
# Who follows whom (leader -> followers with their holdback ms): broker 1 leads partitions
# broker 2 follows, broker 2's own partitions are followed by broker 4 only, broker 5
# shares nothing with broker 2.
BY_LEADER = {1: {2: 20.0, 3: 20.0}, 2: {4: 20.0}, 3: {1: 20.0}, 4: {2: 20.0}, 5: {3: 20.0}}
SEEN = {leader: {f: 0 for f in fs} for leader, fs in BY_LEADER.items()}


def culprit(b, cause=SlowBrokerCause.LOCAL_DISK_OR_PAGE_CACHE):
    return BrokerVerdict(b, Attribution(Role.CULPRIT, cause, b, ActionKind.MOVE_LEADERSHIP,
                                        Severity.HIGH, "its own work is slow"), None)


def unnamed_wait(b):
    return BrokerVerdict(b, Attribution(
        Role.UNATTRIBUTED, SlowBrokerCause.REMOTE_PRODUCE_UNKNOWN_FOLLOWER, None,
        ActionKind.PAGE_HUMAN, Severity.WARNING, "no follower stands out"), None)


def victim_of(b, follower):
    return BrokerVerdict(b, Attribution(
        Role.VICTIM, SlowBrokerCause.REMOTE_PRODUCE_SLOW_FOLLOWER, follower, ActionKind.NONE,
        Severity.WARNING, "waits on its follower"), None)


def window(subject_verdict):
    """One window's verdicts: the subject's, its leader 1's wait naming no follower, leader
    3 waiting on the subject by name, its partner 4 and the unrelated broker 5 slow in
    their own stages."""
    return {SUBJECT: subject_verdict, 1: unnamed_wait(1), 3: victim_of(3, SUBJECT),
            4: culprit(4), 5: culprit(5)}


OUTAGE = BrokerOutage("c1", SUBJECT, start_ms=100_000, end_ms=220_000, how="broker_fenced",
                      back_ms=160_000)
GAIN = ReplicaStart("c1", SUBJECT, 100_000, "orders", 4)


@dataclass(frozen=True)
class Row:
    kind: Kind
    start_ms: int
    end_ms: int                # the event's own end: back, or the leadership taken
    lasts_ms: int              # after end_ms, at the default grace
    set_aside: frozenset       # with the subject slow in its own stages
    set_aside_waiting: frozenset   # with the subject's own Remote wait naming no follower
    victims: frozenset         # own-stage culprits made warnings
    named_by_margin: bool = True


ROWS = {
    "broker_out": Row(Kind.BROKER_OUT, 100_000, 160_000, 60_000,
                      set_aside=frozenset({SUBJECT, 1, 3}),
                      set_aside_waiting=frozenset({SUBJECT, 1, 3}), victims=frozenset({4})),
    "broker_warmup": Row(Kind.BROKER_WARMUP, 160_000, 160_000, 180_000,
                         set_aside=frozenset({SUBJECT, 1}),
                         set_aside_waiting=frozenset({SUBJECT, 1}),
                         victims=frozenset({4}), named_by_margin=False),
    "leadership_handover": Row(Kind.LEADERSHIP_HANDOVER, 100_000, 100_000, 30_000,
                               set_aside=frozenset(),
                               set_aside_waiting=frozenset({SUBJECT}),
                               victims=frozenset({SUBJECT})),
}


def events(kind):
    return [d for d in disruptions_from([OUTAGE], [GAIN]) if d.kind is kind]


def explained(kind, window_start, subject_verdict):
    active = active_in(events(kind), "c1", window_start, window_start + W, GRACE_S)
    x = explain(window(subject_verdict), active, replication_waits(BY_LEADER), SEEN, set())
    return active, x


@pytest.mark.parametrize("name", ROWS)
def test_each_kind_explains_what_its_row_says_while_in_effect(name):
    row = ROWS[name]
    first = row.start_ms - row.start_ms % W
    last = row.end_ms + row.lasts_ms - 1        # the last window still in effect starts here
    for window_start in (first, last):
        active, x = explained(row.kind, window_start, culprit(SUBJECT))
        assert set(x.set_aside) == row.set_aside, (name, window_start)
        assert x.victims == row.victims, (name, window_start)
        assert all(x.kept[b].attribution.role is Role.VICTIM
                   and x.kept[b].attribution.action is ActionKind.NONE
                   and x.kept[b].attribution.severity is Severity.WARNING for b in x.victims)
        assert set(x.kept) | set(x.set_aside) == {1, 2, 3, 4, 5}
        assert (SUBJECT in not_named_by_margin(active)) is not row.named_by_margin
        _, x = explained(row.kind, window_start, unnamed_wait(SUBJECT))
        assert set(x.set_aside) == row.set_aside_waiting, (name, window_start)


@pytest.mark.parametrize("name", ROWS)
def test_each_kind_explains_nothing_before_it_starts_or_after_it_lasted(name):
    row = ROWS[name]
    for window_start in (row.start_ms - W, row.end_ms + row.lasts_ms):
        active, x = explained(row.kind, window_start, culprit(SUBJECT))
        assert not active and not x.set_aside and not x.victims, (name, window_start)
        assert x.kept == window(culprit(SUBJECT))


def test_an_event_not_ended_yet_lasts():
    open_outage = BrokerOutage("c1", SUBJECT, 100_000, None, "broker_shutdown")
    active = active_in(disruptions_from([open_outage]), "c1", 10**12, 10**12 + W, GRACE_S)
    assert [d.kind for d in active] == [Kind.BROKER_OUT]
    assert active_in(disruptions_from([open_outage]), "c2", 10**12, 10**12 + W, GRACE_S) == []


# --- the rules every kind shares -----------------------------------------------------------------

def test_a_broker_blamed_before_the_disruption_is_no_victim_of_it():
    for kind in (Kind.BROKER_OUT, Kind.LEADERSHIP_HANDOVER):
        active = active_in(events(kind), "c1", 100_000, 110_000, GRACE_S)
        x = explain(window(culprit(SUBJECT)), active, replication_waits(BY_LEADER), SEEN,
                    blamed_before={SUBJECT, 4})
        assert not x.victims and x.kept[4].attribution.role is Role.CULPRIT, kind


def test_partners_are_every_broker_when_the_fetches_never_showed_the_subject():
    active = active_in(events(Kind.BROKER_OUT), "c1", 100_000, 110_000, GRACE_S)
    x = explain(window(culprit(SUBJECT)), active, replication_waits({}), {}, set())
    assert x.victims == {4, 5}


def test_what_an_event_explains_is_set_aside_before_anyone_is_made_a_victim():
    """A new leader back from its own outage: its own-stage verdict is the warm-up's, set
    aside, not a warning of the handover."""
    back = BrokerOutage("c1", SUBJECT, 0, 60_000, "broker_fenced", back_ms=0)
    gain = ReplicaStart("c1", SUBJECT, 95_000, "orders", 4)
    active = active_in(disruptions_from([back], [gain]), "c1", 100_000, 110_000, GRACE_S)
    assert {d.kind for d in active} == {Kind.BROKER_WARMUP, Kind.LEADERSHIP_HANDOVER}
    x = explain(window(culprit(SUBJECT)), active, replication_waits(BY_LEADER), SEEN, set())
    assert SUBJECT in x.set_aside and SUBJECT not in x.victims


def test_windows_with_a_broker_out_do_not_count_as_before():
    out = active_in(events(Kind.BROKER_OUT), "c1", 100_000, 110_000, GRACE_S)
    handover = active_in(events(Kind.LEADERSHIP_HANDOVER), "c1", 100_000, 110_000, GRACE_S)
    assert not counts_as_before(out) and counts_as_before(handover) and counts_as_before([])


def test_a_victims_other_slow_rows_in_its_own_stages_are_warnings_too():
    """Persistence weighs every slow row of a window (BrokerVerdict.others): a partner made
    a victim keeps no own-stage culprit among them, and its wait on a follower stays."""
    active = active_in(events(Kind.BROKER_OUT), "c1", 100_000, 110_000, GRACE_S)
    w = window(culprit(SUBJECT))
    waits_on_3 = victim_of(4, 3)
    w[4].others = [culprit(4, SlowBrokerCause.REQUEST_HANDLERS_SATURATED), waits_on_3]
    x = explain(w, active, replication_waits(BY_LEADER), SEEN, set())
    assert 4 in x.victims
    queued, waiting = x.kept[4].others
    assert (queued.attribution.role, queued.attribution.action,
            queued.attribution.cause) == (Role.VICTIM, ActionKind.NONE,
                                          SlowBrokerCause.REQUEST_HANDLERS_SATURATED)
    assert waiting is waits_on_3
