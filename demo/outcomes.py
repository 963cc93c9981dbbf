"""The findings the demo sees and what they say about each fault.

`FindingTracker` is the demo's listener on the detector query: it prints each finding
once, when it first appears, and remembers its latest state. A `FaultOutcome` is one
fault's result: the findings that showed it (its parts), the findings of its effects,
when it was detected and what the decision step did.
"""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field

from core.findings import Status


EXPLANATION_CHARS = 160   # of a finding's explanation on its console line, cut between words


def finding_line(f) -> str:
    cause = f" ({f.cause})" if f.cause else ""
    incident = f" incident {f.incident_id[:12]}" if f.incident_id else ""
    explanation = textwrap.shorten(f.explanation, EXPLANATION_CHARS, placeholder=" ...")
    return (f"{f.severity.value.upper():8s} {f.type.value}{cause} on {f.entity}{incident}: "
            f"{explanation}")


def remember_state(states: list[tuple[str, str | None]], f) -> None:
    """Add f's (severity, cause) to `states` unless it is there already."""
    state = (f.severity.value, f.cause)
    if state not in states:
        states.append(state)


class FindingTracker:
    """Keeps what the detector query hands over; prints each finding once, when it first
    appears; answers which findings appeared after a time."""

    def __init__(self, out=sys.stdout, clock=lambda: int(time.time() * 1000)):
        self.out, self.clock = out, clock
        self.first_seen: dict[str, tuple[int, object]] = {}   # finding_id -> (wall ms, finding)
        # finding_id -> the clock of the evaluation that first handed it over (it began
        # then: the rest, to the wall time above, is the evaluation's own time)
        self.evaluated_ms: dict[str, int] = {}
        self.latest: dict[str, object] = {}
        # finding_id -> every (severity, cause) it was handed over with while open, the
        # first one first: on-call saw each of them, not only the last (matrix.score judges
        # them all)
        self.states: dict[str, list[tuple[str, str | None]]] = {}
        self.evaluations = 0
        self.lock = threading.Lock()

    def __call__(self, findings, now_ms: int) -> None:
        wall = self.clock()
        with self.lock:
            self.evaluations += 1
            for f in findings:
                self.latest[f.finding_id] = f
                if f.status is Status.OPEN:
                    remember_state(self.states.setdefault(f.finding_id, []), f)
                if f.finding_id not in self.first_seen and f.status is Status.OPEN:
                    self.first_seen[f.finding_id] = (wall, f)
                    self.evaluated_ms[f.finding_id] = now_ms
                    print(f"   >> {finding_line(f)}", file=self.out, flush=True)

    def open_findings(self) -> list:
        """Every finding open in its latest state."""
        with self.lock:
            return [f for f in self.latest.values() if f.status is Status.OPEN]

    def since(self, start_ms: int) -> list[tuple[int, object]]:
        with self.lock:
            return sorted(((t, self.latest.get(fid, f)) for fid, (t, f) in self.first_seen.items()
                           if t >= start_ms), key=lambda x: x[0])


@dataclass
class FaultOutcome:
    name: str
    title: str
    started_ms: int
    detected_ms: int | None = None
    findings: list = field(default_factory=list)        # (wall ms, Finding) that showed it
    effects: list = field(default_factory=list)         # (wall ms, Finding) of its effects
    parts_seen: dict = field(default_factory=dict)       # part (or effect) -> wall ms
    action: str = "-"          # one line per finding in `findings`: what was decided about it
    notes: dict = field(default_factory=dict)

    @property
    def detected(self) -> bool:
        return self.detected_ms is not None

    @property
    def time_to_detect_s(self) -> float | None:
        return None if self.detected_ms is None else (self.detected_ms - self.started_ms) / 1000

    def to_json(self) -> dict:
        return {"fault": self.name, "title": self.title, "detected": self.detected,
                "time_to_detect_s": self.time_to_detect_s, "action": self.action,
                "findings": [{"type": f.type.value, "entity": f.entity, "cause": f.cause,
                              "incident_id": f.incident_id, "evidence": f.evidence,
                              "seen_after_s": (t - self.started_ms) / 1000}
                             for t, f in self.findings],
                "effects": [{"type": f.type.value, "entity": f.entity, "cause": f.cause,
                             "incident_id": f.incident_id,
                             "seen_after_s": (t - self.started_ms) / 1000}
                            for t, f in self.effects],
                "parts_seen_after_s": {p: (t - self.started_ms) / 1000
                                       for p, t in self.parts_seen.items()},
                "notes": self.notes}


def record_finding(o: FaultOutcome, fault, t: int, f) -> None:
    """Count a finding seen at wall time t for the fault, if it shows one of its parts or
    effects not seen yet; the fault is detected when every part (not effect) is seen."""
    part = fault.part_of(f)
    if part is None or part in o.parts_seen:
        return
    o.parts_seen[part] = t
    (o.findings if part in fault.parts else o.effects).append((t, f))
    if o.detected_ms is None and set(o.parts_seen) >= set(fault.parts):
        o.detected_ms = max(o.parts_seen[p] for p in fault.parts)


def refresh_findings(o: FaultOutcome, latest: dict) -> None:
    """Each recorded finding in its latest state (finding_id -> Finding): a finding first
    seen without its lost range or incident gets them in later evaluations."""
    o.findings = [(t, latest.get(f.finding_id, f)) for t, f in o.findings]
    o.effects = [(t, latest.get(f.finding_id, f)) for t, f in o.effects]
