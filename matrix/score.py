"""Score a scenario's findings against its ground truth.

Input: the findings handed over while the scenario ran, each with the time it was first
handed over (wall time live, captured time in a replay) in its latest state, and under
"states" every (severity, cause) it was handed over with while open. Output: for each
expected finding whether it was found (type and entity), with the right cause and
severity, and how long after the fault became visible; and every finding the ground truth
does not explain, in any of its states: on-call saw a critical page that a later
evaluation took back to a warning (crash-rf1-dc live), so the latest state alone hid a
false page. An earlier state the ground truth names `interim` is allowed (truth.py).
A scenario passes when every expectation is met within `truth.DETECT_WITHIN_S` and
nothing is unexplained.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from matrix.truth import DETECT_WITHIN_S, Expect, GroundTruth


@dataclass
class ExpectScore:
    part: str
    found: bool = False           # a finding of the type naming the entity
    cause_ok: bool = False
    severity_ok: bool = False
    seconds: float | None = None  # fault visible -> first matching finding handed over
    # fault visible -> the finding's first_seen (the start of the first window or event the
    # detector counts): the rest of `seconds` is persistence, pipeline and evaluation time
    seen_from_s: float | None = None
    # fault visible -> the start of the evaluation that first handed it over (live: its
    # clock, read once silver had committed): seen_from_s to here is persistence, pipeline
    # lag and the wait for the next evaluation; here to `seconds` is the evaluation itself
    evaluated_from_s: float | None = None
    got: str = ""                 # what was found (type cause severity entity), or ""

    @property
    def passed(self) -> bool:
        return (self.found and self.cause_ok and self.severity_ok and self.seconds is not None
                and self.seconds <= DETECT_WITHIN_S)


@dataclass
class ScenarioScore:
    scenario: str
    fault_class: str
    expects: list[ExpectScore] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(e.passed for e in self.expects) and not self.unexplained

    @property
    def seconds(self) -> float | None:
        """Time to detect the scenario: its slowest expectation; None if one is missing."""
        times = [e.seconds for e in self.expects]
        return None if not times or None in times else max(times)

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "fault_class": self.fault_class,
                "passed": self.passed, "seconds": self.seconds,
                "expects": [{**vars(e), "passed": e.passed} for e in self.expects],
                "unexplained": self.unexplained}

    def failures(self) -> list[str]:
        """Why it did not pass, one line each."""
        out = []
        for e in self.expects:
            if not e.found:
                out.append(f"{e.part}: not found")
            elif not (e.cause_ok and e.severity_ok):
                out.append(f"{e.part}: wrong cause or severity ({e.got})")
            elif e.seconds is None or e.seconds > DETECT_WITHIN_S:
                out.append(f"{e.part}: found after {e.seconds:.0f} s (> {DETECT_WITHIN_S:.0f} s)")
        return out + [f"unexplained: {u}" for u in self.unexplained]


def describe(f: dict) -> str:
    cause = f" ({f['cause']})" if f.get("cause") else ""
    return f"{f.get('severity', '?')} {f['type']}{cause} on {f['entity']}"


def states_json(states) -> list[dict]:
    """(severity, cause) pairs as the "states" of a seen finding."""
    return [{"severity": sev, "cause": cause} for sev, cause in states]


def _every_state(f: dict) -> list[dict]:
    """The finding in each state it was handed over with, its latest last."""
    earlier = [{**f, **st} for st in f.get("states", ())
               if (st["severity"], st["cause"]) != (f.get("severity"), f.get("cause"))]
    return earlier + [f]


def score(truth: GroundTruth, seen: list[tuple[int, dict]]) -> ScenarioScore:
    """`seen`: (first handed over ms, finding in its latest state, with its "states" when
    known) for every finding that appeared in the scenario's time."""
    out = ScenarioScore(truth.scenario, truth.fault_class)
    for e in truth.expect:
        out.expects.append(_score_one(e, truth.fault_ms, seen))
    for _, f in sorted(seen, key=lambda x: x[0]):
        for state in _every_state(f):
            ok = truth.explains(state) if state is f else truth.allows_before(state)
            if not ok:
                later = "" if state is f else f" (later {describe(f)})"
                out.unexplained.append(describe(state) + later)
    return out


def _score_one(e: Expect, fault_ms: int, seen: list[tuple[int, dict]]) -> ExpectScore:
    s = ExpectScore(e.part)
    named = sorted(((t, f) for t, f in seen if e.names(f)), key=lambda x: x[0])
    if not named:
        return s
    right = [(t, f) for t, f in named if e.matches(f)]
    t, f = right[0] if right else named[0]
    s.found, s.cause_ok, s.severity_ok = True, e.cause_ok(f), e.severity_ok(f)
    s.seconds = round(max(t - fault_ms, 0) / 1000, 1)
    if f.get("first_seen_ms") is not None:
        s.seen_from_s = round((f["first_seen_ms"] - fault_ms) / 1000, 1)
    if f.get("evaluated_ms") is not None:
        s.evaluated_from_s = round(max(f["evaluated_ms"] - fault_ms, 0) / 1000, 1)
    s.got = describe(f)
    return s


def class_table(scores: list[ScenarioScore]) -> list[dict]:
    """Per fault class: scenarios, passed, p50 and max seconds to detect (of the detected)."""
    rows = []
    for cls in sorted({s.fault_class for s in scores}):
        mine = [s for s in scores if s.fault_class == cls]
        times = [s.seconds for s in mine if s.seconds is not None]
        rows.append({"fault_class": cls, "scenarios": len(mine),
                     "passed": sum(s.passed for s in mine),
                     "p50_s": round(statistics.median(times), 1) if times else None,
                     "max_s": max(times) if times else None,
                     "unexplained": sum(len(s.unexplained) for s in mine)})
    return rows
