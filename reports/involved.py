"""Which brokers, APIs, partitions and groups a set of findings names.

Read from the entity and the evidence keys the detectors write (detectors/*.py):
slow_broker names its broker, the API and the follower it blames; slow_client the brokers
it reads from; unclean_election the old and new leader and the groups on the lost range;
log_truncation the broker that truncated; offset_reset / offset_rewind the group, topic
and partition (and a truncation with its broker); a meter-only election its controller
and candidate partitions.

Only real broker ids count: Kafka writes -1 where there is no broker (no leader, an old
leader the controller did not know, a controller not yet elected), and detectors copy it
into their evidence (unclean_election's old_leader) as it stands.
"""

from __future__ import annotations

from typing import Any, Iterable

from core.findings import Finding, broker_of

# Evidence keys holding one broker id, and keys holding a list of them.
BROKER_KEYS = ("broker", "old_leader", "new_leader", "controller")
BROKER_LIST_KEYS = ("held_back_leaders", "brokers_blamed", "brokers")
# Evidence keys listing groups as {"group": ..., ...} (unclean_election).
GROUP_LIST_KEYS = ("groups_inside", "groups_beyond", "groups_behind", "groups_unplaced")


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _broker_id(v: Any) -> int | None:
    """A broker id, or None: not an int, or negative (Kafka's -1, "no broker")."""
    b = broker_of(v) if isinstance(v, str) else _int(v)
    return b if b is not None and b >= 0 else None


def brokers_of(f: Finding) -> set[int]:
    e = f.evidence
    truncation = e.get("truncation")
    candidates = [f.entity, *(e.get(k) for k in BROKER_KEYS),
                  *(b for k in BROKER_LIST_KEYS for b in e.get(k) or ()),
                  e.get("slow_follower"),
                  truncation.get("broker") if isinstance(truncation, dict) else None]
    return {b for b in map(_broker_id, candidates) if b is not None}


def apis_of(f: Finding) -> set[str]:
    """The request types a finding is about (slow_broker: its api and slow_apis)."""
    e = f.evidence
    out = {a for a in e.get("slow_apis") or () if isinstance(a, str)}
    if isinstance(e.get("api"), str):
        out.add(e["api"])
    return out


def _split_partition(text: str) -> tuple[str, int] | None:
    topic, _, p = text.rpartition("-")
    return (topic, int(p)) if topic and p.isdigit() else None


def partitions_of(f: Finding) -> set[tuple[str, int]]:
    e = f.evidence
    out = set()
    if isinstance(e.get("topic"), str) and _int(e.get("partition")) is not None:
        out.add((e["topic"], e["partition"]))
    for text in e.get("candidate_partitions") or ():
        tp = _split_partition(text) if isinstance(text, str) else None
        if tp:
            out.add(tp)
    return out


def groups_of(f: Finding) -> set[tuple[str, str, int]]:
    """(group, topic, partition) named by the finding."""
    e = f.evidence
    tps = partitions_of(f)
    out = set()
    if isinstance(e.get("group"), str):
        out |= {(e["group"], t, p) for t, p in tps}
    for k in GROUP_LIST_KEYS:
        for item in e.get(k) or ():
            if isinstance(item, dict) and isinstance(item.get("group"), str):
                out |= {(item["group"], t, p) for t, p in tps}
    return out


def involved_brokers(findings: Iterable[Finding]) -> dict[tuple[str, int], set[str]]:
    """(cluster, broker) -> APIs the findings name for it (empty: none named)."""
    out: dict[tuple[str, int], set[str]] = {}
    for f in findings:
        apis = apis_of(f)
        for b in brokers_of(f):
            out.setdefault((f.cluster, b), set())
            if broker_of(f.entity) == b or f.evidence.get("broker") == b:
                out[(f.cluster, b)] |= apis
    return out


def involved_partitions(findings: Iterable[Finding]) -> set[tuple[str, str, int]]:
    return {(f.cluster, t, p) for f in findings for t, p in partitions_of(f)}


def involved_groups(findings: Iterable[Finding]) -> set[tuple[str, str, str, int]]:
    """(cluster, group, topic, partition) the findings name."""
    return {(f.cluster, g, t, p) for f in findings for g, t, p in groups_of(f)}
