"""What exactly an action will do to the cluster as it is now: pure planning and precondition
checks over a snapshot of live state, so the executor's judgement is testable without Kafka.

The executor reads the live state (remediation/live_cluster.py) just before acting, asks
one function here for a plan, and acts on the plan only:

- `plan_leadership_move`: for broker B, every partition B leads or is the preferred
  (first) replica of. New replica order: the first in-sync replica other than B (in the
  current order), then the other replicas, then B: the same set, so no data moves, and B
  is nobody's preferred leader any more. A preferred election follows for the partitions
  B leads. Partitions with a reassignment in progress, or with no other in-sync replica,
  are left alone and listed with the reason.
- `plan_restore`: the partitions whose committed offset is still displaced and whose good
  offset is still in the log; refused while the group has active members.
- `plan_cancel`: the partitions whose reassignment is still in progress.

Preconditions are named in the action (the decision step writes them); a name the
executor does not know refuses the action rather than skipping a check it cannot make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from remediation.config import RemediationSection

TopicPartition = tuple[str, int]

KNOWN_PRECONDITIONS: dict[str, frozenset[str]] = {
    "reorder_and_elect": frozenset({"broker_registered", "no_reassignment_in_progress",
                                    "other_in_sync_replica", "implicated_brokers"}),
    "restore_group_offsets": frozenset({"group_has_no_members", "offset_within_log",
                                        "still_displaced"}),
    "cancel_reassignment": frozenset({"reassignment_in_progress"}),
    "page": frozenset(),
}


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Reassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class GroupState:
    group: str
    state: str          # Empty, Stable, PreparingRebalance, Dead, ...
    members: int


@dataclass(frozen=True)
class Refused:
    reason: str


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    new_replicas: tuple[int, ...]
    elect: bool             # B leads it now: a preferred election must follow the reorder

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "leader": self.leader,
                "replicas": list(self.replicas), "new_replicas": list(self.new_replicas),
                "elect": self.elect}


@dataclass(frozen=True)
class LeadershipPlan:
    broker: int
    moves: tuple[Move, ...]
    left_alone: tuple[tuple[str, int, str], ...] = ()

    def details(self) -> dict[str, Any]:
        return {"broker": self.broker, "moves": [m.to_dict() for m in self.moves],
                "left_alone": [{"topic": t, "partition": p, "reason": r}
                               for t, p, r in self.left_alone]}

    def describe(self) -> str:
        led = sum(1 for m in self.moves if m.elect)
        return (f"reorder {len(self.moves)} partition(s) so broker {self.broker} is last, then "
                f"elect preferred leaders for the {led} it leads"
                + (f"; {len(self.left_alone)} left alone" if self.left_alone else ""))


@dataclass(frozen=True)
class RestorePlan:
    group: str
    offsets: tuple[tuple[str, int, int], ...]        # topic, partition, offset
    committed_before: Mapping[str, int | None] = field(default_factory=dict)
    left_alone: tuple[tuple[str, int, str], ...] = ()

    def details(self) -> dict[str, Any]:
        return {"group": self.group,
                "offsets": [{"topic": t, "partition": p, "offset": o,
                             "committed_before": self.committed_before.get(f"{t}-{p}")}
                            for t, p, o in self.offsets],
                "left_alone": [{"topic": t, "partition": p, "reason": r}
                               for t, p, r in self.left_alone]}

    def describe(self) -> str:
        parts = ", ".join(f"{t}-{p}={o}" for t, p, o in self.offsets)
        return f"set group {self.group}'s committed offsets to {parts}"


@dataclass(frozen=True)
class CancelPlan:
    partitions: tuple[TopicPartition, ...]
    left_alone: tuple[tuple[str, int, str], ...] = ()

    def details(self) -> dict[str, Any]:
        return {"partitions": [{"topic": t, "partition": p} for t, p in self.partitions],
                "left_alone": [{"topic": t, "partition": p, "reason": r}
                               for t, p, r in self.left_alone]}

    def describe(self) -> str:
        return "cancel the reassignment of " + ", ".join(f"{t}-{p}" for t, p in self.partitions)


def unknown_preconditions(op: str, preconditions: Mapping[str, Any]) -> Refused | None:
    known = KNOWN_PRECONDITIONS.get(op)
    if known is None:
        return Refused(f"unknown operation {op!r}")
    unknown = sorted(set(preconditions) - known)
    if unknown:
        return Refused(f"unknown precondition(s) {', '.join(unknown)} for {op}: refusing to act "
                       f"on a check the executor cannot make")
    return None


def new_replica_order(replicas: tuple[int, ...], isr: tuple[int, ...], broker: int
                      ) -> tuple[int, ...] | None:
    """The same replicas with an in-sync replica other than `broker` first and `broker`
    last; None when no other replica is in sync."""
    others = [r for r in replicas if r != broker]
    in_sync = [r for r in others if r in isr]
    if not in_sync:
        return None
    first = in_sync[0]
    return (first, *[r for r in others if r != first], broker)


def plan_leadership_move(broker: int, partitions: Iterable[PartitionState],
                         in_progress: Mapping[TopicPartition, Reassignment],
                         registered: set[int], preconditions: Mapping[str, Any],
                         config: RemediationSection) -> LeadershipPlan | Refused:
    if preconditions.get("broker_registered") is not None and broker not in registered:
        return Refused(f"broker {broker} is not in the cluster metadata (brokers "
                       f"{sorted(registered)}): its leadership has already moved")
    implicated = preconditions.get("implicated_brokers")
    if implicated is not None:
        share = int(implicated) / max(1, len(registered))
        if share > config.max_cluster_share:
            return Refused(f"{implicated} of {len(registered)} live brokers implicated "
                           f"({share:.0%}) is over remediation.max_cluster_share "
                           f"({config.max_cluster_share:.0%})")
    moves, left = [], []
    for p in sorted(partitions, key=lambda x: (x.topic, x.partition)):
        leads = p.leader == broker
        preferred = bool(p.replicas) and p.replicas[0] == broker
        if not (leads or preferred):
            continue
        busy = (p.topic, p.partition) in in_progress
        if preconditions.get("no_reassignment_in_progress") and busy:
            left.append((p.topic, p.partition, "reassignment in progress"))
            continue
        order = new_replica_order(p.replicas, p.isr, broker)
        if order is None:
            left.append((p.topic, p.partition, f"no in-sync replica other than broker {broker} "
                                               f"(isr {list(p.isr)})"))
            continue
        moves.append(Move(p.topic, p.partition, p.leader, p.replicas, order, leads))
    if not moves:
        why = "; ".join(f"{t}-{p}: {r}" for t, p, r in left[:10])
        return Refused(f"broker {broker} leads no partition it can hand over"
                       + (f" ({why})" if why else " and is no partition's preferred leader"))
    return LeadershipPlan(broker, tuple(moves), tuple(left))


def plan_restore(operation: Mapping[str, Any], preconditions: Mapping[str, Any],
                 group: GroupState, committed: Mapping[TopicPartition, int | None],
                 bounds: Mapping[TopicPartition, tuple[int, int]]) -> RestorePlan | Refused:
    """`bounds`: (log start, log end) per partition, None-free for partitions that exist."""
    if preconditions.get("group_has_no_members") and group.members > 0:
        return Refused(f"group {group.group} has {group.members} active member(s) (state "
                       f"{group.state}): they would overwrite restored offsets, and the broker "
                       f"refuses offset changes for a group that is not empty")
    offsets, left, before = [], [], {}
    for x in operation["partitions"]:
        tp = (x["topic"], int(x["partition"]))
        target, name = int(x["offset"]), f"{x['topic']}-{x['partition']}"
        if tp not in bounds:
            left.append((*tp, "partition not found"))
            continue
        start, end = bounds[tp]
        if preconditions.get("offset_within_log") and not start <= target <= end:
            left.append((*tp, f"offset {target} is no longer in the log [{start}, {end}]"))
            continue
        current = committed.get(tp)
        if preconditions.get("still_displaced") and current is not None:
            done = current >= target if x.get("direction", "forward") == "forward" else (
                current <= target)
            if done:
                left.append((*tp, f"committed offset {current} is already at or past {target}"))
                continue
        before[name] = current
        offsets.append((*tp, target))
    if not offsets:
        why = "; ".join(f"{t}-{p}: {r}" for t, p, r in left[:10])
        return Refused(f"nothing to restore for group {group.group} ({why})")
    return RestorePlan(group.group, tuple(offsets), before, tuple(left))


def plan_cancel(operation: Mapping[str, Any], preconditions: Mapping[str, Any],
                in_progress: Mapping[TopicPartition, Reassignment]) -> CancelPlan | Refused:
    parts, left = [], []
    for x in operation["partitions"]:
        tp = (x["topic"], int(x["partition"]))
        if preconditions.get("reassignment_in_progress") and tp not in in_progress:
            left.append((*tp, "no reassignment in progress"))
        else:
            parts.append(tp)
    if not parts:
        return Refused("no reassignment in progress for " + ", ".join(
            f"{t}-{p}" for t, p, _ in left))
    return CancelPlan(tuple(parts), tuple(left))
