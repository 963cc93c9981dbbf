"""The decision step: for each new or changed finding, ignore it, act on it, or look again later.

Detectors only write findings; this step turns them into actions for the queue, and it is
pure (no Kafka, no Spark, no clock): `decide(findings, previous_decisions, config, now_ms)`.
The caller publishes the actions, then records the decisions (remediation/queue.py).

Which findings are decided. A decision is taken once per finding *fingerprint*: the
finding's facts that matter here (status, severity, cause, suggested action, the offset to
restore) and the policy in force (enabled action kinds, dry run). A finding seen again
unchanged is not decided again (its last_seen moving is no news); a changed one is; a
finding held back by a guard is decided again at its recheck time; switching dry runs off
or enabling an action kind re-decides every open finding once. A resolved finding gets one
last "ignore" decision if an earlier one exists, none otherwise.

Rules, first match wins (each is a small function below):

1. resolved: ignore.
2. needs_a_human: unclean_election, log_truncation, anything critical, and anything the
   detector itself says only a human can fix (suggested page_human, e.g. cluster-wide
   slowness, a slow follower, a rewind caused by truncation) -> page_human. Lost data
   cannot be brought back by kmon.
3. the detector suggests no action (a deliberate operator reset, clients that read
   slowly: slow_client, quotas): ignore. A slow_client finding never reaches rule 4,
   whatever it suggests: only slow_broker findings move leadership.
4. leadership_move: slow_broker with suggested move_leadership, not cluster-wide and not
   caused by clients or the network -> move leadership off the broker. Operation
   ``{"op": "reorder_and_elect", "broker": B}``: for every partition whose leader or
   preferred (first) replica is B, the executor reorders the replica list so that an
   in-sync replica other than B comes first and B last (the same replica set: no data
   moves) with the Admin API's alterPartitionReassignments, then runs a preferred leader
   election (elect_leaders PREFERRED) for the partitions B leads. Reordering, not only
   electing, matters: while B stays the preferred replica, Kafka's automatic leader
   rebalance (auto.leader.rebalance.enable, on by default) hands leadership straight back
   to it. The partitions are chosen by the executor from live metadata just before acting,
   not here: leadership changes between decision and action.
5. offset_restore: offset_rewind / offset_reset with suggested restore_group_offsets (the
   detector suggests it only for a rewind by a spurious automatic reset or a stale offset,
   and for a reset that skipped unread messages, when the good position is still in the
   log) -> restore the group's committed offsets to the last good commit (evidence
   ``restore_to``). Findings of one group are merged into one action (an automatic reset
   usually hits many partitions at once; one action per partition would trip the
   per-hour cap and the one-at-a-time guard). The executor restores only when the group
   has no active members (a live member would overwrite the commits, and the broker
   refuses offset changes for a non-empty group anyway).
6. otherwise: ignore, naming the type and suggestion no rule covers.

No finding type models a stuck partition reassignment; the executor still carries out
``cancel_reassignment`` actions (``{"op": "cancel_reassignment", "partitions": [...]}``)
queued by an operator or a future detector.

Then the guards (remediation/guards.py), in order, worst finding first: a disabled action
kind or a cluster-wide finding is ignored; too large a share of the cluster, an action in
flight, a cooldown or the hourly cap defer the finding to a recheck (at the time the guard
will let it through, at least recheck_after_s away). The actions already taken come from
`previous_decisions` and, when given, the executor's `results` (an act decision without a
result is assumed in flight until its deadline).

Config: the [remediation] section (remediation/config.py).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from core.findings import (
    ActionKind,
    AnomalyType,
    EntityKind,
    Finding,
    Severity,
    Status,
    broker_of,
    sort_findings,
)
from remediation.actions import (
    Action,
    ActionResult,
    Decision,
    Outcome,
    ResultStatus,
    canonical_json,
    decision_key,
)
from remediation.config import RemediationSection
from remediation.guards import (
    CHANGES_CLUSTER,
    PastAction,
    Refusal,
    cap_frees_ms,
    cooldown_ends_ms,
    first_refusal,
)

# slow_broker causes that are not the broker's own fault: moving leadership would not help.
CLIENT_OR_NETWORK_CAUSES = frozenset({"client_slow_read", "client_slow_link",
                                      "network_send_slow",
                                      "response_send_slow", "quota_throttled"})
HUMAN_ONLY_TYPES = frozenset({AnomalyType.UNCLEAN_ELECTION, AnomalyType.LOG_TRUNCATION})
OFFSET_TYPES = frozenset({AnomalyType.OFFSET_REWIND, AnomalyType.OFFSET_RESET})
SUMMARY_MAX_CHARS = 1000


@dataclass(frozen=True)
class Proposal:
    """An action a rule wants, before the guards."""
    kind: ActionKind
    target: str
    operation: Mapping[str, Any]
    preconditions: Mapping[str, Any]
    why: str
    finding_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class NoAction:
    reason: str


# --- rules -----------------------------------------------------------------------------

def needs_a_human(f: Finding) -> str | None:
    """Why only a human can handle this finding, or None."""
    if f.type in HUMAN_ONLY_TYPES:
        return f"{f.type.value}: lost data cannot be brought back by kmon"
    if f.severity is Severity.CRITICAL:
        return f"critical {f.type.value}"
    if f.suggested_action is ActionKind.PAGE_HUMAN:
        return f"the detector says only a human can fix {f.type.value} ({f.cause})"
    return None


def page(f: Finding, why: str) -> Proposal:
    return Proposal(
        kind=ActionKind.PAGE_HUMAN, target=f.entity,
        operation={"op": "page", "finding_id": f.finding_id, "type": f.type.value,
                   "severity": f.severity.value, "entity": f.entity, "cause": f.cause,
                   "summary": f.explanation[:SUMMARY_MAX_CHARS]},
        preconditions={}, why=f"page a human: {why}")


def leadership_move(f: Finding) -> Proposal | NoAction | None:
    """Rule 4; None when the finding is not a leadership-move candidate at all."""
    if (f.type is not AnomalyType.SLOW_BROKER
            or f.suggested_action is not ActionKind.MOVE_LEADERSHIP):
        return None
    broker = broker_of(f.entity)
    if f.entity_kind is not EntityKind.BROKER or broker is None:
        return NoAction(f"slow_broker finding names no broker ({f.entity})")
    if f.cause in CLIENT_OR_NETWORK_CAUSES:
        return NoAction(f"broker {broker} is slow because of {f.cause}: moving its "
                        f"leadership would not help")
    return Proposal(
        kind=ActionKind.MOVE_LEADERSHIP, target=f.entity,
        operation={"op": "reorder_and_elect", "broker": broker},
        preconditions={"broker_registered": broker, "no_reassignment_in_progress": True,
                       "other_in_sync_replica": True},
        why=f"broker {broker} is slow ({f.cause}): move its leadership to other in-sync "
            f"replicas")


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def offset_restore(f: Finding) -> Proposal | NoAction | None:
    """Rule 5; None when the finding is not an offset-restore candidate at all."""
    if f.type not in OFFSET_TYPES or f.suggested_action is not ActionKind.RESTORE_GROUP_OFFSETS:
        return None
    ev = f.evidence
    group, topic = ev.get("group"), ev.get("topic")
    partition, offset = _int(ev.get("partition")), _int(ev.get("restore_to"))
    if not group or not topic or partition is None or offset is None or offset < 0:
        return NoAction("the finding's evidence lacks group, topic, partition or restore_to")
    bad = _int(ev.get("new_position")) if f.type is AnomalyType.OFFSET_REWIND else _int(
        ev.get("to_offset"))
    if bad is not None and bad != offset:
        direction = "forward" if offset > bad else "backward"
    else:  # a rewind went back (restore forward); a reset that skipped went forward
        direction = "forward" if f.type is AnomalyType.OFFSET_REWIND else "backward"
    return Proposal(
        kind=ActionKind.RESTORE_GROUP_OFFSETS, target=f"group:{group}",
        operation={"op": "restore_group_offsets", "group": group,
                   "partitions": [{"topic": topic, "partition": partition, "offset": offset,
                                   "direction": direction}]},
        preconditions={"group_has_no_members": True, "offset_within_log": True,
                       "still_displaced": True},
        why=f"group {group} lost its position on {topic}-{partition} ({f.cause}): restore the "
            f"last good commit {offset}")


def propose(f: Finding) -> Proposal | NoAction:
    """The rules in order (the module docstring says why this order)."""
    if f.status is Status.RESOLVED:
        return NoAction("the finding is resolved")
    human = needs_a_human(f)
    if human:
        return page(f, human)
    if f.suggested_action is ActionKind.NONE:
        return NoAction(f"the detector suggests no action for {f.type.value} ({f.cause})")
    for rule in (leadership_move, offset_restore):
        out = rule(f)
        if out is not None:
            return out
    return NoAction(f"no remediation rule for {f.type.value} with suggested action "
                    f"{f.suggested_action.value}")


# --- which findings need a decision ----------------------------------------------------

def fingerprint(f: Finding, config: RemediationSection) -> str:
    facts = [f.status.value, f.severity.value, f.cause, f.suggested_action.value,
             f.evidence.get("restore_to"), sorted(config.enabled_actions), config.dry_run]
    return hashlib.sha256(canonical_json(facts).encode()).hexdigest()[:16]


def latest_decisions(previous: Iterable[Decision]) -> dict[str, Decision]:
    out: dict[str, Decision] = {}
    for d in previous:
        cur = out.get(d.finding_id)
        if cur is None or (d.decided_ms, d.attempt) > (cur.decided_ms, cur.attempt):
            out[d.finding_id] = d
    return out


def needs_decision(f: Finding, latest: Decision | None, fp: str, now_ms: int) -> bool:
    if latest is None:
        return f.status is Status.OPEN
    if latest.fingerprint != fp:
        return True
    return (latest.outcome is Outcome.RECHECK_LATER and latest.recheck_at_ms is not None
            and now_ms >= latest.recheck_at_ms)


# --- what has been done ----------------------------------------------------------------

def past_actions(previous: Iterable[Decision], results: Iterable[ActionResult],
                 now_ms: int) -> list[PastAction]:
    """Real cluster-changing actions, from the executor's results and, for actions it has
    not reported on, from the act decisions (in flight until their deadline)."""
    by_id: dict[str, PastAction] = {}
    changing = {k.value for k in CHANGES_CLUSTER}
    for r in results:
        # r.kind is "unknown" for a malformed queue message: it changed nothing
        if r.counts_for_guards and r.kind in changing:
            by_id[r.action_id] = PastAction(r.action_id, r.cluster, r.target, ActionKind(r.kind),
                                            r.started_ms, r.status is ResultStatus.RUNNING)
    reported = {r.action_id for r in results}
    for d in previous:
        a = d.action
        if (d.outcome is not Outcome.ACT or a is None or a.dry_run
                or a.kind not in CHANGES_CLUSTER or a.action_id in reported
                or a.action_id in by_id):
            continue
        by_id[a.action_id] = PastAction(a.action_id, a.cluster, a.target, a.kind,
                                        d.decided_ms, now_ms <= a.deadline_ms)
    return list(by_id.values())


def implicated_brokers(findings: Iterable[Finding]) -> dict[str, set[int]]:
    """Per cluster, the brokers with an open slow_broker finding: how much of the fleet the
    slowness covers at once."""
    out: dict[str, set[int]] = defaultdict(set)
    for f in findings:
        b = broker_of(f.entity)
        if f.type is AnomalyType.SLOW_BROKER and f.status is Status.OPEN and b is not None:
            out[f.cluster].add(b)
    return out


# --- merging ---------------------------------------------------------------------------

@dataclass
class _Candidate:
    findings: list[Finding]
    proposal: Proposal
    conflicts: list[tuple[Finding, str]] = field(default_factory=list)


def merge_restores(items: Sequence[tuple[Finding, Proposal]]) -> list[_Candidate]:
    """One candidate per proposal, except restores: one per (cluster, group), the worst
    finding first. A partition two findings want restored to different offsets keeps the
    worse finding's offset; the other finding is ignored as a conflict."""
    out: list[_Candidate] = []
    restores: dict[tuple[str, str], _Candidate] = {}
    for f, p in items:
        if p.kind is not ActionKind.RESTORE_GROUP_OFFSETS:
            out.append(_Candidate([f], p))
            continue
        key = (f.cluster, p.operation["group"])
        cand = restores.get(key)
        if cand is None:
            cand = restores[key] = _Candidate([f], p)
            out.append(cand)
            continue
        parts = list(cand.proposal.operation["partitions"])
        taken = {(x["topic"], x["partition"]): x for x in parts}
        new = p.operation["partitions"][0]
        old = taken.get((new["topic"], new["partition"]))
        if old is not None:
            if old["offset"] != new["offset"] or old["direction"] != new["direction"]:
                cand.conflicts.append((f, f"conflicts with finding {cand.findings[0].finding_id},"
                                          f" which restores {new['topic']}-{new['partition']} "
                                          f"to {old['offset']}"))
                continue
        else:
            parts.append(new)
        parts.sort(key=lambda x: (x["topic"], x["partition"]))
        cand.findings.append(f)
        n = len(parts)
        cand.proposal = Proposal(
            kind=p.kind, target=p.target,
            operation={**cand.proposal.operation, "partitions": parts},
            preconditions=cand.proposal.preconditions,
            why=f"group {p.operation['group']} lost its position on {n} partition(s): restore "
                f"the last good commits")
    return out


# --- the step --------------------------------------------------------------------------

def decide(findings: Iterable[Finding], previous_decisions: Iterable[Decision],
           config: RemediationSection, now_ms: int, *, results: Iterable[ActionResult] = (),
           cluster_sizes: Mapping[str, int] | None = None) -> list[Decision]:
    """Decisions for the findings that need one (new, changed, or due for a recheck).

    `previous_decisions`: the decisions recorded so far for these findings and, for the
    guards, every decision of the last hour and cooldown (the caller loads both).
    `results`: the executor's results for those actions, when available.
    `cluster_sizes`: brokers per cluster, for the share guard (the executor checks it
    against the live cluster in any case).

    The rules run first over every finding due (their ignores recorded in finding order);
    then the proposals, merged, go through the guards worst finding first, so an action
    taken counts in the guards of the candidates after it.
    """
    findings = sort_findings(findings)
    previous = list(previous_decisions)
    rnd = _Round.start(findings, previous, list(results), config, now_ms, cluster_sizes)
    proposals = _propose_due(findings, latest_decisions(previous), rnd)
    for cand in merge_restores(proposals):
        _decide_candidate(cand, rnd)
    return rnd.decisions


@dataclass
class _Round:
    """One call of `decide`: what its steps read, and the decisions taken so far."""
    config: RemediationSection
    now_ms: int
    fingerprints: dict[str, str]
    attempts: dict[tuple[str, str], int]    # decisions so far per (finding, fingerprint)
    history: list[PastAction]               # grows with each action this round takes
    implicated: dict[str, set[int]]
    sizes: dict[str, int]
    decisions: list[Decision] = field(default_factory=list)

    @classmethod
    def start(cls, findings: list[Finding], previous: list[Decision],
              results: list[ActionResult], config: RemediationSection, now_ms: int,
              cluster_sizes: Mapping[str, int] | None) -> _Round:
        attempts: dict[tuple[str, str], int] = defaultdict(int)
        for d in previous:
            attempts[(d.finding_id, d.fingerprint)] += 1
        return cls(config, now_ms, {f.finding_id: fingerprint(f, config) for f in findings},
                   attempts, past_actions(previous, results, now_ms),
                   implicated_brokers(findings), dict(cluster_sizes or {}))

    def record(self, f: Finding, outcome: Outcome, reason: str, *,
               recheck_at: int | None = None, action: Action | None = None) -> None:
        fp = self.fingerprints[f.finding_id]
        attempt = self.attempts[(f.finding_id, fp)]
        self.decisions.append(Decision(
            decision_key=decision_key(f.finding_id, fp, attempt), finding_id=f.finding_id,
            cluster=f.cluster, anomaly_type=f.type.value, entity=f.entity, fingerprint=fp,
            attempt=attempt, outcome=outcome, reason=reason, decided_ms=self.now_ms,
            recheck_at_ms=recheck_at, action=action))


def _propose_due(findings: list[Finding], latest: Mapping[str, Decision],
                 rnd: _Round) -> list[tuple[Finding, Proposal]]:
    """The rules over each finding due: its proposal, or an ignore decision recorded now."""
    proposals: list[tuple[Finding, Proposal]] = []
    for f in findings:
        if not needs_decision(f, latest.get(f.finding_id), rnd.fingerprints[f.finding_id],
                              rnd.now_ms):
            continue
        p = propose(f)
        if isinstance(p, NoAction):
            rnd.record(f, Outcome.IGNORE, p.reason)
        else:
            proposals.append((f, p))
    return proposals


def _decide_candidate(cand: _Candidate, rnd: _Round) -> None:
    """One merged proposal: its conflicts ignored, then held back by a guard or acted on."""
    for f, why in cand.conflicts:
        rnd.record(f, Outcome.IGNORE, why)
    head, p = cand.findings[0], cand.proposal
    preconditions = dict(p.preconditions)
    n_implicated = None
    if p.kind is ActionKind.MOVE_LEADERSHIP:
        # The share guard's input, carried to the executor, which checks it again live.
        n_implicated = max(1, len(rnd.implicated.get(head.cluster, ())))
        preconditions["implicated_brokers"] = n_implicated
    refusal = first_refusal(kind=p.kind, cluster=head.cluster, target=p.target,
                            history=rnd.history, config=rnd.config, now_ms=rnd.now_ms,
                            entity_kind=head.entity_kind, anomaly_type=head.type,
                            implicated=n_implicated, cluster_size=rnd.sizes.get(head.cluster))
    if refusal is not None:
        _hold_back(cand, refusal, rnd)
    else:
        _act(cand, preconditions, rnd)


def _hold_back(cand: _Candidate, refusal: Refusal, rnd: _Round) -> None:
    """A guard refused: every finding of the candidate rechecked later, or ignored."""
    head, p = cand.findings[0], cand.proposal
    reason = f"{p.why}; held back by {refusal.guard}: {refusal.verdict.reason}"
    if p.kind is ActionKind.PAGE_HUMAN:
        reason += " (the finding's own alert rule still pages)"
    if refusal.defer:
        at = _recheck_at(refusal.guard, head.cluster, p.target, rnd.history, rnd.config,
                         rnd.now_ms)
        for f in cand.findings:
            rnd.record(f, Outcome.RECHECK_LATER, reason, recheck_at=at)
    else:
        for f in cand.findings:
            rnd.record(f, Outcome.IGNORE, reason)


def _act(cand: _Candidate, preconditions: dict, rnd: _Round) -> None:
    """The guards let it through: one action for every finding of the candidate."""
    head, p, config, now_ms = cand.findings[0], cand.proposal, rnd.config, rnd.now_ms
    action = Action.build(
        finding_ids=tuple(f.finding_id for f in cand.findings), cluster=head.cluster,
        target=p.target, kind=p.kind, operation=p.operation, preconditions=preconditions,
        decided_ms=now_ms, deadline_ms=now_ms + config.deadline_ms, dry_run=config.dry_run)
    if not action.dry_run and action.kind in CHANGES_CLUSTER:
        # In flight from now: the guards of the candidates after this one count it.
        rnd.history.append(PastAction(action.action_id, action.cluster, action.target,
                                      action.kind, now_ms, True))
    reason = p.why + (" (dry run)" if action.dry_run else "")
    for f in cand.findings:
        rnd.record(f, Outcome.ACT, reason, action=action)


def _recheck_at(guard: str, cluster: str, target: str, history: Sequence[PastAction],
                config: RemediationSection, now_ms: int) -> int:
    at = now_ms + config.recheck_after_ms
    if guard == "cooled_down":
        at = max(at, cooldown_ends_ms(cluster, target, history, config) or at)
    elif guard == "under_hourly_cap":
        at = max(at, cap_frees_ms(cluster, history, config, now_ms) or at)
    return at


def actions_of(decisions: Iterable[Decision]) -> list[Action]:
    """The distinct actions to publish, in decision order."""
    seen: dict[str, Action] = {}
    for d in decisions:
        if d.outcome is Outcome.ACT and d.action is not None:
            seen.setdefault(d.action.action_id, d.action)
    return list(seen.values())
