"""Order findings as causal chains: each incident's root first, then what follows from it.

Correlation (detectors/correlation.py) gives every linked finding its incident's root id
(`incident_id`, the root's own finding_id) and its direct links (`related`, undirected).
A chain is a breadth-first walk of those links from the root, so a finding comes after
the finding it was reached from (`caused_by`), and nearer effects before farther ones;
among siblings the earlier first_seen goes first, then the worse type.

When the root is not among the findings given (a time range that starts after it), the
incident's earliest finding starts the walk. A member the walk does not reach (links to
findings outside the set) follows its incident's chain in time order. Incidents are
ordered worst root first, then by time; findings linked to nothing come last, each its
own chain, worst first.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from core.findings import Finding


def _by_time(f: Finding) -> tuple:
    return f.first_seen_ms, f.type.rank, f.finding_id


def _by_severity(f: Finding) -> tuple:
    return f.severity.rank, f.type.rank, f.first_seen_ms, f.finding_id


def walk_incident(members: list[Finding]) -> list[tuple[Finding, str | None, int]]:
    """(finding, caused_by id, depth) for one incident's members, root first."""
    by_id = {f.finding_id: f for f in members}
    roots = [f for f in members if f.is_root_cause]
    root = roots[0] if roots else min(members, key=_by_time)
    out = [(root, None, 0)]
    seen = {root.finding_id}
    frontier = [root]
    depth = 0
    while frontier:
        depth += 1
        nxt: list[Finding] = []
        for cause in frontier:
            effects = sorted((by_id[r] for r in cause.related
                              if r in by_id and r not in seen), key=_by_time)
            for effect in effects:
                seen.add(effect.finding_id)
                out.append((effect, cause.finding_id, depth))
                nxt.append(effect)
        frontier = nxt
    out += [(f, None, 1) for f in sorted(members, key=_by_time) if f.finding_id not in seen]
    return out


def causal_order(findings: Iterable[Finding]) -> list[tuple[Finding, str | None, int]]:
    """Every finding once, as (finding, caused_by id, depth), chains one after another."""
    incidents: dict[str, list[Finding]] = defaultdict(list)
    alone: list[Finding] = []
    for f in findings:
        if f.incident_id is None:
            alone.append(f)
        else:
            incidents[f.incident_id].append(f)
    chains = [walk_incident(members) for members in incidents.values()]
    chains.sort(key=lambda chain: _by_severity(chain[0][0]))
    out = [step for chain in chains for step in chain]
    out += [(f, None, 0) for f in sorted(alone, key=_by_severity)]
    return out
