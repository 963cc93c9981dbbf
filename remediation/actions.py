"""What the remediation steps hand each other: decisions, actions and action results.

- `Decision`: what the decision step concluded about one finding at one time: act,
  recheck_later or ignore, and why. Its `decision_key` (finding id, the finding's
  fingerprint, the attempt number) is what the decisions table merges on, so re-running the
  same decision step writes the same rows.
- `Action`: one message on the remediation queue: the exact operation (JSON), the
  preconditions the executor checks against the live cluster just before acting, a
  deadline and the dry-run flag. Its `action_id` is a hash of the finding ids, the
  operation, the target and the dry-run flag: deciding the same thing twice produces the
  same message id, and the executor acts on an id at most once.
- `ActionResult`: what the executor did with an action: running (started, not finished),
  done, dry_run (logged only), skipped (and why) or failed (and why). Keyed by action_id.

Every value here is plain JSON, so the same rows go to Kafka, JSON-lines files and Delta.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Mapping

from core.findings import ActionKind

QUEUE_SCHEMA_VERSION = 1


def canonical_json(value: Any) -> str:
    """One spelling per value (sorted keys, no spaces): hashes and merges depend on it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


class Outcome(StrEnum):
    ACT = "act"                      # an action was queued
    RECHECK_LATER = "recheck_later"  # a guard held it back for now; decided again later
    IGNORE = "ignore"                # nothing to do (and why)


class ResultStatus(StrEnum):
    RUNNING = "running"   # started, not finished (a crash leaves this; the retry resumes)
    DONE = "done"
    DRY_RUN = "dry_run"   # logged what it would do, changed nothing
    SKIPPED = "skipped"   # a guard or precondition said no
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self is not ResultStatus.RUNNING


def action_id(finding_ids: tuple[str, ...], operation: Mapping[str, Any], target: str,
              dry_run: bool) -> str:
    """Deterministic: the same finding(s), operation, target and mode give the same id.

    The dry-run flag is part of it so that switching dry runs off acts on a finding whose
    dry run was already recorded under the other id.
    """
    return _hash(",".join(sorted(finding_ids)), canonical_json(operation), target,
                 "dry" if dry_run else "live")


def decision_key(finding_id: str, fingerprint: str, attempt: int) -> str:
    return _hash(finding_id, fingerprint, str(attempt))


@dataclass(frozen=True)
class Action:
    action_id: str
    finding_id: str                # the worst of the findings the action answers
    finding_ids: tuple[str, ...]   # every finding it answers (a group restore may merge several)
    cluster: str
    target: str                    # the entity acted on: "broker:2", "group:orders-app", ...
    kind: ActionKind
    operation: Mapping[str, Any]
    preconditions: Mapping[str, Any]
    decided_ms: int
    deadline_ms: int
    dry_run: bool
    version: int = QUEUE_SCHEMA_VERSION

    @classmethod
    def build(cls, *, finding_ids: tuple[str, ...], cluster: str, target: str,
              kind: ActionKind, operation: Mapping[str, Any],
              preconditions: Mapping[str, Any], decided_ms: int, deadline_ms: int,
              dry_run: bool) -> "Action":
        canonical_json(operation)
        canonical_json(preconditions)
        ids = tuple(finding_ids)
        return cls(action_id=action_id(ids, operation, target, dry_run), finding_id=ids[0],
                   finding_ids=ids, cluster=cluster, target=target, kind=kind,
                   operation=dict(operation), preconditions=dict(preconditions),
                   decided_ms=decided_ms, deadline_ms=deadline_ms, dry_run=dry_run)

    @property
    def op(self) -> str:
        return str(self.operation.get("op", ""))

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "action_id": self.action_id,
                "finding_id": self.finding_id, "finding_ids": list(self.finding_ids),
                "cluster": self.cluster, "target": self.target, "kind": self.kind.value,
                "operation": dict(self.operation), "preconditions": dict(self.preconditions),
                "decided_ms": self.decided_ms, "deadline_ms": self.deadline_ms,
                "dry_run": self.dry_run}

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Action":
        """Raises ValueError naming what is wrong (a queue message is outside input)."""
        try:
            if d.get("version") != QUEUE_SCHEMA_VERSION:
                raise ValueError(f"unsupported queue message version {d.get('version')!r}")
            ids = tuple(str(x) for x in d["finding_ids"])
            if not ids:
                raise ValueError("finding_ids is empty")
            a = cls(action_id=str(d["action_id"]), finding_id=str(d["finding_id"]),
                    finding_ids=ids, cluster=str(d["cluster"]), target=str(d["target"]),
                    kind=ActionKind(d["kind"]), operation=dict(d["operation"]),
                    preconditions=dict(d["preconditions"]), decided_ms=int(d["decided_ms"]),
                    deadline_ms=int(d["deadline_ms"]), dry_run=_bool(d["dry_run"]))
        except KeyError as e:
            raise ValueError(f"missing field {e.args[0]}") from None
        except (TypeError, AttributeError) as e:
            raise ValueError(f"wrong type: {e}") from None
        expected = action_id(a.finding_ids, a.operation, a.target, a.dry_run)
        if a.action_id != expected:
            raise ValueError(f"action_id {a.action_id} does not match its content "
                             f"(expected {expected})")
        return a

    @classmethod
    def from_json(cls, text: str | bytes) -> "Action":
        try:
            d = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        return cls.from_dict(d)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true or false, got {v!r}")
    return v


@dataclass(frozen=True)
class Decision:
    decision_key: str
    finding_id: str
    cluster: str
    anomaly_type: str
    entity: str
    fingerprint: str        # the finding's facts and the policy this decision was taken under
    attempt: int            # 0 for the first decision on this fingerprint, +1 per recheck
    outcome: Outcome
    reason: str
    decided_ms: int
    recheck_at_ms: int | None = None
    action: Action | None = None

    @property
    def action_id(self) -> str | None:
        return self.action.action_id if self.action else None

    def to_row(self) -> dict[str, Any]:
        return {"decision_key": self.decision_key, "finding_id": self.finding_id,
                "cluster": self.cluster, "anomaly_type": self.anomaly_type,
                "entity": self.entity, "fingerprint": self.fingerprint,
                "attempt": self.attempt, "outcome": self.outcome.value, "reason": self.reason,
                "decided_ms": self.decided_ms, "recheck_at_ms": self.recheck_at_ms,
                "action_id": self.action_id,
                "action_kind": self.action.kind.value if self.action else None,
                "dry_run": self.action.dry_run if self.action else None,
                "action_json": self.action.to_json() if self.action else None}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Decision":
        action_json = row.get("action_json")
        return cls(decision_key=row["decision_key"], finding_id=row["finding_id"],
                   cluster=row["cluster"], anomaly_type=row["anomaly_type"],
                   entity=row["entity"], fingerprint=row["fingerprint"],
                   attempt=int(row["attempt"]), outcome=Outcome(row["outcome"]),
                   reason=row["reason"], decided_ms=int(row["decided_ms"]),
                   recheck_at_ms=(None if row.get("recheck_at_ms") is None
                                  else int(row["recheck_at_ms"])),
                   action=Action.from_json(action_json) if action_json else None)


@dataclass(frozen=True)
class ActionResult:
    action_id: str
    cluster: str
    kind: str               # the ActionKind value, or "unknown" for a malformed message
    target: str
    finding_id: str
    status: ResultStatus
    reason: str
    started_ms: int
    finished_ms: int | None = None
    dry_run: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)
    executor: str = ""

    @property
    def counts_for_guards(self) -> bool:
        """Real actions that started (running, done, failed) count toward the guards; a dry
        run or a skip changed nothing."""
        return not self.dry_run and self.status in (ResultStatus.RUNNING, ResultStatus.DONE,
                                                    ResultStatus.FAILED)

    def to_row(self) -> dict[str, Any]:
        return {"action_id": self.action_id, "cluster": self.cluster, "kind": self.kind,
                "target": self.target, "finding_id": self.finding_id,
                "status": self.status.value, "reason": self.reason,
                "started_ms": self.started_ms, "finished_ms": self.finished_ms,
                "dry_run": self.dry_run, "details_json": canonical_json(dict(self.details)),
                "executor": self.executor}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "ActionResult":
        details = row.get("details")
        if details is None:
            details = json.loads(row.get("details_json") or "{}")
        return cls(action_id=row["action_id"], cluster=row["cluster"], kind=row["kind"],
                   target=row["target"], finding_id=row["finding_id"],
                   status=ResultStatus(row["status"]), reason=row["reason"],
                   started_ms=int(row["started_ms"]),
                   finished_ms=None if row.get("finished_ms") is None else int(row["finished_ms"]),
                   dry_run=bool(row.get("dry_run")), details=dict(details),
                   executor=row.get("executor") or "")
