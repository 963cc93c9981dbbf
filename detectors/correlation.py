"""Correlation: link the findings that are one failure seen from several places.

Two chains are known:

- Data loss: an unclean leader election loses the tail of a partition; the replicas that
  had it truncate their logs (log_truncation); consumers whose position lay in the lost
  range get OffsetOutOfRange and reset (offset_reset); their groups commit lower offsets
  (offset_rewind). On-call should get one incident whose root is the election, not four
  pages.
- Slow follower: one slow follower makes acks=all Produce slow on every leader it
  replicates from; those leaders' slow_broker findings (role victim, evidence
  slow_follower = "broker:N") belong to the follower's own slow_broker finding.

Algorithm. Each rule below says whether finding A can have caused finding B; both must be
in the same cluster and B must start no earlier than clock_skew_s before A (early_s when
A is a meter-only election, stamped by a scrape) and no later than chain_window_s after it
(slow_follower_window_s of overlap for the slow-follower rule). Partitions are matched on
the topic and partition in the evidence (every partition-level
detector puts them there), groups on the evidence group. Linked findings form
incidents (connected components). The root of an incident is a finding nothing else in
it caused, the earliest such (then the worst type); its finding_id becomes every member's
incident_id, and each member's `related` lists the findings it is directly linked to.
A finding linked to nothing gets incident_id None and no related ids.

Correlation is recomputed from the findings it is given each time (pass the open ones
and those resolved within chain_window_s): an incident id can change only when an
earlier root cause turns up late (an old leader that returns an hour later and logs its
truncation links a rewind to an election it had not been linked to before).

Config keys ([correlation] section, `CorrelationSection`): chain_window_s = 3600,
early_s = 120 (a cause stamped by a scrape), clock_skew_s = 5 (a cause stamped by its own
log line), slow_follower_window_s = 300.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

from core.config_keys import _key
from core.findings import AnomalyType, Finding, partition_entity
from detectors.offset_rewind import RewindCause


@dataclass(frozen=True)
class CorrelationSection:
    chain_window_s: float = _key("Longest time an effect (truncation, reset, rewind) may follow "
                                 "its cause", 3600.0, min=1, max=7 * 86400)
    early_s: float = _key("How much earlier than its cause an effect may be stamped (clocks and "
                          "scrape intervals differ)", 120.0, min=0, max=86400)
    slow_follower_window_s: float = _key("Slack allowed between a slow follower's finding and "
                                         "the findings of the leaders it holds back", 300.0,
                                         min=0, max=86400)
    clock_skew_s: float = _key("How much earlier than its cause an effect may be stamped when "
                               "the cause's time is exact (a logged election or truncation): "
                               "only the clocks of two hosts differ; early_s applies to causes "
                               "stamped by a metric scrape (a meter-only election)", 5.0,
                               min=0, max=3600)


def partition_of(f: Finding) -> tuple[str, str, int] | None:
    e = f.evidence
    if isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int):
        return f.cluster, e["topic"], e["partition"]
    return None


def _follows(cause: Finding, effect: Finding, config: CorrelationSection) -> bool:
    """The effect starts after its cause: up to chain_window_s later, and earlier only by
    what the cause's timestamp may be off. A logged election or truncation is stamped when
    it happened (clock skew between hosts aside); a meter-only election when a scrape saw
    the count move, up to a scrape interval or more after it. A rewind 60 s before a
    logged election was linked into its incident with the old 120 s allowance (issue 23)."""
    delay_ms = effect.first_seen_ms - cause.first_seen_ms
    coarse = partition_of(cause) is None and cause.type is AnomalyType.UNCLEAN_ELECTION
    early_s = config.early_s if coarse else config.clock_skew_s
    return -early_s * 1000 <= delay_ms <= config.chain_window_s * 1000


def _same_partition(a: Finding, b: Finding) -> bool:
    pa = partition_of(a)
    return pa is not None and pa == partition_of(b)


def _candidate_partitions(election: Finding) -> list[str]:
    return list(election.evidence.get("candidate_partitions") or [])


# --- rules: can `cause` have caused `effect`? --------------------------------------------

def election_explains_truncation(cause: Finding, effect: Finding,
                                 config: CorrelationSection) -> bool:
    """A replica truncates to the new leader's end after an unclean election. A meter-only
    election (partitions unknown) explains the truncations it listed as candidates."""
    if (cause.type is not AnomalyType.UNCLEAN_ELECTION
            or effect.type is not AnomalyType.LOG_TRUNCATION):
        return False
    if cause.cluster != effect.cluster or not _follows(cause, effect, config):
        return False
    if _same_partition(cause, effect):
        return True
    tp = partition_of(effect)
    return (partition_of(cause) is None and tp is not None
            and partition_entity(tp[1], tp[2]) in _candidate_partitions(cause))


def data_loss_explains_reset(cause: Finding, effect: Finding, config: CorrelationSection) -> bool:
    """A position inside a lost or truncated range is out of range: the client resets."""
    return (cause.type in (AnomalyType.UNCLEAN_ELECTION, AnomalyType.LOG_TRUNCATION)
            and effect.type is AnomalyType.OFFSET_RESET and _same_partition(cause, effect)
            and _follows(cause, effect, config))


def data_loss_explains_rewind(cause: Finding, effect: Finding, config: CorrelationSection) -> bool:
    """A group sent back after data loss (not a deliberate reset or seek)."""
    return (cause.type in (AnomalyType.UNCLEAN_ELECTION, AnomalyType.LOG_TRUNCATION)
            and effect.type is AnomalyType.OFFSET_REWIND
            and effect.cause not in (RewindCause.OPERATOR_RESET, RewindCause.APPLICATION_SEEK)
            and _same_partition(cause, effect)
            and _follows(cause, effect, config))


def reset_explains_rewind(cause: Finding, effect: Finding, config: CorrelationSection) -> bool:
    """The group commits the position its client reset to: a rewind of the same group."""
    if cause.type is not AnomalyType.OFFSET_RESET or effect.type is not AnomalyType.OFFSET_REWIND:
        return False
    group = cause.evidence.get("group")
    return (_same_partition(cause, effect) and group in (None, effect.evidence.get("group"))
            and _follows(cause, effect, config))


def slow_follower_explains_victim(cause: Finding, effect: Finding,
                                  config: CorrelationSection) -> bool:
    """A leader held back by a follower belongs to the follower's finding, while both last."""
    if cause.type is not AnomalyType.SLOW_BROKER or effect.type is not AnomalyType.SLOW_BROKER:
        return False
    if effect.evidence.get("role") != "victim" or cause.evidence.get("role") != "culprit":
        return False
    if cause.cluster != effect.cluster or effect.evidence.get("slow_follower") != cause.entity:
        return False
    slack_ms = config.slow_follower_window_s * 1000
    return (effect.first_seen_ms <= cause.last_seen_ms + slack_ms
            and cause.first_seen_ms <= effect.last_seen_ms + slack_ms)


RULES: tuple[Callable[[Finding, Finding, CorrelationSection], bool], ...] = (
    election_explains_truncation,
    data_loss_explains_reset,
    data_loss_explains_rewind,
    reset_explains_rewind,
    slow_follower_explains_victim,
)


# --- incidents ---------------------------------------------------------------------------

_DATA_LOSS = (AnomalyType.UNCLEAN_ELECTION, AnomalyType.LOG_TRUNCATION)


def _candidate_pairs(findings: list[Finding]) -> Iterable[tuple[Finding, Finding]]:
    """(cause, effect) pairs worth asking the rules about, instead of every pair: one
    election on a partition read by a thousand groups must not cost a million checks.

    Per partition: data-loss findings against everything on it, a group's reset against
    that group's rewind; elections without partitions against the cluster's truncations;
    slow brokers against the cluster's other slow brokers.
    """
    by_tp: dict[tuple, list[Finding]] = defaultdict(list)
    unplaced_elections: dict[str, list[Finding]] = defaultdict(list)
    truncations: dict[str, list[Finding]] = defaultdict(list)
    brokers: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        tp = partition_of(f)
        if tp is not None:
            by_tp[tp].append(f)
        elif f.type is AnomalyType.UNCLEAN_ELECTION:
            unplaced_elections[f.cluster].append(f)
        if f.type is AnomalyType.LOG_TRUNCATION:
            truncations[f.cluster].append(f)
        if f.type is AnomalyType.SLOW_BROKER:
            brokers[f.cluster].append(f)
    for on_partition in by_tp.values():
        rewinds_by_group: dict[object, list[Finding]] = defaultdict(list)
        for f in on_partition:
            if f.type is AnomalyType.OFFSET_REWIND:
                rewinds_by_group[f.evidence.get("group")].append(f)
        for cause in on_partition:
            if cause.type in _DATA_LOSS:
                for effect in on_partition:
                    if effect is not cause:
                        yield cause, effect
            elif cause.type is AnomalyType.OFFSET_RESET:
                group = cause.evidence.get("group")
                effects = (rewinds_by_group.get(group, []) if group is not None
                           else [f for fs in rewinds_by_group.values() for f in fs])
                for effect in effects:
                    yield cause, effect
    for cluster, elections in unplaced_elections.items():
        for e in elections:
            for t in truncations[cluster]:
                yield e, t
    for same_cluster in brokers.values():
        culprits = [f for f in same_cluster if f.evidence.get("role") == "culprit"]
        victims = [f for f in same_cluster if f.evidence.get("role") == "victim"]
        for cause in culprits:
            for effect in victims:
                yield cause, effect


def causal_links(findings: list[Finding], config: CorrelationSection
                 ) -> list[tuple[str, str, str]]:
    """(cause id, effect id, rule name) for every pair a rule links."""
    links = []
    for a, b in _candidate_pairs(findings):
        for rule in RULES:
            if rule(a, b, config):
                links.append((a.finding_id, b.finding_id, rule.__name__))
                break
    return links


def correlate(findings: Iterable[Finding], config: CorrelationSection | None = None
              ) -> list[Finding]:
    """The findings with incident_id and related set from their causal links."""
    config = config or CorrelationSection()
    findings = list(findings)
    by_id = {f.finding_id: f for f in findings}
    links = causal_links(findings, config)

    parent = {fid: fid for fid in by_id}

    def root_of(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    neighbours: dict[str, set[str]] = defaultdict(set)
    caused: set[str] = set()
    for cause, effect, _ in links:
        neighbours[cause].add(effect)
        neighbours[effect].add(cause)
        caused.add(effect)
        parent[root_of(cause)] = root_of(effect)

    members: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        members[root_of(f.finding_id)].append(f)

    incident_of: dict[str, str] = {}
    for group in members.values():
        if len(group) < 2:
            continue
        uncaused = [f for f in group if f.finding_id not in caused] or group
        root = min(uncaused, key=lambda f: (f.first_seen_ms, f.type.rank, f.finding_id))
        for f in group:
            incident_of[f.finding_id] = root.finding_id

    return [dataclasses.replace(f, incident_id=incident_of.get(f.finding_id),
                                related=tuple(sorted(neighbours.get(f.finding_id, ()))))
            for f in findings]
