"""The guards every remediation action passes, at decision time and again just before acting.

Each guard is one rule, returns a `Verdict` (allowed, reason) and reads only what it is
given: the config, the actions already taken (`PastAction`) and the time. `first_refusal`
applies them in this order, because the order decides what a refusal means:

1. action_enabled: every action type is off until listed in remediation.enabled_actions.
   A disabled type is ignored whatever else holds.
2. not_cluster_wide: a finding about the whole cluster is never fixed by acting on one part
   of it (cluster-wide slowness is the monitor's problem, not the brokers').
3. within_cluster_share: no action when the brokers implicated at once are more than
   max_cluster_share of the cluster (one slow broker of 3 is a third of the fleet).
4. before_deadline: an action not started by its deadline is stale.
5. nothing_in_flight: one action at a time per cluster; an action started and not finished
   blocks every other.
6. cooled_down: no action on an entity within cooldown_s of the last one on it.
7. under_hourly_cap: at most max_actions_per_hour actions per cluster in any hour.

1-2 make a finding not worth acting on (ignore); 3 and 5-7 only defer it (recheck later);
4 applies to queued actions. Guards 3 and 5-7 concern actions that change the cluster
(move leadership, cancel a reassignment, restore offsets); paging a human passes 1 and 4
only. A dry run changes nothing, so it is not a `PastAction`: it neither blocks nor counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

from core.findings import ActionKind, AnomalyType, EntityKind
from remediation.config import RemediationSection

HOUR_MS = 3600 * 1000

CHANGES_CLUSTER = frozenset({ActionKind.MOVE_LEADERSHIP, ActionKind.CANCEL_REASSIGNMENT,
                             ActionKind.RESTORE_GROUP_OFFSETS})


class Verdict(NamedTuple):
    allowed: bool
    reason: str


ALLOWED = Verdict(True, "ok")


@dataclass(frozen=True)
class PastAction:
    """A real (not dry-run) action that changes a cluster, started or about to be."""
    action_id: str
    cluster: str
    target: str
    kind: ActionKind
    started_ms: int
    in_flight: bool


def _secs(ms: int) -> str:
    return f"{ms / 1000:.0f} s"


def action_enabled(kind: ActionKind, config: RemediationSection) -> Verdict:
    if config.is_enabled(kind):
        return ALLOWED
    return Verdict(False, f"{kind.value} is disabled (not in remediation.enabled_actions)")


def not_cluster_wide(entity_kind: EntityKind, anomaly_type: AnomalyType | None = None) -> Verdict:
    if entity_kind is EntityKind.CLUSTER or anomaly_type is AnomalyType.CLUSTER_WIDE_SLOWNESS:
        return Verdict(False, "the finding is cluster-wide: no single part of the cluster to "
                              "act on")
    return ALLOWED


def within_cluster_share(implicated: int, cluster_size: int | None,
                         config: RemediationSection) -> Verdict:
    """`implicated`: brokers with open findings of the kind the action answers."""
    if cluster_size is None:
        return Verdict(True, "cluster size unknown here; the executor checks the share "
                             "against the live cluster")
    if cluster_size <= 0:
        return Verdict(False, "the cluster has no brokers")
    share = implicated / cluster_size
    if share > config.max_cluster_share:
        return Verdict(False, f"{implicated} of {cluster_size} brokers implicated ({share:.0%}) "
                              f"is over remediation.max_cluster_share "
                              f"({config.max_cluster_share:.0%})")
    return ALLOWED


def before_deadline(deadline_ms: int, now_ms: int) -> Verdict:
    if now_ms > deadline_ms:
        return Verdict(False, f"deadline passed {_secs(now_ms - deadline_ms)} ago")
    return ALLOWED


def _in_cluster(cluster: str, history: Iterable[PastAction], exclude: str | None):
    return [p for p in history if p.cluster == cluster and p.action_id != exclude]


def nothing_in_flight(cluster: str, history: Iterable[PastAction],
                      exclude: str | None = None) -> Verdict:
    """`exclude`: the action being checked (its own running record does not block it)."""
    busy = sorted((p for p in _in_cluster(cluster, history, exclude) if p.in_flight),
                  key=lambda p: p.started_ms)
    if busy:
        p = busy[0]
        return Verdict(False, f"action {p.action_id} ({p.kind.value} on {p.target}) is in "
                              f"flight in cluster {cluster}: one action at a time")
    return ALLOWED


def cooldown_ends_ms(cluster: str, target: str, history: Iterable[PastAction],
                     config: RemediationSection, exclude: str | None = None) -> int | None:
    """When the entity's cooldown ends, None when it has no past action."""
    times = [p.started_ms for p in _in_cluster(cluster, history, exclude) if p.target == target]
    return max(times) + config.cooldown_ms if times else None


def cooled_down(cluster: str, target: str, history: Iterable[PastAction],
                config: RemediationSection, now_ms: int, exclude: str | None = None) -> Verdict:
    ends = cooldown_ends_ms(cluster, target, history, config, exclude)
    if ends is not None and now_ms < ends:
        last = ends - config.cooldown_ms
        return Verdict(False, f"{target} was acted on {_secs(now_ms - last)} "
                              f"ago; cooldown {config.cooldown_s:.0f} s "
                              f"(remediation.cooldown_s) ends in {_secs(ends - now_ms)}")
    return ALLOWED


def _last_hour(cluster: str, history: Iterable[PastAction], now_ms: int,
               exclude: str | None) -> list[int]:
    return sorted(p.started_ms for p in _in_cluster(cluster, history, exclude)
                  if now_ms - HOUR_MS < p.started_ms <= now_ms)


def cap_frees_ms(cluster: str, history: Iterable[PastAction], config: RemediationSection,
                 now_ms: int, exclude: str | None = None) -> int | None:
    """When the hourly cap lets one more action through, None when it already does."""
    times = _last_hour(cluster, history, now_ms, exclude)
    if len(times) < config.max_actions_per_hour:
        return None
    if config.max_actions_per_hour == 0:
        return now_ms + HOUR_MS
    # The cap frees when enough of the oldest leave the window.
    return times[len(times) - config.max_actions_per_hour] + HOUR_MS


def under_hourly_cap(cluster: str, history: Iterable[PastAction], config: RemediationSection,
                     now_ms: int, exclude: str | None = None) -> Verdict:
    times = _last_hour(cluster, history, now_ms, exclude)
    if len(times) >= config.max_actions_per_hour:
        return Verdict(False, f"{len(times)} actions in cluster {cluster} in the last hour "
                              f"reach remediation.max_actions_per_hour "
                              f"({config.max_actions_per_hour})")
    return ALLOWED


class Refusal(NamedTuple):
    guard: str       # the guard's function name
    verdict: Verdict
    defer: bool      # True: worth deciding again later; False: not worth acting on


def first_refusal(*, kind: ActionKind, cluster: str, target: str,
                  history: Sequence[PastAction], config: RemediationSection, now_ms: int,
                  entity_kind: EntityKind | None = None,
                  anomaly_type: AnomalyType | None = None,
                  implicated: int | None = None, cluster_size: int | None = None,
                  deadline_ms: int | None = None, exclude: str | None = None) -> Refusal | None:
    """The first guard that refuses, in the module's order; None when every guard allows."""
    checks: list[tuple[str, bool, Verdict]] = [
        ("action_enabled", False, action_enabled(kind, config))]
    changes = kind in CHANGES_CLUSTER
    if changes and entity_kind is not None:
        checks.append(("not_cluster_wide", False, not_cluster_wide(entity_kind, anomaly_type)))
    if changes and implicated is not None:
        checks.append(("within_cluster_share", True,
                       within_cluster_share(implicated, cluster_size, config)))
    if deadline_ms is not None:
        checks.append(("before_deadline", False, before_deadline(deadline_ms, now_ms)))
    if changes:
        checks += [
            ("nothing_in_flight", True, nothing_in_flight(cluster, history, exclude)),
            ("cooled_down", True, cooled_down(cluster, target, history, config, now_ms, exclude)),
            ("under_hourly_cap", True, under_hourly_cap(cluster, history, config, now_ms,
                                                        exclude)),
        ]
    for name, defer, verdict in checks:
        if not verdict.allowed:
            return Refusal(name, verdict, defer)
    return None
