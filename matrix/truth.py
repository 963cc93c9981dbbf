"""Ground truth of one scenario: what a correct monitor finds, and nothing more.

A scenario expects findings (`expect`: each must be found, of the right type, naming the
right entity, with an acceptable cause and severity) and tolerates others (`explained`:
effects and victims of the fault a monitor may report, such as the consumers reset by an
unclean election). Every other finding in the scenario's time is unexplained: a false
page. A healthy scenario (a rolling restart, bursty load) expects nothing and explains
nothing. Every state a finding was handed over in counts, not only its last (on-call saw
each); `interim` names the earlier states a correct monitor cannot avoid, because the
evidence that settles them comes later (an unclean election is critical until something
shows what was lost), each with why in the scenario's notes.

Entities are matched as regular expressions over the whole entity string, so one
expectation can cover "any partition of group billing" (``group:billing/orders-\\d+``).
Kept as plain data: the corpus stores it as JSON next to the telemetry it judges.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

# A finding must be handed over within this long of its fault becoming visible.
DETECT_WITHIN_S = 60.0


@dataclass(frozen=True)
class Expect:
    """One finding a correct monitor produces (or may produce, under `explained`)."""
    part: str                       # a short name for the table: "frozen broker 2"
    type: str                       # core.findings.AnomalyType value
    entity: str                     # regex over the finding's entity, whole match
    causes: tuple[str, ...] = ()    # acceptable causes; empty: any
    severities: tuple[str, ...] = ()  # acceptable severities; empty: any

    def names(self, finding: dict) -> bool:
        """Same type and entity: the finding is about this expectation."""
        return (finding["type"] == self.type
                and re.fullmatch(self.entity, finding["entity"]) is not None)

    def cause_ok(self, finding: dict) -> bool:
        return not self.causes or finding.get("cause") in self.causes

    def severity_ok(self, finding: dict) -> bool:
        return not self.severities or finding.get("severity") in self.severities

    def matches(self, finding: dict) -> bool:
        return self.names(finding) and self.cause_ok(finding) and self.severity_ok(finding)

    @classmethod
    def from_json(cls, d: dict) -> "Expect":
        return cls(d["part"], d["type"], d["entity"], tuple(d.get("causes", ())),
                   tuple(d.get("severities", ())))


@dataclass(frozen=True)
class GroundTruth:
    scenario: str
    fault_class: str                # slow_broker, slow_client, rewind, compaction,
                                    # unclean_election, healthy
    fault_ms: int                   # when the fault became visible: time to detect runs
                                    # from here
    expect: tuple[Expect, ...] = ()
    explained: tuple[Expect, ...] = ()
    notes: dict = field(default_factory=dict)
    # States a finding may show before its last one (matrix/score.py): only earlier ones.
    interim: tuple[Expect, ...] = ()

    def explains(self, finding: dict) -> bool:
        return any(e.matches(finding) for e in self.expect + self.explained)

    def allows_before(self, finding: dict) -> bool:
        """An earlier state of a finding that is explained, or an interim one."""
        return self.explains(finding) or any(e.matches(finding) for e in self.interim)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "GroundTruth":
        return cls(d["scenario"], d["fault_class"], int(d["fault_ms"]),
                   tuple(Expect.from_json(e) for e in d.get("expect", ())),
                   tuple(Expect.from_json(e) for e in d.get("explained", ())),
                   dict(d.get("notes", {})),
                   tuple(Expect.from_json(e) for e in d.get("interim", ())))
