"""The finding model every detector shares, and the lifecycle of a finding.

Every table, metric, alert, dashboard and remediation rule uses the values declared here,
never free strings: one list of anomaly types, one of severities, one of statuses, one of
the actions a finding may suggest, one of the kinds of entity a finding names. Each list
is ranked: rank 0 is the most severe (or the most urgent), so sorting by rank puts the
worst first.

A detector turns gold rows into `Detection`s: "this condition holds for this entity, seen
from first_seen_ms to last_seen_ms, because of this evidence". It knows nothing about
findings already open. `update_findings` is the one place that turns this evaluation's
detections into `Finding`s with an identity and a lifecycle:

- a detection for the same (cluster, type, entity) as an open finding refreshes it
  (last_seen, evidence, severity, cause, explanation, action): a condition that persists
  is one finding, however many evaluations see it;
- a detection with nothing open opens a finding whose id is a hash of cluster, type,
  entity and the first_seen time rounded down to `id_bucket_s`, so re-running the same
  evaluation (a restarted job, a replayed batch) produces the same id, and the Delta
  merge by finding_id stays idempotent; a detection whose id names a finding resolved
  earlier in the same bucket reopens that finding instead of writing a second row with
  the same id;
- an open finding whose last_seen is `resolve_after_s` or more before `now_ms` becomes
  resolved (`resolved_ms` = now_ms); a detector that stops seeing the condition simply
  stops emitting it, so this also resolves findings nobody re-detects;
- a detection whose last_seen is already that old opens nothing: it describes history
  (a rewind that recovered long ago but is still inside the detector's input).

Config keys ([findings] section, `FindingsSection`):

- resolve_after_s = 300: how long an open finding may go unseen before it is resolved.
- resolve_after_s_by_type = {unclean_election = 3600, log_truncation = 3600,
  offset_reset = 1800}: per anomaly type overrides; one-off events (an election, a
  truncation, a reset) are seen once, so their findings stay open long enough for a human
  to look and for correlation to link the later effects to them.
- id_bucket_s = 60: the first_seen rounding used in the finding id.

Incidents (`incident_id`, `related`) are set by detectors/correlation.py, not here; a
refreshed finding keeps whatever correlation gave it until correlation runs again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Iterable, Mapping

from core.config_keys import ConfigError, _key


class _Ranked(StrEnum):
    @property
    def rank(self) -> int:
        """0 for the first (most severe) member; members are declared worst first."""
        return list(type(self)).index(self)


class Severity(_Ranked):
    CRITICAL = "critical"  # data lost or about to be; page now
    HIGH = "high"          # users hurt now (latency, duplicates, stalled consumers)
    WARNING = "warning"    # degraded or a symptom of a fault elsewhere
    INFO = "info"          # worth recording; nobody needs to act


class AnomalyType(_Ranked):
    # Declared worst first: ties between findings of the same severity sort this way.
    UNCLEAN_ELECTION = "unclean_election"
    LOG_TRUNCATION = "log_truncation"
    OFFSET_RESET = "offset_reset"
    CLUSTER_WIDE_SLOWNESS = "cluster_wide_slowness"
    SLOW_BROKER = "slow_broker"
    OFFSET_REWIND = "offset_rewind"
    COMPACTION_LAG = "compaction_lag"
    # A client's own problem (it reads its responses slowly): no broker is at fault.
    SLOW_CLIENT = "slow_client"


class Status(_Ranked):
    OPEN = "open"
    RESOLVED = "resolved"


class ActionKind(_Ranked):
    """What the decision step may do about a finding; detectors only suggest."""
    MOVE_LEADERSHIP = "move_leadership"
    CANCEL_REASSIGNMENT = "cancel_reassignment"
    RESTORE_GROUP_OFFSETS = "restore_group_offsets"
    PAGE_HUMAN = "page_human"
    NONE = "none"


class EntityKind(_Ranked):
    CLUSTER = "cluster"
    BROKER = "broker"
    PARTITION = "partition"
    GROUP = "group"
    CLIENT = "client"


def broker_entity(broker: int) -> str:
    return f"broker:{broker}"


def partition_entity(topic: str, partition: int) -> str:
    """Kafka's own spelling of a partition, as its logs print it: "orders-2"."""
    return f"{topic}-{partition}"


def group_partition_entity(group: str, topic: str, partition: int) -> str:
    return f"group:{group}/{topic}-{partition}"


def cluster_entity(cluster: str) -> str:
    return f"cluster:{cluster}"


def client_entity(client_id: str) -> str:
    """A Kafka client by its client.id, as the request log names it: "client:billing"."""
    return f"client:{client_id}"


def broker_of(entity: str) -> int | None:
    """The broker id in a "broker:N" entity, None for any other entity."""
    if entity.startswith("broker:"):
        try:
            return int(entity[len("broker:"):])
        except ValueError:
            return None
    return None


def _check_json(evidence: Mapping[str, Any], what: str) -> None:
    # Evidence lands in a Delta string column and in alert annotations: refuse anything
    # json cannot write (sets, enums of other modules, NaN) at the detector, not the sink.
    try:
        json.dumps(evidence, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what}: evidence is not JSON-serialisable: {e}") from None


@dataclass(frozen=True)
class Detection:
    """One detector's claim, in one evaluation, that a condition holds for an entity."""
    cluster: str
    type: AnomalyType
    severity: Severity
    entity_kind: EntityKind
    entity: str
    first_seen_ms: int
    last_seen_ms: int
    cause: str
    explanation: str
    suggested_action: ActionKind
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.last_seen_ms < self.first_seen_ms:
            raise ValueError(f"{self.type} {self.entity}: last_seen before first_seen")
        _check_json(self.evidence, f"{self.type} {self.entity}")


@dataclass(frozen=True)
class Finding:
    """One row of the anomalies table: a detection with an identity and a lifecycle."""
    finding_id: str
    cluster: str
    type: AnomalyType
    severity: Severity
    entity_kind: EntityKind
    entity: str
    first_seen_ms: int
    last_seen_ms: int
    status: Status
    evidence: Mapping[str, Any]
    cause: str
    explanation: str
    suggested_action: ActionKind
    incident_id: str | None = None
    related: tuple[str, ...] = ()
    resolved_ms: int | None = None

    def __post_init__(self) -> None:
        _check_json(self.evidence, f"finding {self.finding_id}")

    @property
    def is_root_cause(self) -> bool:
        """True for the finding correlation chose as the root of its incident."""
        return self.incident_id is not None and self.incident_id == self.finding_id

    def to_row(self) -> dict[str, Any]:
        """Plain values for a Spark row: enums as their strings, evidence as JSON text."""
        return {
            "finding_id": self.finding_id, "cluster": self.cluster, "type": self.type.value,
            "severity": self.severity.value, "entity_kind": self.entity_kind.value,
            "entity": self.entity, "first_seen_ms": self.first_seen_ms,
            "last_seen_ms": self.last_seen_ms, "status": self.status.value,
            "evidence_json": json.dumps(self.evidence, sort_keys=True, allow_nan=False),
            "cause": self.cause, "explanation": self.explanation,
            "suggested_action": self.suggested_action.value, "incident_id": self.incident_id,
            "related": list(self.related), "resolved_ms": self.resolved_ms,
            "is_root_cause": self.is_root_cause,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Finding":
        """The inverse of `to_row` (accepts `evidence` as a dict or `evidence_json`)."""
        evidence = row.get("evidence")
        if evidence is None:
            evidence = json.loads(row.get("evidence_json") or "{}")
        return cls(
            finding_id=row["finding_id"], cluster=row["cluster"], type=AnomalyType(row["type"]),
            severity=Severity(row["severity"]), entity_kind=EntityKind(row["entity_kind"]),
            entity=row["entity"], first_seen_ms=int(row["first_seen_ms"]),
            last_seen_ms=int(row["last_seen_ms"]), status=Status(row["status"]),
            evidence=dict(evidence), cause=row["cause"], explanation=row["explanation"],
            suggested_action=ActionKind(row["suggested_action"]),
            incident_id=row.get("incident_id"), related=tuple(row.get("related") or ()),
            resolved_ms=row.get("resolved_ms"))


@dataclass(frozen=True)
class FindingsSection:
    resolve_after_s: float = _key("How long an open finding may go undetected before it is "
                                  "resolved", 300.0, min=1, max=30 * 86400)
    resolve_after_s_by_type: dict = _key(
        "Per anomaly type overrides of resolve_after_s (one-off events stay open longer)",
        {"unclean_election": 3600.0, "log_truncation": 3600.0, "offset_reset": 1800.0})
    id_bucket_s: float = _key("first_seen is rounded down to this many seconds in the "
                              "finding id, so a re-run evaluation keeps the same ids",
                              60.0, min=1, max=86400)

    def __post_init__(self) -> None:
        for name, seconds in self.resolve_after_s_by_type.items():
            if name not in {t.value for t in AnomalyType}:
                raise ConfigError(f"findings.resolve_after_s_by_type: unknown anomaly type "
                                  f"{name!r} (known: {', '.join(AnomalyType)})")
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
                raise ConfigError(f"findings.resolve_after_s_by_type.{name} must be a positive "
                                  f"number of seconds, got {seconds!r}")

    def resolve_after_ms(self, anomaly_type: AnomalyType) -> int:
        return int(1000 * self.resolve_after_s_by_type.get(anomaly_type.value,
                                                            self.resolve_after_s))


def finding_id(cluster: str, anomaly_type: AnomalyType, entity: str, first_seen_ms: int,
               id_bucket_ms: int) -> str:
    """Deterministic id: the same condition seen from the same bucket keeps one id."""
    bucket = first_seen_ms // id_bucket_ms
    text = f"{cluster}\x1f{anomaly_type.value}\x1f{entity}\x1f{bucket}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def finding_key(x: Finding | Detection) -> tuple[str, AnomalyType, str]:
    """What makes two observations the same finding: cluster, type and entity."""
    return x.cluster, x.type, x.entity


# --- lifecycle rules -------------------------------------------------------------------

def merge_same_entity(detections: Iterable[Detection]) -> list[Detection]:
    """One detection per (cluster, type, entity): the most severe, then the latest seen.

    Two rules of one detector (or two windows) may describe the same entity; opening two
    findings for it would double-page. first_seen is the earliest of them.
    """
    best: dict[tuple, Detection] = {}
    for d in detections:
        k = finding_key(d)
        cur = best.get(k)
        if cur is None:
            best[k] = d
            continue
        first = min(cur.first_seen_ms, d.first_seen_ms)
        winner = min((cur, d), key=lambda x: (x.severity.rank, -x.last_seen_ms))
        best[k] = dataclasses.replace(winner, first_seen_ms=first)
    return list(best.values())


def is_history(d: Detection, now_ms: int, resolve_after_ms: int) -> bool:
    """A detection last seen so long ago that a finding for it would resolve at once."""
    return now_ms - d.last_seen_ms >= resolve_after_ms


def refresh(f: Finding, d: Detection) -> Finding:
    """The same condition seen again: keep identity and correlation, take the new facts."""
    return dataclasses.replace(
        f, last_seen_ms=max(f.last_seen_ms, d.last_seen_ms), severity=d.severity,
        evidence=dict(d.evidence), cause=d.cause, explanation=d.explanation,
        suggested_action=d.suggested_action, status=Status.OPEN, resolved_ms=None)


def open_finding(d: Detection, id_bucket_ms: int) -> Finding:
    return Finding(
        finding_id=finding_id(d.cluster, d.type, d.entity, d.first_seen_ms, id_bucket_ms),
        cluster=d.cluster, type=d.type, severity=d.severity, entity_kind=d.entity_kind,
        entity=d.entity, first_seen_ms=d.first_seen_ms, last_seen_ms=d.last_seen_ms,
        status=Status.OPEN, evidence=dict(d.evidence), cause=d.cause,
        explanation=d.explanation, suggested_action=d.suggested_action)


def is_due_to_resolve(f: Finding, now_ms: int, resolve_after_ms: int) -> bool:
    """An open finding nobody has seen for resolve_after: the condition has cleared."""
    return f.status is Status.OPEN and now_ms - f.last_seen_ms >= resolve_after_ms


def resolve(f: Finding, now_ms: int) -> Finding:
    return dataclasses.replace(f, status=Status.RESOLVED, resolved_ms=now_ms)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Open before resolved, then worst first: severity, anomaly type, cluster, entity, time."""
    return sorted(findings, key=lambda f: (f.status.rank, f.severity.rank, f.type.rank,
                                           f.cluster, f.entity, f.first_seen_ms, f.finding_id))


def update_findings(previous: Iterable[Finding], detections: Iterable[Detection], *,
                    now_ms: int, config: FindingsSection | None = None) -> list[Finding]:
    """This evaluation's findings: `previous` updated by `detections` at `now_ms`.

    `previous` holds the findings still open (resolved ones may be included; they come
    back unchanged unless re-detected in their id bucket). The result holds every finding
    of `previous` plus the new ones; write it back with a merge on finding_id.

    The order matters: duplicates are merged first, so one entity never opens two
    findings in one evaluation; matching open findings are refreshed before anything is
    opened, so a persisting condition keeps its id; resolution comes last, so a finding
    detected in this evaluation is never resolved by it.
    """
    config = config or FindingsSection()
    bucket_ms = int(config.id_bucket_s * 1000)
    by_id: dict[str, Finding] = {f.finding_id: f for f in previous}
    open_by_key = {finding_key(f): f.finding_id for f in by_id.values()
                   if f.status is Status.OPEN}

    for d in merge_same_entity(detections):
        current_id = open_by_key.get(finding_key(d))
        if current_id is not None:
            by_id[current_id] = refresh(by_id[current_id], d)
            continue
        if is_history(d, now_ms, config.resolve_after_ms(d.type)):
            continue
        new = open_finding(d, bucket_ms)
        earlier = by_id.get(new.finding_id)
        by_id[new.finding_id] = refresh(earlier, d) if earlier is not None else new
        open_by_key[finding_key(d)] = new.finding_id

    for fid, f in list(by_id.items()):
        if is_due_to_resolve(f, now_ms, config.resolve_after_ms(f.type)):
            by_id[fid] = resolve(f, now_ms)
    return sort_findings(by_id.values())
